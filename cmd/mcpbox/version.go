package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
)

func (m *Main) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the mcpbox version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(m.Stdout, "mcpbox %s (envd protocol %s, %s, %s/%s)\n",
				mcpbox.Version, mcpbox.EnvdVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
