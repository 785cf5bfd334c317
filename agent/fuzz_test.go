package agent_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbox/mcpbox/agent"
)

// fuzzAgent is an agent confined to root, beside a directory it must never
// touch, with a symlink inside root pointing at it.
type fuzzAgent struct {
	base, root, outside string
	h                   *agent.Agent
}

func newFuzzAgent(f *testing.F) *fuzzAgent {
	base := f.TempDir()
	fa := &fuzzAgent{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{fa.root + "/home/user", fa.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(fa.outside, "secret"), []byte("host secret"), 0o644)
	os.Symlink(fa.outside, fa.root+"/home/user/out")
	os.Symlink("../../..", fa.root+"/home/user/up")
	os.WriteFile(fa.root+"/home/user/f.txt", []byte("hello"), 0o644)
	fa.h = agent.New(&agent.Options{
		Root: fa.root, Home: "/home/user", Cwd: fa.root, MaxFileBytes: 1 << 20,
		Env: map[string]string{"PATH": "/usr/bin:/bin"},
	})
	f.Cleanup(func() { fa.h.Close() })
	return fa
}

// serve runs one request and checks what must hold for any input.
func (fa *fuzzAgent) serve(t *testing.T, req *http.Request, statuses ...int) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	fa.h.ServeHTTP(rec, req)
	ok := false
	for _, s := range statuses {
		ok = ok || rec.Code == s
	}
	if !ok {
		t.Errorf("%s %s: status %d (%q), want one of %v", req.Method, req.URL, rec.Code, rec.Body.Bytes(), statuses)
	}
	if rec.Code >= 400 && rec.Code != 404 && rec.Code != 405 && !json.Valid(rec.Body.Bytes()) {
		t.Errorf("%s %s: %d with a body that is not JSON: %q", req.Method, req.URL, rec.Code, rec.Body.Bytes())
	}
	if bytes.Contains(rec.Body.Bytes(), []byte("host secret")) {
		t.Errorf("%s %s: read outside the root", req.Method, req.URL)
	}
	fa.checkOutside(t)
	return rec
}

// checkOutside fails t if anything was written outside the root.
func (fa *fuzzAgent) checkOutside(t *testing.T) {
	t.Helper()
	for dir, want := range map[string][]string{fa.base: {"outside", "root"}, fa.outside: {"secret"}} {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) != len(want) || names[0] != want[0] || len(names) > 1 && names[1] != want[1] {
			t.Fatalf("%s holds %v, want %v: a write left the root", dir, names, want)
		}
	}
}

func FuzzFilesDownload(f *testing.F) {
	for _, p := range []string{"f.txt", "/home/user/f.txt", "", "/", "..", "../../../outside/secret", "out/secret",
		"up/outside/secret", "/../outside/secret", "a\x00b", "%2e%2e/secret", "/proc/self/environ", "/dev/zero",
		"f.txt/..", "/home/user/f.txt/", string(make([]byte, 5000))} {
		f.Add(p, false)
		f.Add(p, true)
	}
	fa := newFuzzAgent(f)
	f.Fuzz(func(t *testing.T, path string, gz bool) {
		req := httptest.NewRequest("GET", "/files?path="+url.QueryEscape(path), nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		fa.serve(t, req, 200, 400, 403, 404)
	})
}

func FuzzFilesUpload(f *testing.F) {
	multi := func(field, name string, body []byte) ([]byte, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile(field, name)
		fw.Write(body)
		mw.Close()
		return buf.Bytes(), mw.FormDataContentType()
	}
	for _, p := range []string{"", "new.txt", "/dir/", "../../../outside/planted", "out/planted", "up/outside/planted", "f.txt/x", "/"} {
		f.Add(p, "application/octet-stream", []byte("data"))
		for _, name := range []string{"a.txt", "../../outside/planted", "/etc/passwd", "", ".", "..", "out/planted"} {
			body, ct := multi("file", name, []byte("data"))
			f.Add(p, ct, body)
		}
		f.Add(p, "multipart/form-data; boundary=x", []byte("--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nbody\r\n--x--\r\n"))
		f.Add(p, "multipart/form-data; boundary=x", []byte("--x\r\n\r\n"))
		f.Add(p, "multipart/form-data", []byte("garbage"))
	}
	fa := newFuzzAgent(f)
	f.Fuzz(func(t *testing.T, path, ctype string, body []byte) {
		req := httptest.NewRequest("POST", "/files?path="+url.QueryEscape(path), bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		fa.serve(t, req, 200, 400, 403, 404, 413, 507)
	})
}

func FuzzMcpboxRoutes(f *testing.F) {
	for _, tag := range []string{"job", "", "a/b", "..", "%", "\x00", "long tag with spaces"} {
		f.Add("GET", tag, "", "")
		f.Add("DELETE", tag, "", "")
	}
	for _, body := range []string{`{"deadline": null}`, `{"deadline": "2999-01-01T00:00:00Z"}`, `{}`, `[]`, `null`, `{"deadline": 1}`,
		`{"deadline": "1999-01-01T00:00:00Z"}`, `{"deadline": "2999-13-01T00:00:00Z"}`, `{"deadline": "2999-01-01T00:00:00+25:00"}`} {
		f.Add("PUT", "", "deadline", body)
	}
	f.Add("GET", "", "deadline", "")
	f.Add("POST", "", "deadline", "{}")
	fa := newFuzzAgent(f)
	f.Fuzz(func(t *testing.T, method, tag, route, body string) {
		var path string
		switch route {
		case "deadline":
			path = "/mcpbox/v1/deadline"
		case "":
			path = "/mcpbox/v1/processes/" + url.PathEscape(tag)
			if method == "GET" {
				path += "/output"
			}
		default:
			path = "/mcpbox/v1/" + url.PathEscape(route)
		}
		if !validMethod(method) {
			return // not a request a client can send
		}
		req := httptest.NewRequest(method, path, bytes.NewReader([]byte(body)))
		// 307: the mux cleans paths such as an empty or ".." tag.
		fa.serve(t, req, 200, 204, 307, 400, 404, 405, 409)
	})
}

// validMethod reports whether m is an HTTP token, as net/http requires.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range []byte(m) {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte("()<>@,;:\\\"/[]?={}"), c) >= 0 {
			return false
		}
	}
	return true
}
