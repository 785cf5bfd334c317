package mcpbox

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHostPattern(t *testing.T) {
	tests := []struct {
		in, want string
		bad      string // substring of the error
	}{
		{in: "pypi.org", want: "pypi.org"},
		{in: "PyPI.org.", want: "pypi.org"},
		{in: "*.GitHubUserContent.com", want: "*.githubusercontent.com"},
		{in: "api.example.com:8443", want: "api.example.com:8443"},
		{in: "api.example.com:*", want: "api.example.com:*"},
		{in: "bücher.example", want: "xn--bcher-kva.example"},
		{in: "例え.テスト", want: "xn--r8jz45g.xn--zckzah"},
		{in: "127.0.0.1", want: "127.0.0.1"},
		{in: "::ffff:127.0.0.1", want: "127.0.0.1"},
		{in: "10.1.2.3/8:5432", want: "10.0.0.0/8:5432"},
		{in: "[::1]:8080", want: "[::1]:8080"},
		{in: "fd00::/8", want: "fd00::/8"},
		{in: "", bad: "empty"},
		{in: "*", bad: "public"},
		{in: "a..b", bad: "empty label"},
		{in: "evil.com:0", bad: "port"},
		{in: "evil.com:99999", bad: "port"},
		{in: "evil.com:", bad: "empty port"},
		{in: "2130706433", bad: "numeric"},
		{in: "0x7f.1", bad: "numeric"},
		{in: "ev il.com", bad: "no host name may"},
		{in: "-x.com", bad: "'-'"},
		{in: "fe80::1%eth0", bad: "zoned"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			hp, err := ParseHostPattern(tt.in)
			if tt.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("ParseHostPattern(%q) = %v, %v; want an error with %q", tt.in, hp, err, tt.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := hp.String(); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			again, err := ParseHostPattern(hp.String())
			if err != nil || again != hp {
				t.Fatalf("round trip of %q: %v, %v", hp.String(), again, err)
			}
		})
	}
}

func TestHostPatternMatch(t *testing.T) {
	w, _ := ParseHostPattern("*.example.com")
	for name, want := range map[string]bool{"a.example.com": true, "a.b.example.com": true,
		"example.com": false, "badexample.com": false, "example.com.evil": false} {
		if got := w.MatchName(name); got != want {
			t.Errorf("*.example.com matches %q = %v, want %v", name, got, want)
		}
	}
	e, _ := ParseHostPattern("example.com")
	if !e.MatchPort(443, false) || !e.MatchPort(80, false) || e.MatchPort(8080, false) || !e.MatchPort(8080, true) {
		t.Error("a pattern without a port must admit 80 and 443 in an allow-list and every port in a deny-list")
	}
	p, _ := ParseHostPattern("127.0.0.0/8")
	if !p.MatchAddr(netip.MustParseAddr("127.9.9.9")) || !p.MatchAddr(netip.MustParseAddr("::ffff:127.0.0.1")) || p.MatchAddr(netip.MustParseAddr("10.0.0.1")) {
		t.Error("prefix matching is wrong")
	}
	if p.MatchName("127.0.0.1") {
		t.Error("an address pattern must not match names")
	}
}

func TestNetworkPolicyNormalize(t *testing.T) {
	p := &NetworkPolicy{Allow: []string{"PyPI.org", "pypi.org.", "*.x.com"}, Deny: []string{"bad.x.com"}}
	n, err := p.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(n.Allow, ",") != "pypi.org,*.x.com" || n.String() != "allow pypi.org, *.x.com; deny bad.x.com" {
		t.Fatalf("got %+v (%s)", n, n)
	}
	_, err = (&NetworkPolicy{Deny: []string{"ok.com", "no way"}}).Normalize()
	if err == nil || !strings.Contains(err.Error(), `network deny entry "no way"`) || ErrorCode(err) != EINVALID {
		t.Fatalf("bad entry: %v", err)
	}
	if !(*NetworkPolicy)(nil).None() || !(&NetworkPolicy{Deny: []string{"x.com"}}).None() || (&NetworkPolicy{Public: true}).None() {
		t.Fatal("None is wrong")
	}
	if (*NetworkPolicy)(nil).String() != "none" {
		t.Fatal("nil policy must read none")
	}
}
