package main

import (
	"fmt"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/config"
)

// quickName names the definition `mcpbox quick` makes for its one call.
const quickName = "quick"

func (m *Main) quickCommand() *cobra.Command {
	var cfgFile, params string
	var param, env, network []string
	var asJSON, public bool
	cmd := &cobra.Command{
		Use:   `quick "COMMAND" TOOL`,
		Short: "Start an MCP server from a command, call one tool, stop it (nothing saved)",
		Example: `  mcpbox quick "npx -y @modelcontextprotocol/server-everything" echo --param message=hi
  mcpbox quick "npx -y @modelcontextprotocol/server-github" search_repositories --params '{"query": "e2b"}' --env GITHUB_PERSONAL_ACCESS_TOKEN=…`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := toolParams(params, param)
			if err != nil {
				return err
			}
			vars, err := serverEnv(env)
			if err != nil {
				return err
			}
			def := hosted.Server{Name: quickName, Command: args[0], Env: vars}
			if len(network) > 0 || public {
				def.Network = &mcpbox.NetworkPolicy{Allow: network, Public: public}
			}
			if err := def.Validate(); err != nil {
				return err
			}
			var res *mcp.CallToolResult
			if rc := restClient(); rc != nil {
				res, err = rc.call(cmd.Context(), "/v1/quick", map[string]any{"command": args[0], "env": vars, "network": def.Network, "tool": args[1], "arguments": in}, m.printProgress)
			} else {
				c, cerr := m.loadConfig(cmd, &configFlags{file: cfgFile})
				if cerr != nil {
					return cerr
				}
				res, err = m.quickLocal(cmd, c, def, args[1], in)
			}
			if err != nil {
				return err
			}
			return m.printResult(res, asJSON, fmt.Sprintf("Executed %s", args[1]))
		},
	}
	cmd.Flags().StringVar(&cfgFile, "config", "", "config file (default "+config.DefaultFile()+" if it exists)")
	cmd.Flags().StringVar(&params, "params", "", "the arguments as a JSON object")
	cmd.Flags().StringArrayVar(&param, "param", nil, "key=value; a value that parses as JSON is taken as JSON (repeatable)")
	cmd.Flags().StringArrayVar(&env, "env", nil, "KEY=VALUE for the server process, or KEY to take the value from your environment (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw result as JSON")
	cmd.Flags().StringArrayVar(&network, "network-allow", nil, "a domain the server may reach, such as registry.npmjs.org (repeatable)")
	cmd.Flags().BoolVar(&public, "network-public", false, "let the server reach any public address")
	return cmd
}

// quickLocal runs def in this process for one call, with definitions in
// memory only.
func (m *Main) quickLocal(cmd *cobra.Command, c config.Config, def hosted.Server, tool string, in map[string]any) (*mcp.CallToolResult, error) {
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := m.open(cmd.Context(), c, log, stackOptions{})
	if err != nil {
		return nil, err
	}
	defer s.close()
	h, err := hosted.New(&hosted.Options{Manager: s.mgr, Logger: log, Templates: hostedTemplates{s.rt}})
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := h.Add(def); err != nil {
		return nil, err
	}
	return h.Call(cmd.Context(), mcpbox.LocalOwner, def.Name, tool, in, &hosted.CallOptions{OnProgress: m.printProgress})
}
