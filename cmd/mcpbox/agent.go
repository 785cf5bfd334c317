package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox/agent"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// envdPorts are where E2B's SDKs reach a sandbox: envd and the code
// interpreter. The agent serves both APIs on each.
var envdPorts = []string{":49983", ":49999"}

func (m *Main) agentCommand() *cobra.Command {
	var (
		file, home, cwd, root string
		listen, envs          []string
		uid, gid              int
		prestart              []string
		sandboxInit           bool
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the in-sandbox agent (envd and code interpreter APIs)",
		Long: `Run the agent that lives inside every sandbox: E2B's envd API (processes,
files, health) and the code interpreter's (/execute, /contexts), with its
Python, JavaScript and shell kernels, on every --listen address.

The local runtime starts it as each sandbox's PID 1 after setting the
sandbox up; a Kubernetes pod runs it as its entry point. A config file
(JSON: uid, gid, home, cwd, env, root, max_file_bytes, max_output_bytes,
kernel_modules, prestart, deadline) sets what the flags do not.`,
		Example: `  mcpbox agent                               # :49983 and :49999, as the current user
  mcpbox agent --listen 127.0.0.1:49983 --uid 1000 --gid 1000 --prestart python`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sandboxInit {
				// main recognises this first; here only for completeness.
				local.InitMain()
			}
			c := &agent.Config{}
			if file != "" {
				var err error
				if c, err = agent.ReadConfig(file); err != nil {
					return &usageError{err}
				}
			}
			f := cmd.Flags()
			if f.Changed("uid") {
				c.UID = uid
			}
			if f.Changed("gid") {
				c.GID = gid
			}
			if f.Changed("home") {
				c.Home = home
			}
			if f.Changed("cwd") {
				c.Cwd = cwd
			}
			if f.Changed("root") {
				c.Root = root
			}
			if len(envs) > 0 {
				env, err := parseEnv(envs)
				if err != nil {
					return err
				}
				if c.Env == nil {
					c.Env = c.Options().Env
				}
				for k, v := range env {
					c.Env[k] = v
				}
			}
			if f.Changed("prestart") {
				c.Prestart = prestart
			}
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, addr := range listen {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return fmt.Errorf("listen on %s: %w", addr, err)
				}
				lns = append(lns, ln)
			}
			err := agent.Run(cmd.Context(), c, func() {
				fmt.Fprintf(m.Stderr, "mcpbox agent listening on %v\n", listen)
			}, lns...)
			if errors.Is(err, agent.ErrDeadlinePassed) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&listen, "listen", envdPorts, "TCP address to serve on (repeatable)")
	f.StringVar(&file, "config", "", "agent config file (JSON)")
	f.IntVar(&uid, "uid", 0, "uid user processes run as (default: the agent's own)")
	f.IntVar(&gid, "gid", 0, "gid user processes run as (default: the agent's own)")
	f.StringVar(&home, "home", "", "the user's home directory (default /home/user)")
	f.StringVar(&cwd, "cwd", "", "where processes and kernels start (default /workspace)")
	f.StringVar(&root, "root", "", "directory the file API is confined to (default /)")
	f.StringArrayVarP(&envs, "env", "e", nil, "environment variable of user processes, K=V (repeatable)")
	f.StringSliceVar(&prestart, "prestart", nil, "languages whose kernel starts at once (python, javascript, shell)")
	// The local runtime starts a sandbox's PID 1 as `mcpbox agent
	// --sandbox-init`, with descriptors only it hands over: not for people.
	f.BoolVar(&sandboxInit, "sandbox-init", false, "set up a local sandbox, then serve (internal: the local runtime's PID 1)")
	f.MarkHidden("sandbox-init")
	return cmd
}
