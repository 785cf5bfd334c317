package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/config"
)

// The server commands edit the hosted MCP server definitions, e2b-mcp's
// servers.json (config servers_file). They work on the file itself: a
// running serve notices the change within seconds. Against a serve
// (MCPBOX_URL), `server list` asks it instead.

// serversFlags are the flags every command that reads servers.json shares.
type serversFlags struct{ config string }

func (f *serversFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "config file (default "+config.DefaultFile()+" if it exists); its servers_file names servers.json")
}

// definitions opens servers.json without a manager: enough to edit it.
func (m *Main) definitions(cmd *cobra.Command, f *serversFlags) (*hosted.Hosts, config.Config, error) {
	c, err := m.loadConfig(cmd, &configFlags{file: f.config})
	if err != nil {
		return nil, c, err
	}
	if c.ServersFile == "" {
		return nil, c, &usageError{fmt.Errorf("no servers_file: set it in the config or MCPBOX_SERVERS_FILE")}
	}
	h, err := hosted.New(&hosted.Options{File: c.ServersFile})
	return h, c, err
}

func (m *Main) serverCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Add, list and remove hosted MCP server definitions (servers.json, as e2b-mcp's)",
	}
	cmd.AddCommand(m.serverAddCommand(), m.serverListCommand(), m.serverRemoveCommand(), m.serverConfigCommand())
	return cmd
}

func (m *Main) serverAddCommand() *cobra.Command {
	var f serversFlags
	var s hosted.Server
	var env, network []string
	var public bool
	cmd := &cobra.Command{
		Use:   "add NAME --command \"…\"",
		Short: "Add (or replace) a hosted MCP server definition",
		Example: `  mcpbox server add filesystem --command "npx -y @modelcontextprotocol/server-filesystem /workspace" --description "Files"
  mcpbox server add github --command "npx -y @modelcontextprotocol/server-github" --env GITHUB_PERSONAL_ACCESS_TOKEN=ghp_…
  mcpbox server add fetch --command "python3 -m mcp_server_fetch" --install-commands "pip install --user --break-system-packages mcp-server-fetch" --network-allow pypi.org --network-allow files.pythonhosted.org`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, _, err := m.definitions(cmd, &f)
			if err != nil {
				return err
			}
			defer h.Close()
			s.Name = args[0]
			if s.Env, err = serverEnv(env); err != nil {
				return err
			}
			if len(network) > 0 || public {
				s.Network = &mcpbox.NetworkPolicy{Allow: network, Public: public}
			}
			if err := h.Add(s); err != nil {
				return err
			}
			fmt.Fprintf(m.Stdout, "Added server '%s'\n   Command: %s\n", s.Name, s.Command)
			if len(s.Env) > 0 {
				fmt.Fprintf(m.Stdout, "   Environment: %s\n", strings.Join(envNames(s.Env), ", "))
			}
			if n := len(s.InstallCommands); n > 0 {
				fmt.Fprintf(m.Stdout, "   Install commands: %d commands\n", n)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&s.Command, "command", "", "the command that starts the server, speaking MCP over stdio (required)")
	cmd.Flags().StringArrayVar(&env, "env", nil, "KEY=VALUE for the server process, or KEY to take the value from your environment (repeatable); kept in servers.json (mode 0600), never on a command line in the sandbox")
	cmd.Flags().StringArrayVar(&s.InstallCommands, "install-commands", nil, "a command to run before the server starts, such as \"npm install -g pkg\" (repeatable)")
	cmd.Flags().StringVar(&s.Description, "description", "", "what the server is for")
	cmd.Flags().Float64Var(&s.TimeoutMinutes, "timeout", hosted.DefaultTimeoutMinutes, "minutes the server stays warm unused")
	cmd.Flags().StringVar(&s.Template, "template", "", "the sandbox's template (default: the host template)")
	cmd.Flags().StringArrayVar(&network, "network-allow", nil, "a domain the server (and its installs) may reach, such as registry.npmjs.org (repeatable)")
	cmd.Flags().BoolVar(&public, "network-public", false, "let the server reach any public address")
	cmd.Flags().StringArrayVar(&s.Volumes, "volume", nil, "host_path:sandbox_path[:ro] under the configured volume_roots (repeatable)")
	cmd.Flags().StringVar(&s.Scope, "scope", hosted.ScopeOwner, "owner: each caller gets an instance of its own; shared: one instance serves every caller")
	cmd.MarkFlagRequired("command")
	return cmd
}

// serverEnv parses --env for a server: K=V, or K alone to take the value
// from this process's environment, which keeps a secret off the command
// line (`GITHUB_TOKEN=… mcpbox server add gh --env GITHUB_TOKEN …`).
func serverEnv(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "--env %q: expected KEY=VALUE, or KEY to take its value from your environment", kv)
		}
		if !ok {
			if v, ok = os.LookupEnv(k); !ok {
				return nil, mcpbox.Errorf(mcpbox.EINVALID, "--env %s: %s is not set in your environment", k, k).
					WithSuggestion("export it first, or give it as KEY=VALUE")
			}
		}
		env[k] = v
	}
	return env, nil
}

func envNames(env map[string]string) []string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func (m *Main) serverListCommand() *cobra.Command {
	var f serversFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the hosted MCP servers (against MCPBOX_URL when set)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []httpserver.ServerView
			if rc := restClient(); rc != nil {
				var out struct {
					Servers []httpserver.ServerView `json:"servers"`
				}
				if err := rc.do(cmd.Context(), "GET", "/v1/servers", nil, &out, nil); err != nil {
					return err
				}
				list = out.Servers
			} else {
				h, _, err := m.definitions(cmd, &f)
				if err != nil {
					return err
				}
				defer h.Close()
				servers, err := h.Servers()
				if err != nil {
					return err
				}
				for _, s := range servers {
					list = append(list, httpserver.ViewOf(s))
				}
			}
			if asJSON {
				if list == nil {
					list = []httpserver.ServerView{}
				}
				return writeIndented(m.Stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(m.Stdout, "No servers configured.\nUse 'mcpbox server add' to add a server.")
				return nil
			}
			fmt.Fprintln(m.Stdout, "Configured MCP Servers:")
			fmt.Fprintln(m.Stdout, strings.Repeat("=", 40))
			for _, s := range list {
				fmt.Fprintf(m.Stdout, "\n%s\n   Command: %s\n", s.Name, s.Command)
				if s.Description != "" {
					fmt.Fprintf(m.Stdout, "   Description: %s\n", s.Description)
				}
				if n := len(s.InstallCommands); n > 0 {
					fmt.Fprintf(m.Stdout, "   Install commands: %d commands\n", n)
				}
				if len(s.Env) > 0 {
					fmt.Fprintf(m.Stdout, "   Environment: %s\n", strings.Join(s.Env, ", "))
				}
				fmt.Fprintf(m.Stdout, "   Timeout: %g minutes\n   Scope: %s\n", s.TimeoutMinutes, s.Scope)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (env values left out)")
	return cmd
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// confirm asks a yes/no question on the command's streams.
func (m *Main) confirm(question string) bool {
	fmt.Fprintf(m.Stderr, "%s [y/N]: ", question)
	line, _ := bufio.NewReader(m.Stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

func (m *Main) serverRemoveCommand() *cobra.Command {
	var f serversFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a hosted MCP server definition (its running instances stop)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, _, err := m.definitions(cmd, &f)
			if err != nil {
				return err
			}
			defer h.Close()
			if _, err := h.Server(args[0]); err != nil {
				return err
			}
			if !yes && !m.confirm(fmt.Sprintf("Remove server '%s'?", args[0])) {
				return &exitError{1}
			}
			if err := h.Remove(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(m.Stdout, "Removed server '%s'\n", args[0])
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func (m *Main) serverConfigCommand() *cobra.Command {
	var f serversFlags
	var show, edit, reset, yes bool
	cmd := &cobra.Command{
		Use:   "config [--show | --edit | --reset]",
		Short: "Show, edit or reset servers.json, as `e2b-mcp config` does",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, c, err := m.definitions(cmd, &f)
			if err != nil {
				return err
			}
			defer h.Close()
			path := c.ServersFile
			switch {
			case reset:
				if !yes && !m.confirm("Reset all server definitions?") {
					return &exitError{1}
				}
				if err := h.Reset(); err != nil {
					return err
				}
				fmt.Fprintln(m.Stdout, "Configuration reset")
				return nil
			case edit:
				editor := os.Getenv("VISUAL")
				if editor == "" {
					editor = os.Getenv("EDITOR")
				}
				if editor == "" {
					editor = "vi"
				}
				if _, err := os.Stat(path); os.IsNotExist(err) {
					if err := h.Reset(); err != nil { // an empty file to edit
						return err
					}
				}
				// The editor line is the user's own ($EDITOR may carry
				// flags); the path is passed as an argument, not spliced.
				e := exec.CommandContext(cmd.Context(), "/bin/sh", "-c", editor+` "$1"`, "editor", path)
				e.Stdin, e.Stdout, e.Stderr = m.Stdin, m.Stdout, m.Stderr
				if err := e.Run(); err != nil {
					return fmt.Errorf("editor %q: %w", editor, err)
				}
				if _, err := h.Servers(); err != nil {
					return fmt.Errorf("the edited file does not load: %w", err)
				}
				return nil
			default:
				fmt.Fprintf(m.Stdout, "Configuration file: %s\n", path)
				b, err := os.ReadFile(path)
				if os.IsNotExist(err) {
					fmt.Fprintln(m.Stdout, "No configuration file found.")
					return nil
				}
				if err != nil {
					return err
				}
				m.Stdout.Write(b)
				return nil
			}
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&show, "show", false, "print the file (the default)")
	cmd.Flags().BoolVar(&edit, "edit", false, "open it in $EDITOR, then check it loads")
	cmd.Flags().BoolVar(&reset, "reset", false, "remove every definition")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask before --reset")
	cmd.MarkFlagsMutuallyExclusive("show", "edit", "reset")
	return cmd
}
