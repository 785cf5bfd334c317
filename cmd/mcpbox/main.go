// Command mcpbox gives AI agents isolated, stateful places to run code.
//
// main only wires: the commands live one per file, and Main carries what
// they share so end-to-end tests can run them in-process.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/linux/fds"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// Exit codes of mcpbox's own failures, apart from a program's exit code
// that `mcpbox run` passes through (the same convention as `docker run`).
const (
	exitTimeout  = 124 // the program ran past --timeout
	exitInternal = 125 // mcpbox itself failed
	exitUsage    = 2   // bad flags or arguments
)

func main() {
	// Re-exec entry points, listed here and nowhere else, before any other
	// start-up work: a sandbox's PID 1 is this binary, as `mcpbox agent
	// --sandbox-init`.
	if local.IsInit(os.Args[1:]) {
		local.InitMain()
	}
	// Descriptors this process inherited without close-on-exec (from a
	// shell, a service manager) must not reach a sandbox through a child.
	if goruntime.GOOS == "linux" {
		if err := fds.CloseOnExec(3); err != nil {
			fmt.Fprintln(os.Stderr, "mcpbox: mark inherited descriptors close-on-exec:", err)
			os.Exit(exitInternal)
		}
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(NewMain().Run(ctx, os.Args[1:]))
}

// tuneGC lets the heap grow to five times its live size between
// collections, not twice, unless GOGC says otherwise. The MCP SDK's JSON
// decoder allocates a 32 KiB buffer for every value it parses, several per
// call, over a live heap of a few MiB: at Go's default, a server under load
// spent a third of its CPU collecting. GOMEMLIMIT still caps the heap.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// Main is the program: its streams and the state its commands share.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Home overrides $MCPBOX_HOME when set.
	Home string
}

// NewMain returns a Main on the process's standard streams.
func NewMain() *Main {
	return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

// exitError carries an exit code through cobra.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// usageError marks bad flags or arguments.
type usageError struct{ error }

// Run runs the command line args and returns the exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	root := m.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(m.Stderr, "mcpbox:", err)
	for _, s := range mcpbox.ErrorSuggestions(err) {
		fmt.Fprintln(m.Stderr, "  hint:", s)
	}
	var ue *usageError
	if errors.As(err, &ue) || mcpbox.ErrorCode(err) == mcpbox.EINVALID || mcpbox.ErrorCode(err) == mcpbox.ESESSION || isCobraUsage(err) {
		return exitUsage
	}
	return exitInternal
}

func (m *Main) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcpbox",
		Short:         "Isolated, stateful sandboxes for AI agents, over MCP and an E2B-compatible API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(m.Stdin)
	root.SetOut(m.Stdout)
	root.SetErr(m.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(m.runCommand(), m.serveCommand(), m.mcpCommand(), m.keyCommand(), m.sessionCommand(), m.execCommand(), m.configCommand(), m.doctorCommand(), m.versionCommand(), m.agentCommand())
	root.AddCommand(m.serverCommand(), m.toolsCommand(), m.quickCommand())
	root.AddCommand(m.templateCommand())
	return root
}

// runtime opens the local runtime under the configured home.
func (m *Main) runtime() (*local.Runtime, error) {
	return local.New(&local.Options{Home: m.Home})
}

// isCobraUsage recognises the argument errors cobra itself returns, which
// carry no type of their own.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "unknown flag", "unknown shorthand"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
