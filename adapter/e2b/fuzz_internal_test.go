package e2b

import (
	"net/http"
	"testing"
)

// Tokens and routing headers come from anyone who reaches the port: no
// input may panic, and only a token made for the id passes.
func FuzzCheckToken(f *testing.F) {
	h := &Handler{opts: Options{Secret: []byte("0123456789abcdef0123456789abcdef")}}
	good := h.AccessToken("team-a", "abc123")
	f.Add(good, "abc123")
	f.Add(good, "abc124")
	f.Add("dGVhbS1h.", "abc123")
	f.Add("....", "")
	f.Fuzz(func(t *testing.T, token, id string) {
		owner, ok := h.checkToken(token, id)
		if ok && h.AccessToken(owner, id) != token {
			// A different spelling of the same bytes is fine only if it
			// decodes to the same owner and MAC; RawURLEncoding is strict.
			t.Fatalf("token %q passed for %q as owner %q, but that owner's token is %q", token, id, owner, h.AccessToken(owner, id))
		}
	})
}

func FuzzDataPlaneTarget(f *testing.F) {
	for _, host := range []string{"49983-abc.example.com", "49999-x1.a:443", "[::1]:8080", "127.0.0.1:8080", "-.", "1-.x", "49983-ABC.example"} {
		f.Add(host, "")
	}
	f.Add("", "abc")
	f.Fuzz(func(t *testing.T, host, header string) {
		r := &http.Request{Host: host, Header: http.Header{}}
		if header != "" {
			r.Header.Set("E2b-Sandbox-Id", header)
		}
		id, port, ok := dataPlaneTarget(r)
		if ok && (id == "" || port == "") {
			t.Fatalf("%q %q routed to %q port %q", host, header, id, port)
		}
	})
}
