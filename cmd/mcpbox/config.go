package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcpbox/mcpbox/internal/config"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// configFlags are the flags every command that reads the config shares.
type configFlags struct {
	file string
	host string
	port int
}

func (f *configFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "config", "", "config file (default "+config.DefaultFile()+" if it exists)")
	fs.StringVar(&f.host, "host", "", "address to listen on (config host, MCPBOX_HOST; default 127.0.0.1)")
	fs.IntVar(&f.port, "port", 0, "port to listen on (config port, MCPBOX_PORT; default 8080)")
}

// load builds the effective config: defaults, file, environment, flags.
func (m *Main) loadConfig(cmd *cobra.Command, f *configFlags) (config.Config, error) {
	c, err := config.Load(f.file, os.Environ())
	if err != nil {
		return c, &usageError{err}
	}
	if cmd.Flags().Changed("host") {
		c.Host = f.host
	}
	if cmd.Flags().Changed("port") {
		c.Port = f.port
	}
	if m.Home != "" {
		c.Home = m.Home
	}
	if err := c.Validate(); err != nil {
		return c, &usageError{err}
	}
	return c, nil
}

func (m *Main) configCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect mcpbox's configuration"}
	var f configFlags
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration (defaults, file, MCPBOX_* environment, flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := m.loadConfig(cmd, &f)
			if err != nil {
				return err
			}
			if c.Home == "" {
				// What the runtime will use, not the empty "default".
				c.Home = local.DefaultHome()
			}
			fmt.Fprint(m.Stdout, c.YAML())
			return nil
		},
	}
	f.register(show.Flags())
	cmd.AddCommand(show)
	return cmd
}
