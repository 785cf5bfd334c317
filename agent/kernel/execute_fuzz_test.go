package kernel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/kernel"
)

// FuzzExecuteRequest posts anything as an /execute body: the agent never
// panics, refuses what it cannot run with a 4xx and a JSON message, and
// otherwise replies with NDJSON ending with exactly one end_of_execution.
// Cells run in real kernels, each cut at 10 s so a mutated body cannot
// hang the run.
func FuzzExecuteRequest(f *testing.F) {
	for _, seed := range []string{
		`{"code":"print(1)"}`,
		`{"code":"1 + 1","language":"python","timeout":5}`,
		`{"code":"console.log(1)","language":"js"}`,
		`{"code":"echo $A","language":"sh","env_vars":{"A":"b'c"}}`,
		`{"code":"echo","language":"shell","env_vars":{"bad name":"x"}}`,
		`{"code":"a\u0000b","language":"bash"}`,
		`{"code":"def handler(e, c):\n    return e","event":{"a":[1]}}`,
		`{"code":"exports.handler = (e) => e","language":"node","event":null}`,
		`{"code":"true","language":"shell","event":1}`,
		`{"code":"x","language":"cobol"}`,
		`{"code":"1","context_id":"nope"}`,
		`{"code":"1","context_id":"x","language":"python"}`,
		`{"code":"2","timeout":-1}`,
		`{"code":"3","timeout":1e308}`,
		`{"code":"4","timeout":"soon"}`,
		`{"code":123}`,
		`{"env_vars":{"":""},"code":""}`,
		`{bad json`,
		``,
		`[]`,
		`null`,
		`{"code":"5","timeout":1e-300}`,
	} {
		f.Add([]byte(seed))
	}
	m := kernel.New(&kernel.Options{
		UID: os.Getuid(), GID: os.Getgid(), Home: f.TempDir(),
		Env: map[string]string{"PATH": path, "HOME": f.TempDir(), "LANG": "C.UTF-8"},
	})
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	f.Cleanup(func() { m.Close(); srv.Close() })
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, err := http.Post(srv.URL+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			var e struct {
				Code    int
				Message string
			}
			if resp.StatusCode/100 != 4 || json.NewDecoder(resp.Body).Decode(&e) != nil || e.Message == "" {
				t.Fatalf("status %d, message %q", resp.StatusCode, e.Message)
			}
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		ends := 0
		var last map[string]any
		for sc.Scan() {
			last = nil
			if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
				t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
			}
			if last["type"] == "end_of_execution" {
				ends++
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if ends != 1 || last["type"] != "end_of_execution" {
			t.Fatalf("%d end_of_execution events, the last event %v", ends, last)
		}
	})
}
