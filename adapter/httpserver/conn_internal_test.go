package httpserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBodyDeadlineLiftedAtEOF: a request whose body arrived in time may
// run far past the body deadline (a tool call, a streamed response)
// without its context being cancelled. net/http watches the connection
// once the body is read, and an expired deadline there would cancel it.
func TestBodyDeadlineLiftedAtEOF(t *testing.T) {
	const deadline = 50 * time.Millisecond
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limitBody(w, r, deadline)
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
		case <-time.After(10 * deadline):
			io.WriteString(w, "done")
		}
	}))
	defer ts.Close()
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a long request after a prompt body: %d %s", resp.StatusCode, b)
	}
}
