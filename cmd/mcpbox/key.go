package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func (m *Main) keyCommand() *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage API keys for serve (create, list, revoke)",
		Long: `API keys authenticate callers of serve's HTTP endpoints. Each key belongs
to an owner; an owner sees only its own sessions. Clients send a key as
"Authorization: Bearer <key>" or "X-API-Key: <key>". Once any key exists,
requests without one get 401. Only a hash of each key is stored.`,
	}
	f.register(cmd.PersistentFlags())
	cmd.PersistentFlags().MarkHidden("host")
	cmd.PersistentFlags().MarkHidden("port")
	open := func(cmd *cobra.Command) (*sqlite.Store, error) {
		c, err := m.loadConfig(cmd, &f)
		if err != nil {
			return nil, err
		}
		home := c.Home
		if home == "" {
			home = local.DefaultHome()
		}
		if err := os.MkdirAll(home, 0o700); err != nil {
			return nil, err
		}
		return sqlite.Open(filepath.Join(home, "mcpbox.db"))
	}

	var owner, name string
	create := &cobra.Command{
		Use:   "create --owner OWNER [--name NAME]",
		Short: "Create a key and print it (once: it cannot be shown again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if owner == "" {
				return &usageError{fmt.Errorf("--owner is required: the tenant whose sessions this key reaches")}
			}
			secret, k, hash, err := apikey.Generate(owner, name)
			if err != nil {
				return &usageError{err}
			}
			st, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.PutKey(cmd.Context(), k, hash); err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, secret)
			fmt.Fprintf(m.Stderr, "created key %s for owner %q; store it now, it will not be shown again\n", k.ID, k.Owner)
			return nil
		},
	}
	create.Flags().StringVar(&owner, "owner", "", "the owner (tenant) the key acts as: letters, digits, '_', '.', '-'")
	create.Flags().StringVar(&name, "name", "", "a note to tell keys apart")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := st.ListKeys(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if keys == nil {
					keys = []*mcpbox.APIKey{}
				}
				enc := json.NewEncoder(m.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(keys)
			}
			tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tOWNER\tNAME\tCREATED\tREVOKED")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", k.ID, k.Owner, k.Name, k.Created.Format(time.RFC3339), k.Revoked)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a key: it stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.RevokeKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(m.Stderr, "revoked key %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}
