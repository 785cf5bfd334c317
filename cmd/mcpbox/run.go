package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// interpreters maps a language to the program and flag that run code
// given on the command line.
var interpreters = map[mcpbox.Language][2]string{
	mcpbox.Python:     {"python3", "-c"},
	mcpbox.JavaScript: {"node", "-e"},
	mcpbox.Shell:      {"sh", "-c"},
}

func (m *Main) runCommand() *cobra.Command {
	var (
		lang, flavor, file, event string
		timeout                   time.Duration
		envs                      []string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] (CODE | --file F | -)",
		Short: "Run code once in a new sandbox, then destroy it",
		Long: `Run code once in a new sandbox: create it, run the code, stream its stdout
and stderr, destroy the sandbox and exit with the program's exit code (124
when it ran past --timeout, 125 when mcpbox itself failed).

Python runs in a kernel, so the value of the last expression is printed,
as in a notebook, and --event calls the code's handler(event, context) with
the given JSON and prints what it returns. JavaScript runs with node -e and
shell with sh -c.`,
		Example: `  mcpbox run 'print(1+1)'
  mcpbox run --language shell 'uname -a'
  echo 'console.log(42)' | mcpbox run -l javascript -
  mcpbox run --event '{"a": 1}' 'def handler(event, context): return event["a"] + 1'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := mcpbox.ParseLanguage(lang)
			if err != nil {
				return err
			}
			code, err := m.readCode(args, file)
			if err != nil {
				return err
			}
			if err := mcpbox.ValidateTimeout(timeout); err != nil {
				return err
			}
			fl, err := mcpbox.LookupFlavor(flavor)
			if err != nil {
				return err
			}
			env, err := parseEnv(envs)
			if err != nil {
				return err
			}
			interp := interpreters[l]
			if err := checkInterpreter(interp[0]); err != nil {
				return err
			}
			if event != "" && l != mcpbox.Python {
				return mcpbox.Errorf(mcpbox.EINVALID, "--event needs --language python: handler mode runs in the Python kernel")
			}
			if event != "" && !json.Valid([]byte(event)) {
				return mcpbox.Errorf(mcpbox.EINVALID, "--event %q is not valid JSON", event)
			}
			if l == mcpbox.Python {
				return m.runOnce(cmd.Context(), fl, env, timeout, func(ctx context.Context, c *agentclient.Client) error {
					return m.runKernel(ctx, c, code, event, timeout)
				})
			}
			return m.runOnce(cmd.Context(), fl, env, timeout, func(ctx context.Context, c *agentclient.Client) error {
				return m.runProcess(ctx, c, timeout, agentclient.Command{Cmd: interp[0], Args: []string{interp[1], code}})
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&lang, "language", "l", "python", "python, javascript or shell")
	f.StringVar(&flavor, "flavor", mcpbox.DefaultFlavor, "sandbox size: small, medium or large")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "kill the program after this long (at most 1h)")
	f.StringArrayVarP(&envs, "env", "e", nil, "set an environment variable, K=V (repeatable)")
	f.StringVarP(&file, "file", "f", "", "read the code from this file")
	f.StringVar(&event, "event", "", "handler mode: call handler(event, context) with this JSON and print its value")
	return cmd
}

// readCode takes the code from exactly one of: an argument, --file, or
// standard input ("-").
func (m *Main) readCode(args []string, file string) (string, error) {
	switch {
	case len(args) > 1:
		return "", &usageError{fmt.Errorf("expected one CODE argument, got %d (quote the code)", len(args))}
	case len(args) == 1 && file != "":
		return "", &usageError{errors.New("give the code as an argument or with --file, not both")}
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", &usageError{fmt.Errorf("read --file: %w", err)}
		}
		return string(b), nil
	case len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(m.Stdin)
		if err != nil {
			return "", fmt.Errorf("read code from stdin: %w", err)
		}
		return string(b), nil
	case len(args) == 1:
		return args[0], nil
	}
	return "", &usageError{errors.New("no code: give CODE, --file F, or - to read standard input")}
}

func parseEnv(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "--env %q: expected K=V", kv)
		}
		env[k] = v
	}
	return env, nil
}

// checkInterpreter looks for prog in the sandbox template, which is the
// host's /usr.
func checkInterpreter(prog string) error {
	if _, err := exec.LookPath("/usr/bin/" + prog); err == nil {
		return nil
	}
	if _, err := exec.LookPath("/usr/local/bin/" + prog); err == nil {
		return nil
	}
	pkg := map[string]string{"python3": "python3", "node": "nodejs", "sh": "dash"}[prog]
	return mcpbox.Errorf(mcpbox.EUNSUPPORTED, "%s is not installed in the sandbox template (the host's /usr)", prog).
		WithSuggestion("install it on the host: apt-get install " + pkg)
}

// runOnce creates a sandbox, runs f against its agent and destroys it.
func (m *Main) runOnce(ctx context.Context, fl mcpbox.Flavor, env map[string]string, timeout time.Duration, f func(context.Context, *agentclient.Client) error) error {
	rt, err := m.runtime()
	if err != nil {
		return err
	}
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: fl, Env: env})
	if err != nil {
		return err
	}
	// Destroy even when ctx was cancelled (Ctrl-C): nothing may be left.
	defer rt.Destroy(context.WithoutCancel(ctx), sb.ID)
	client := agentclient.New(sb.Endpoint)
	defer client.Close()
	err = f(ctx, client)
	if err != nil && ctx.Err() != nil {
		return &exitError{130}
	}
	return err
}

// runProcess runs c as a plain process.
func (m *Main) runProcess(ctx context.Context, client *agentclient.Client, timeout time.Duration, c agentclient.Command) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := client.Run(rctx, c, m.Stdout, m.Stderr)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(m.Stderr, "mcpbox: timed out after %s; the program was killed\n", timeout)
			return &exitError{exitTimeout}
		}
		return fmt.Errorf("run in sandbox: %w", err)
	}
	if !res.Exited {
		return &exitError{128 + signalNumber(res.Status)}
	}
	if res.ExitCode != 0 {
		return &exitError{res.ExitCode}
	}
	return nil
}

// runKernel runs code in the sandbox's Python kernel: output streams as it
// comes, the last expression's value and a handler's return value are
// printed, and an error prints its traceback and exits 1.
func (m *Main) runKernel(ctx context.Context, client *agentclient.Client, code, event string, timeout time.Duration) error {
	req := agentclient.ExecuteRequest{Code: code, Language: "python", Timeout: timeout.Seconds()}
	if event != "" {
		req.Event = json.RawMessage(event)
	}
	start := time.Now()
	var failed agentclient.Event
	err := client.Execute(ctx, req, func(ev agentclient.Event) {
		switch ev.Type() {
		case "stdout":
			io.WriteString(m.Stdout, ev.Text())
		case "stderr":
			io.WriteString(m.Stderr, ev.Text())
		case "result":
			if ev["is_main_result"] == true && ev.Text() != "" {
				fmt.Fprintln(m.Stdout, ev.Text())
			}
		case "return_value":
			b, _ := json.Marshal(ev["value"])
			fmt.Fprintln(m.Stdout, string(b))
		case "error":
			if failed == nil {
				failed = ev
			}
		}
	})
	if err != nil {
		return fmt.Errorf("run in sandbox: %w", err)
	}
	if failed == nil {
		return nil
	}
	name, _ := failed["name"].(string)
	if (name == "KeyboardInterrupt" || name == "KernelRestarted") && time.Since(start) >= timeout {
		fmt.Fprintf(m.Stderr, "mcpbox: timed out after %s; the code was interrupted\n", timeout)
		return &exitError{exitTimeout}
	}
	if tb, _ := failed["traceback"].(string); tb != "" {
		io.WriteString(m.Stderr, tb)
	} else {
		fmt.Fprintf(m.Stderr, "%s: %v\n", name, failed["value"])
	}
	if name == "SystemExit" {
		if n, err := strconv.Atoi(fmt.Sprint(failed["value"])); err == nil {
			return &exitError{n}
		}
	}
	return &exitError{1}
}

// signalNumber recovers the signal from a status such as "signal: killed".
func signalNumber(status string) int {
	name := strings.TrimPrefix(status, "signal: ")
	for s := syscall.Signal(1); s < 65; s++ {
		if s.String() == name {
			return int(s)
		}
	}
	return int(syscall.SIGKILL)
}
