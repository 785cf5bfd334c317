package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
)

func (m *Main) mcpCommand() *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve MCP over stdio, for Claude Desktop, Cursor and other local clients",
		Long: `Serve MCP over stdin and stdout: the client starts this command and talks
to it through pipes. Every session it creates belongs to the local owner, the
same one a keyless serve uses, so sessions are shared with it. Logs go to
stderr; stdout carries nothing but MCP.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := m.loadConfig(cmd, &f)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: logLevel(c.LogLevel)}))
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			s, err := m.open(ctx, c, log, stackOptions{maintain: true, recover: true})
			if err != nil {
				return err
			}
			defer s.close()
			// When the client goes away, Run returns and the cancelled
			// context interrupts whatever still runs in a sandbox.
			out := &lockedWriter{w: m.Stdout}
			in := newStdioFilter(m.Stdin, out, c.MaxBodyMB<<20)
			err = s.mcp.For(mcpbox.LocalOwner).Run(ctx, &mcp.IOTransport{
				Reader: io.NopCloser(in), Writer: out, MaxLineLength: c.MaxBodyMB<<20 + 1})
			if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
				return nil
			}
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().MarkHidden("host")
	cmd.Flags().MarkHidden("port")
	return cmd
}
