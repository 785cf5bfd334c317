package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/internal/config"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/template"
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
		lang, flavor, file, event, imageDir string
		tmpl                                string
		timeout                             time.Duration
		envs                                []string
		cf                                  configFlags
	)
	cmd := &cobra.Command{
		Use:   "run [flags] (CODE | --file F | -)",
		Short: "Run code once in a new sandbox, then destroy it",
		Long: `Run code once in a new sandbox: create it, run the code, stream its stdout
and stderr, destroy the sandbox and exit with the program's exit code (124
when it ran past --timeout, 125 when mcpbox itself failed).

Python runs in a kernel, so the value of the last expression is printed,
as in a notebook. JavaScript runs with node -e and shell with sh -c.

--event is handler mode (Python or JavaScript): the code defines
handler(event, context) (in JavaScript also exports.handler), which is
called with the given JSON; what it returns is printed as JSON.

Images the code displays (matplotlib plots) are written as files,
mcpbox-plot-N.png in the current directory or --image-dir, and their
paths printed on stderr.`,
		Example: `  mcpbox run 'print(1+1)'
  mcpbox run --language shell 'uname -a'
  echo 'console.log(42)' | mcpbox run -l javascript -
  mcpbox run --event '{"a": 1}' 'def handler(event, context): return event["a"] + 1'
  mcpbox run -l javascript --event '{"a": 1}' 'async function handler(event) { return event.a + 1 }'`,
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
			c, err := m.loadConfig(cmd, &cf)
			if err != nil {
				return err
			}
			env, err := parseEnv(envs)
			if err != nil {
				return err
			}
			interp := interpreters[l]
			if template.Canonical(tmpl) == mcpbox.HostTemplate {
				if err := checkInterpreter(interp[0]); err != nil {
					return err
				}
			}
			if event != "" && l == mcpbox.Shell {
				return mcpbox.Errorf(mcpbox.EINVALID, "--event (handler mode) needs --language python or javascript: shell code has no handler to call").
					WithSuggestion("define handler(event, context) in Python or JavaScript, or drop --event and read the input from --env")
			}
			if event != "" && !json.Valid([]byte(event)) {
				return mcpbox.Errorf(mcpbox.EINVALID, "--event %q is not valid JSON", event)
			}
			req := manager.CreateRequest{Template: tmpl, Flavor: flavor, Env: env, TTL: timeout + time.Minute, Ephemeral: true}
			// Python always runs in its kernel; JavaScript does for handler
			// mode, which the kernel provides.
			if l == mcpbox.Python || event != "" {
				images := &imageWriter{dir: imageDir}
				return m.runOnce(cmd.Context(), c, req, func(ctx context.Context, mgr *manager.Manager, id string) error {
					return m.runKernel(ctx, mgr, id, l, code, event, timeout, images)
				})
			}
			return m.runOnce(cmd.Context(), c, req, func(ctx context.Context, mgr *manager.Manager, id string) error {
				return m.runProcess(ctx, mgr, id, timeout, []string{interp[0], interp[1], code})
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&lang, "language", "l", "python", "python, javascript or shell")
	f.StringVar(&flavor, "flavor", mcpbox.DefaultFlavor, "sandbox size: small, medium, large or one from the config")
	f.StringVar(&tmpl, "template", "", "the sandbox's root filesystem: default (the host's), or one that mcpbox template ls lists")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "kill the program after this long (at most 1h)")
	f.StringArrayVarP(&envs, "env", "e", nil, "set an environment variable, K=V (repeatable)")
	f.StringVarP(&file, "file", "f", "", "read the code from this file")
	f.StringVar(&event, "event", "", "handler mode (python, javascript): call handler(event, context) with this JSON and print its value")
	f.StringVar(&imageDir, "image-dir", "", "write images the code displays (plots) here (default: the current directory)")
	cf.register(f)
	f.MarkHidden("host")
	f.MarkHidden("port")
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

// runOnce creates a session through the manager, as every other caller
// does (config flavors, volumes and limits apply), runs f in it and stops
// it. The session is ephemeral: its sandbox dies with this process, even
// when it is killed.
func (m *Main) runOnce(ctx context.Context, c config.Config, req manager.CreateRequest, f func(context.Context, *manager.Manager, string) error) error {
	// The program's own output owns the terminal: mcpbox says only what
	// went wrong, unless the config asks for more.
	lvl := logLevel(c.LogLevel)
	if lvl >= slog.LevelInfo {
		lvl = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: lvl}))
	s, err := m.open(ctx, c, log, stackOptions{})
	if err != nil {
		return err
	}
	defer s.close()
	sess, err := s.mgr.Create(ctx, mcpbox.LocalOwner, req)
	if err != nil {
		return err
	}
	// Stop even when ctx was cancelled (Ctrl-C): nothing may be left.
	defer s.mgr.Stop(context.WithoutCancel(ctx), mcpbox.LocalOwner, sess.ID)
	err = f(ctx, s.mgr, sess.ID)
	if err != nil && ctx.Err() != nil {
		return &exitError{130}
	}
	return err
}

// runProcess runs argv as a plain process, streaming its output.
func (m *Main) runProcess(ctx context.Context, mgr *manager.Manager, id string, timeout time.Duration, argv []string) error {
	res, err := mgr.RunCommand(ctx, mcpbox.LocalOwner, id, manager.CommandRequest{Args: argv, Timeout: timeout},
		func(stderr bool, b []byte) {
			if stderr {
				m.Stderr.Write(b)
			} else {
				m.Stdout.Write(b)
			}
		})
	if err != nil {
		if mcpbox.ErrorCode(err) == mcpbox.ETIMEOUT {
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

// runKernel runs code in the sandbox's kernel for lang: output streams as
// it comes, the last expression's value and a handler's return value are
// printed, images are written as files whose paths are printed, and an
// error prints its traceback and exits 1.
func (m *Main) runKernel(ctx context.Context, mgr *manager.Manager, id string, lang mcpbox.Language, code, event string, timeout time.Duration, images *imageWriter) error {
	req := manager.CodeRequest{Code: code, Language: string(lang), Timeout: timeout}
	if event != "" {
		req.Event = json.RawMessage(event)
	}
	var failed *mcpbox.CodeError
	timedOut := false
	err := mgr.ExecuteCode(ctx, mcpbox.LocalOwner, id, req, func(ev mcpbox.CodeEvent) {
		switch ev.Type {
		case mcpbox.EventStdout:
			io.WriteString(m.Stdout, ev.Text)
		case mcpbox.EventStderr:
			io.WriteString(m.Stderr, ev.Text)
		case mcpbox.EventResult:
			if ev.Result == nil {
				break
			}
			// In handler mode what the handler returns is the answer;
			// the cell's last value (often the handler itself) is not.
			if m.writeImages(images, ev.Result) == 0 && ev.Result.IsMainResult && ev.Text != "" && event == "" {
				fmt.Fprintln(m.Stdout, ev.Text)
			}
		case mcpbox.EventReturnValue:
			fmt.Fprintln(m.Stdout, string(ev.Value))
		case mcpbox.EventError:
			if failed == nil {
				failed = ev.Error
			}
		case mcpbox.EventEndOfExecution:
			timedOut = ev.TimedOut
		}
	})
	if err != nil {
		return fmt.Errorf("run in sandbox: %w", err)
	}
	if timedOut {
		fmt.Fprintf(m.Stderr, "mcpbox: timed out after %s; the code was interrupted\n", timeout)
		return &exitError{exitTimeout}
	}
	if failed == nil {
		return nil
	}
	if failed.Traceback != "" {
		io.WriteString(m.Stderr, failed.Traceback)
	} else {
		fmt.Fprintf(m.Stderr, "%s: %s\n", failed.Name, failed.Value)
	}
	if mod := mcpserver.MissingModule(failed.Value); failed.Name == "ModuleNotFoundError" && mod != "" {
		fmt.Fprintf(m.Stderr, "  hint: %s is not installed in the sandbox template (the host's /usr): apt-get install python3-%s; `mcpbox doctor` lists what each language has\n",
			mod, strings.ToLower(mod))
	}
	if failed.Name == "KernelExited" {
		if m := exitStatus.FindStringSubmatch(failed.Value); m != nil {
			n, _ := strconv.Atoi(m[1])
			return &exitError{n}
		}
	}
	return &exitError{1}
}

// writeImages writes res's images as files and says where on stderr. It
// returns how many it wrote.
func (m *Main) writeImages(w *imageWriter, res *mcpbox.CodeResult) int {
	n := 0
	for _, img := range []struct{ mime, data string }{{"image/png", res.PNG}, {"image/jpeg", res.JPEG}, {"image/svg+xml", res.SVG}} {
		if img.data == "" {
			continue
		}
		raw := []byte(img.data)
		if img.mime != "image/svg+xml" {
			var err error
			if raw, err = base64.StdEncoding.DecodeString(img.data); err != nil {
				fmt.Fprintf(m.Stderr, "mcpbox: an %s result could not be decoded: %v\n", img.mime, err)
				continue
			}
		}
		path, err := w.write(img.mime, raw)
		if err != nil {
			fmt.Fprintf(m.Stderr, "mcpbox: an %s result could not be written: %v\n", img.mime, err)
			continue
		}
		fmt.Fprintf(m.Stderr, "mcpbox: %s written to %s\n", img.mime, path)
		n++
	}
	return n
}

// exitStatus finds the status in a KernelExited error's value.
var exitStatus = regexp.MustCompile(`exited with status (\d+)`)

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
