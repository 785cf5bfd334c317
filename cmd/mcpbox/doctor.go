package main

import "github.com/spf13/cobra"

func (m *Main) doctorCommand() *cobra.Command {
	return &cobra.Command{Use: "doctor", Short: "Check what this host supports", RunE: func(*cobra.Command, []string) error { return nil }}
}
