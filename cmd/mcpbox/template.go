package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/template"
)

// templateCatalog is the manager's view of rt's templates; nil (only the
// host template) when the store cannot be opened, which is logged.
func templateCatalog(rt *local.Runtime, log *slog.Logger) mcpbox.TemplateCatalog {
	s, err := rt.Templates()
	if err != nil {
		log.Error("templates unavailable: only the host template can be used", "err", err)
		return nil
	}
	return s
}

func (m *Main) templateCommand() *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Manage the root filesystems sandboxes start from (build, import, pull, commit, ls, rm, inspect, export)",
		Long: `A template is a root filesystem made of content-addressed layers (stored
once each under $MCPBOX_HOME/templates, shared between templates) plus its
env, working directory and languages. Sandboxes mount its layers as overlay
lower layers: nothing is copied when one starts. "default" (alias "base") is
the host's own /usr; "code-interpreter-v1" is an alias of "code-interpreter".

Built-in recipes (python, node, code-interpreter) are built by
"mcpbox template build NAME"; a session asking for one not built yet is
refused with that command, never made to wait for a build.`,
	}
	f.register(cmd.PersistentFlags())
	cmd.PersistentFlags().MarkHidden("host")
	cmd.PersistentFlags().MarkHidden("port")
	// open returns the runtime and its template store, which refuses to
	// remove a template live sandboxes or the config's pools use.
	open := func(cmd *cobra.Command) (*local.Runtime, *template.Store, error) {
		c, err := m.loadConfig(cmd, &f)
		if err != nil {
			return nil, nil, err
		}
		rt, err := local.New(&local.Options{Home: c.Home})
		if err != nil {
			return nil, nil, err
		}
		s, err := rt.Templates()
		if err != nil {
			return nil, nil, err
		}
		return rt, s.WithInUse(func(ctx context.Context, name string) ([]string, error) {
			users, err := rt.TemplateUsers(ctx, name)
			for _, p := range c.Pools {
				if template.Canonical(p.Template) == name && p.Size > 0 {
					users = append(users, "the config's warm pool "+name+"/"+p.Flavor)
				}
			}
			return users, err
		}), nil
	}
	progress := func(msg string) { fmt.Fprintln(m.Stderr, msg) }
	cmd.AddCommand(m.templateLs(open), m.templateInspect(open), m.templateRm(open),
		m.templateImport(open, progress), m.templatePull(open, progress), m.templateCommit(open, progress),
		m.templateExport(open, progress), m.templateBuild(open, progress))
	return cmd
}

type templateOpener func(cmd *cobra.Command) (*local.Runtime, *template.Store, error)

func (m *Main) templateLs(open templateOpener) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List templates (and recipes not built yet)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			ts, err := s.List()
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(m.Stdout).Encode(ts)
			}
			tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tLAYERS\tSIZE\tLANGUAGES\tSOURCE\tCREATED")
			have := map[string]bool{}
			for _, t := range ts {
				have[t.Name] = true
				created := "-"
				if !t.Created.IsZero() {
					created = t.Created.Local().Format(time.DateTime)
				}
				size := "-"
				if t.Name != mcpbox.HostTemplate {
					size = fmt.Sprintf("%.1f MB", float64(t.Size)/1e6)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, layerCount(t), size, langList(t.Languages), t.Source, created)
			}
			for _, name := range template.RecipeNames() {
				if !have[name] {
					fmt.Fprintf(tw, "%s\t-\t-\t-\trecipe, not built (mcpbox template build %s)\t-\n", name, name)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// layerCount is a template's layers as ls shows them: "host+N" when they
// go on top of the host's system (a commit of a host-template session).
func layerCount(t *mcpbox.Template) string {
	if t.HostSystem {
		return fmt.Sprintf("host+%d", len(t.Layers))
	}
	return fmt.Sprint(len(t.Layers))
}

func langList(ls []mcpbox.Language) string {
	var out []string
	for _, l := range ls {
		out = append(out, string(l))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func (m *Main) templateInspect(open templateOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a template's record as JSON (its layers, env, user, workdir, languages)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			t, err := s.Get(args[0])
			if err != nil {
				return err
			}
			enc := json.NewEncoder(m.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(t)
		},
	}
}

func (m *Main) templateRm(open templateOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove templates, and the layers no other template uses (refused while a session or pool uses one)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := s.Remove(cmd.Context(), name); err != nil {
					return err
				}
				fmt.Fprintln(m.Stdout, name)
			}
			return nil
		},
	}
}

func (m *Main) templateImport(open templateOpener, progress template.Progress) *cobra.Command {
	return &cobra.Command{
		Use:   "import NAME PATH",
		Short: "Make a template from an OCI image layout directory or an image tarball (docker save, podman save)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			t, err := s.Import(cmd.Context(), args[0], args[1], progress)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, t.Name)
			return nil
		},
	}
}

func (m *Main) templatePull(open templateOpener, progress template.Progress) *cobra.Command {
	var insecure bool
	cmd := &cobra.Command{
		Use:   "pull NAME REF [--insecure]",
		Short: "Make a template from an image in a registry (credentials from ~/.docker/config.json)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			t, err := s.Pull(cmd.Context(), args[0], args[1], &template.PullOptions{Insecure: insecure}, progress)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, t.Name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow plain HTTP and unverified TLS (a registry on this machine)")
	return cmd
}

func (m *Main) templateCommit(open templateOpener, progress template.Progress) *cobra.Command {
	return &cobra.Command{
		Use:   "commit SESSION NAME",
		Short: "Make a template of a running session: its template plus everything it changed, as a new layer (on the host template: what it wrote outside the host's /usr)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, s, err := open(cmd)
			if err != nil {
				return err
			}
			if err := mcpbox.ValidateID(args[0]); err != nil {
				return err
			}
			parent, err := rt.SandboxTemplate(args[0])
			if err != nil {
				return err
			}
			upper, err := rt.UpperDir(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			t, err := s.Commit(cmd.Context(), args[1], parent, upper, progress)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, t.Name)
			return nil
		},
	}
}

func (m *Main) templateExport(open templateOpener, progress template.Progress) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "export NAME --oci DIR",
		Short: "Write a template as an OCI image layout (for any OCI runtime or registry)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return &usageError{fmt.Errorf("--oci DIR is required: the OCI image layout to write")}
			}
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			d, err := s.Export(cmd.Context(), args[0], dir, progress)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, d)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "oci", "", "the OCI image layout directory to write (made when missing)")
	return cmd
}

func (m *Main) templateBuild(open templateOpener, progress template.Progress) *cobra.Command {
	var o template.BuildOptions
	var packages string
	cmd := &cobra.Command{
		Use:   "build NAME [--packages P1,P2,...] [--suite SUITE] [--mirror URL]",
		Short: "Build a Debian template from this machine's apt sources (mmdebstrap or debootstrap); built-in recipes: " + strings.Join(template.RecipeNames(), ", "),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := open(cmd)
			if err != nil {
				return err
			}
			for _, p := range strings.Split(packages, ",") {
				if p = strings.TrimSpace(p); p != "" {
					o.Packages = append(o.Packages, p)
				}
			}
			t, err := s.Build(cmd.Context(), args[0], &o, progress)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, t.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&packages, "packages", "", "Debian packages to install, comma-separated (added to a recipe's)")
	cmd.Flags().StringVar(&o.Suite, "suite", "", "Debian suite; default this machine's (/etc/os-release)")
	cmd.Flags().StringVar(&o.Mirror, "mirror", "", "apt mirror URL; default the first of this machine's apt sources")
	return cmd
}
