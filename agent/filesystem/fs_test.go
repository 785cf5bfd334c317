package filesystem_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent/filesystem"
	"github.com/mcpbox/mcpbox/gen/filesystempb"
	"github.com/mcpbox/mcpbox/gen/filesystempb/filesystempbconnect"
)

type env struct {
	root, outside string
	url           string
	clients       map[string]filesystempbconnect.FilesystemClient
}

func setup(t *testing.T, maxBytes int64) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.root + "/home/user", e.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	svc := filesystem.New(&filesystem.Options{Root: e.root, Home: "/home/user", MaxFileBytes: maxBytes})
	mux := http.NewServeMux()
	mux.Handle(filesystempbconnect.NewFilesystemHandler(svc))
	mux.Handle("/files", svc.FilesHandler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	e.url = srv.URL
	e.clients = map[string]filesystempbconnect.FilesystemClient{
		"proto": filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL),
		"json":  filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
	}
	return e
}

func (e *env) upload(t *testing.T, path string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(e.url+"/files?path="+url.QueryEscape(path), "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) download(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(e.url + "/files?path=" + url.QueryEscape(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestRPCRoundTrip(t *testing.T) {
	e := setup(t, 0)
	for codec, c := range e.clients {
		t.Run(codec, func(t *testing.T) {
			ctx := context.Background()
			dir := "/work-" + codec
			if _, err := c.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: dir + "/a/b"})); err != nil {
				t.Fatal(err)
			}
			if _, err := c.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: dir + "/a/b"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
				t.Errorf("second MakeDir: %v, want already exists", err)
			}
			e.upload(t, dir+"/a/b/f.txt", []byte("hello"))
			st, err := c.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: dir + "/a/b/f.txt"}))
			if err != nil {
				t.Fatal(err)
			}
			if en := st.Msg.GetEntry(); en.GetSize() != 5 || en.GetName() != "f.txt" || en.GetPath() != dir+"/a/b/f.txt" || en.GetType() != filesystempb.FileType_FILE_TYPE_FILE || en.GetPermissions() != "-rw-r--r--" {
				t.Errorf("stat = %v", en)
			}
			for depth, want := range map[uint32]int{1: 1, 2: 2, 3: 3} {
				ls, err := c.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: dir, Depth: depth}))
				if err != nil || len(ls.Msg.GetEntries()) != want {
					t.Errorf("ListDir depth %d: %d entries, %v; want %d", depth, len(ls.Msg.GetEntries()), err, want)
				}
			}
			if _, err := c.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: dir + "/a/b/f.txt", Destination: dir + "/g.txt"})); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: dir})); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: dir})); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("stat after remove: %v", err)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	e := setup(t, 0)
	c := e.clients["json"]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	os.MkdirAll(e.root+"/w/sub", 0o755)
	stream, err := c.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/w", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	os.WriteFile(e.root+"/w/sub/new.txt", []byte("x"), 0o644)
	seen := map[filesystempb.EventType]bool{}
	for !(seen[filesystempb.EventType_EVENT_TYPE_CREATE] && seen[filesystempb.EventType_EVENT_TYPE_WRITE]) && stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev != nil && ev.GetName() == "sub/new.txt" {
			seen[ev.GetType()] = true
		}
	}
	if !seen[filesystempb.EventType_EVENT_TYPE_CREATE] || !seen[filesystempb.EventType_EVENT_TYPE_WRITE] {
		t.Errorf("events seen %v, want create and write of sub/new.txt (%v)", seen, stream.Err())
	}

	w, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/w"}))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(e.root+"/w/polled.txt", nil, 0o644)
	var got []*filesystempb.FilesystemEvent
	for len(got) == 0 && ctx.Err() == nil {
		r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: w.Msg.GetWatcherId()}))
		if err != nil {
			t.Fatal(err)
		}
		got = r.Msg.GetEvents()
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) == 0 || got[0].GetName() != "polled.txt" {
		t.Errorf("polled events %v", got)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: w.Msg.GetWatcherId()})); err != nil {
		t.Error(err)
	}
}

func TestFilesRoundTrip(t *testing.T) {
	e := setup(t, 0)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	random := make([]byte, 5<<20)
	rand.Read(random)
	for name, body := range map[string][]byte{"all": all, "random": random} {
		if code, msg := e.upload(t, "/data/"+name, body); code != 200 || !strings.Contains(msg, `"path":"/data/`+name+`"`) {
			t.Fatalf("upload %s: %d %s", name, code, msg)
		}
		code, got := e.download(t, "/data/"+name)
		if code != 200 || sha256.Sum256(got) != sha256.Sum256(body) {
			t.Errorf("%s: download %d, %d bytes differ", name, code, len(got))
		}
	}
	// Multipart, relative to home, and gzip on the way back.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "notes.txt")
	fw.Write([]byte("multipart body"))
	mw.Close()
	resp, err := http.Post(e.url+"/files", mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if len(out) != 1 || out[0]["path"] != "/home/user/notes.txt" || out[0]["type"] != "file" {
		t.Errorf("multipart reply %v", out)
	}
	req, _ := http.NewRequest("GET", e.url+"/files?path=notes.txt", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(zr)
	resp.Body.Close()
	if string(b) != "multipart body" {
		t.Errorf("gzip download %q", b)
	}
	if code, _ := e.download(t, "/data"); code != 400 {
		t.Errorf("directory download: %d, want 400", code)
	}
	if code, _ := e.download(t, "/nope"); code != 404 {
		t.Errorf("missing file: %d, want 404", code)
	}
	if code, msg := e.download(t, "/a\x00b"); code != 400 || !strings.Contains(string(msg), "NUL") {
		t.Errorf("NUL byte: %d %s", code, msg)
	}
}

func TestEscapes(t *testing.T) {
	e := setup(t, 0)
	secret := filepath.Join(e.outside, "secret")
	os.WriteFile(secret, []byte("host secret"), 0o644)
	os.Symlink(secret, e.root+"/home/user/abs-link")
	os.Symlink("../../../outside/secret", e.root+"/home/user/rel-link")
	os.Symlink(e.outside, e.root+"/home/user/dir-link")
	os.Symlink("../../..", e.root+"/home/user/up")

	for _, p := range []string{"../../../outside/secret", "/../outside/secret", "abs-link", "rel-link", "dir-link/secret", "up/outside/secret", secret} {
		code, body := e.download(t, p)
		if bytes.Contains(body, []byte("host secret")) {
			t.Errorf("download %q (%d) returned the secret outside the root", p, code)
		}
	}
	for _, p := range []string{"../../../etc/passwd", "/../../etc/passwd"} {
		if code, msg := e.download(t, p); code != 400 || !strings.Contains(string(msg), "leaves the sandbox") {
			t.Errorf("download %q: %d %s, want 400 leaves the sandbox", p, code, msg)
		}
	}
	for _, p := range []string{"dir-link/planted", "up/outside/planted", "../../../outside/planted"} {
		e.upload(t, p, []byte("x"))
		if _, err := os.Stat(filepath.Join(e.outside, "planted")); err == nil {
			t.Fatalf("upload to %q wrote outside the root", p)
		}
	}
	ctx := context.Background()
	st, err := e.clients["proto"].Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/home/user/abs-link"}))
	if err == nil && st.Msg.GetEntry().GetSymlinkTarget() != secret {
		t.Errorf("symlink_target = %q", st.Msg.GetEntry().GetSymlinkTarget())
	}
	if _, err := e.clients["proto"].Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/home/user/up/outside"})); err == nil {
		if _, err := os.Stat(e.outside); err != nil {
			t.Fatalf("Remove through a symlink deleted a directory outside the root")
		}
	}
}

func TestUploadLimit(t *testing.T) {
	e := setup(t, 1024)
	if code, msg := e.upload(t, "/big", make([]byte, 1025)); code != 413 || !strings.Contains(msg, "larger than the limit") {
		t.Errorf("upload above the limit: %d %s", code, msg)
	}
	// Without a Content-Length the limit is counted while streaming.
	resp, err := http.Post(e.url+"/files?path=/big2", "application/octet-stream", io.MultiReader(bytes.NewReader(make([]byte, 2000))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("streamed upload above the limit: %d", resp.StatusCode)
	}
	for _, f := range []string{"big", "big2"} {
		if _, err := os.Stat(filepath.Join(e.root, f)); err == nil {
			t.Errorf("partial file %s left behind", f)
		}
	}
	if code, _ := e.upload(t, "/ok", make([]byte, 1024)); code != 200 {
		t.Errorf("upload at the limit: %d", code)
	}
}
