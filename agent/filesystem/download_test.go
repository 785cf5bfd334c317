package filesystem_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/filesystem"
)

// TestDownloadRefusesWhatIsNotAFile: only regular files are sent. A FIFO
// without a writer must be refused, not waited on, and /dev/zero must not
// stream forever.
func TestDownloadRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	h := filesystem.New(&filesystem.Options{Root: "/"}).FilesHandler()
	tests := []struct {
		name string
		make func(t *testing.T) string // returns the path to download
		want string                    // in the message
	}{
		{"directory", func(t *testing.T) string { return dir }, "is a directory"},
		{"fifo without a writer", func(t *testing.T) string {
			p := filepath.Join(dir, "fifo")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is a named pipe (FIFO)"},
		{"/dev/zero", func(t *testing.T) string { return "/dev/zero" }, "is a character device"},
		{"/dev/null", func(t *testing.T) string { return "/dev/null" }, "is a character device"},
		{"block device", func(t *testing.T) string {
			p := filepath.Join(dir, "blk")
			if err := syscall.Mknod(p, syscall.S_IFBLK|0o600, 7<<8); err != nil {
				t.Skipf("skipped: mknod of a block device needs CAP_MKNOD (%v); CI runs as root", err)
			}
			return p
		}, "is a block device"},
		{"unix socket", func(t *testing.T) string {
			p := filepath.Join(dir, "sock")
			ln, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return p
		}, "is a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.make(t)
			for _, method := range []string{"GET", "HEAD"} {
				rec := &cappedRecorder{httptest.NewRecorder()}
				done := make(chan struct{})
				go func() {
					defer close(done)
					h.ServeHTTP(rec, httptest.NewRequest(method, "/files?path="+url.QueryEscape(p), nil))
				}()
				select {
				case <-done:
				case <-time.After(time.Minute): // a hang detector, not a speed limit
					t.Fatalf("%s %s never returned", method, p)
				}
				var msg struct{ Message string }
				json.Unmarshal(rec.Body.Bytes(), &msg)
				if rec.Code != http.StatusBadRequest || method == "GET" && !strings.Contains(msg.Message, tt.want) {
					t.Errorf("%s: %d %.200q, want 400 saying %q", method, rec.Code, rec.Body.Bytes(), tt.want)
				}
			}
		})
	}
}

// cappedRecorder records at most 64 KiB of body, then fails the write:
// a handler that streams /dev/zero stops instead of filling memory.
type cappedRecorder struct{ *httptest.ResponseRecorder }

func (r *cappedRecorder) Write(b []byte) (int, error) {
	if r.Body.Len()+len(b) > 64<<10 {
		return 0, errors.New("capped")
	}
	return r.ResponseRecorder.Write(b)
}

// growingWriter is a ResponseWriter that, at the first byte of the reply
// (the file is open and its size known by then), runs grow; it counts
// what it is sent, unpacking gzip.
type growingWriter struct {
	header http.Header
	grow   func()
	pw     *io.PipeWriter
	n      chan int64
}

func (w *growingWriter) Header() http.Header { return w.header }
func (w *growingWriter) WriteHeader(int)     {}
func (w *growingWriter) Write(b []byte) (int, error) {
	if w.pw == nil {
		w.grow()
		pr, pw := io.Pipe()
		w.pw = pw
		gz := w.header.Get("Content-Encoding") == "gzip"
		go func() {
			var r io.Reader = pr
			if gz {
				zr, err := gzip.NewReader(pr)
				if err != nil {
					pr.CloseWithError(err)
					w.n <- -1
					return
				}
				r = zr
			}
			n, _ := io.Copy(io.Discard, r)
			io.Copy(io.Discard, pr)
			w.n <- n
		}()
	}
	return w.pw.Write(b)
}

// TestDownloadOfAGrowingFile: the reply stops at the size the file had
// when it was opened, however much it grows while it is sent.
func TestDownloadOfAGrowingFile(t *testing.T) {
	const size = 1 << 20
	for _, gz := range []bool{false, true} {
		name := map[bool]string{false: "identity", true: "gzip"}[gz]
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "log")
			if err := os.WriteFile(p, bytes.Repeat([]byte("x"), size), 0o644); err != nil {
				t.Fatal(err)
			}
			w := &growingWriter{header: http.Header{}, n: make(chan int64, 1), grow: func() {
				// Sparse: a gigabyte more that costs no disk.
				if err := os.Truncate(p, 1<<30); err != nil {
					t.Error(err)
				}
			}}
			req := httptest.NewRequest("GET", "/files?path=/log", nil)
			if gz {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			filesystem.New(&filesystem.Options{Root: root}).FilesHandler().ServeHTTP(w, req)
			if w.pw == nil {
				t.Fatal("nothing was sent")
			}
			w.pw.Close()
			if n := <-w.n; n != size {
				t.Errorf("sent %d bytes, want the %d the file had when opened", n, size)
			}
		})
	}
}

// TestCallerErrors: what a caller got wrong is a 4xx, not a 500 (both
// found by the agent's fuzz targets).
func TestCallerErrors(t *testing.T) {
	e := setup(t, 0)
	e.upload(t, "/f.txt", []byte("x"))
	if code, msg := e.download(t, "/f.txt/0"); code != http.StatusNotFound {
		t.Errorf("download below a file: %d %s, want 404", code, msg)
	}
	truncated := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\npartial"
	resp, err := http.Post(e.url+"/files?path=/up", "multipart/form-data; boundary=b", strings.NewReader(truncated))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("truncated multipart upload: %d %s, want 400", resp.StatusCode, msg)
	}
	if _, err := os.Stat(filepath.Join(e.root, "up")); err == nil {
		t.Error("a truncated upload was left behind")
	}
}
