package local_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/gen/filesystempb"
	"github.com/mcpbox/mcpbox/gen/processpb"
)

// TestAgentOverSocket exercises the agent's Connect services and file
// routes through the real Unix socket of a live sandbox, in both codecs.
func TestAgentOverSocket(t *testing.T) {
	rt := newRuntime(t)
	sb, _ := newTinySandbox(t, rt)
	for _, codec := range []string{"proto", "json"} {
		c := agentclient.ForSandbox(rt, sb.ID, codecOption(codec)...)
		defer c.Close()
		t.Run("codec="+codec, func(t *testing.T) {
			t.Run("languages", func(t *testing.T) {
				for _, tc := range []struct {
					argv []string
					want string
				}{
					{[]string{"python3", "-c", "import sys; print(sys.version_info[0])"}, "3\n"},
					{[]string{"node", "-e", "console.log(typeof require)"}, "function\n"},
					{[]string{"sh", "-c", "echo $((1+2))"}, "3\n"},
					{[]string{"bash", "-c", "echo ${BASH_VERSION:0:1}"}, "5\n"},
				} {
					out, _, res := run(t, c, 20*time.Second, tc.argv...)
					if out != tc.want || res.ExitCode != 0 {
						t.Errorf("%q: %q exit %d, want %q", tc.argv, out, res.ExitCode, tc.want)
					}
				}
			})
			t.Run("non-utf8 output", func(t *testing.T) {
				out, _, _ := run(t, c, 10*time.Second, "printf", `\377\376\000abc\200`)
				if want := "\xff\xfe\x00abc\x80"; out != want {
					t.Errorf("got %q, want %q", out, want)
				}
			})
			t.Run("concurrent processes", func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make(chan error, 16)
				for i := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var out bytes.Buffer
						res, err := c.Run(context.Background(), agentclient.Command{Cmd: "sh", Args: []string{"-c", fmt.Sprintf("sleep 0.2; echo %d; exit %d", i, i)}}, &out, nil)
						if err != nil {
							errs <- err
						} else if out.String() != fmt.Sprintf("%d\n", i) || res.ExitCode != i {
							errs <- fmt.Errorf("process %d: %q exit %d", i, out.String(), res.ExitCode)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			})
			t.Run("stdin", func(t *testing.T) {
				var out bytes.Buffer
				res, err := c.Run(context.Background(), agentclient.Command{Cmd: "sh", Args: []string{"-c", "tr a-z A-Z; echo done"}, Stdin: strings.NewReader("hello\n")}, &out, nil)
				if err != nil || out.String() != "HELLO\ndone\n" || res.ExitCode != 0 {
					t.Errorf("got %q, %v, %v", out.String(), res, err)
				}
			})
			t.Run("signal", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				tag := "sleeper-" + codec
				stream, err := c.Process.Start(ctx, connect.NewRequest(&processpb.StartRequest{
					Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"100"}}, Tag: &tag}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
					t.Fatalf("no start event: %v", stream.Err())
				}
				list, err := c.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
				if err != nil || len(list.Msg.GetProcesses()) == 0 {
					t.Fatalf("List: %v %v", list, err)
				}
				sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}
				if _, err := c.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGTERM})); err != nil {
					t.Fatal(err)
				}
				for stream.Receive() {
					if end := stream.Msg().GetEvent().GetEnd(); end != nil {
						if end.GetExited() || !strings.Contains(end.GetStatus(), "terminated") {
							t.Errorf("end = %v, want terminated by SIGTERM", end)
						}
						return
					}
				}
				t.Fatalf("no end event: %v", stream.Err())
			})
			t.Run("files", func(t *testing.T) { testFiles(t, c) })
		})
	}
}

func testFiles(t *testing.T, c *agentclient.Client) {
	ctx := context.Background()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	random := make([]byte, 3<<20)
	rand.Read(random)
	for name, content := range map[string][]byte{"all-bytes.bin": all, "random.bin": random, "empty": nil} {
		path := "/workspace/data/" + name
		if err := c.Upload(ctx, path, bytes.NewReader(content)); err != nil {
			t.Fatalf("upload %s: %v", path, err)
		}
		rc, err := c.Download(ctx, path)
		if err != nil {
			t.Fatalf("download %s: %v", path, err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, content) {
			t.Errorf("%s: downloaded %d bytes differ from the %d uploaded", name, len(got), len(content))
		}
	}
	fs := c.Filesystem
	st, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/workspace/data/random.bin"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.GetEntry(); e.GetSize() != int64(len(random)) || e.GetOwner() != "user" || e.GetType() != filesystempb.FileType_FILE_TYPE_FILE {
		t.Errorf("stat = %v", e)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/workspace/a/b"})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "/workspace/data/empty", Destination: "/workspace/a/b/moved"})); err != nil {
		t.Fatal(err)
	}
	ls, err := fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/workspace", Depth: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ls.Msg.GetEntries() {
		paths = append(paths, e.GetPath())
	}
	if !strings.Contains(strings.Join(paths, " "), "/workspace/a/b/moved") {
		t.Errorf("ListDir depth 3 = %v, want /workspace/a/b/moved among them", paths)
	}
	if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/workspace/a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/workspace/a"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("stat after remove: %v, want not found", err)
	}
	if _, err := c.Download(ctx, "/workspace/nope"); !isHTTPStatus(err, 404) {
		t.Errorf("download of a missing file: %v, want 404", err)
	}
	c.Process.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "rm", Args: []string{"-rf", "/workspace/data"}}}))
}

func isHTTPStatus(err error, status int) bool {
	var he *agentclient.HTTPError
	return errors.As(err, &he) && he.Status == status
}

// TestFileLimits checks the upload size limit (413) and a full disk (507).
func TestFileLimits(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	ctx := context.Background()
	big := bytes.Repeat([]byte{'x'}, int(tiny.DiskBytes)+1)
	if err := c.Upload(ctx, "/workspace/big", bytes.NewReader(big)); !isHTTPStatus(err, 413) {
		t.Errorf("upload above the limit: %v, want 413", err)
	}
	half := big[:tiny.DiskBytes*3/5]
	if err := c.Upload(ctx, "/workspace/one", bytes.NewReader(half)); err != nil {
		t.Fatalf("first upload: %v", err)
	}
	if err := c.Upload(ctx, "/workspace/two", bytes.NewReader(half)); !isHTTPStatus(err, 507) {
		t.Errorf("upload onto a full disk: %v, want 507", err)
	}
	out, _ := mustSh(t, c, "ls /workspace")
	if strings.Contains(out, "two") || strings.Contains(out, "big") {
		t.Errorf("partial files left behind: %q", out)
	}
}
