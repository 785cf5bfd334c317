package mcpbox

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NetworkPolicy says which outside hosts a sandbox may reach. The zero
// value (and a nil policy) reaches nothing: no network is the default.
//
// Allow and Deny hold host patterns (see ParseHostPattern): a domain
// ("pypi.org"), a wildcard ("*.githubusercontent.com", which matches
// every subdomain but not the bare domain), an IP address or a CIDR
// prefix ("10.0.0.0/8"), each optionally with a port (":8080", or ":*"
// for any). A pattern without a port admits 80 and 443 in Allow and
// every port in Deny. Deny beats Allow and Public.
//
// Loopback, private, link-local, multicast and cloud-metadata addresses
// are refused after resolution, whatever name led to them, unless an
// address pattern in Allow names them ("127.0.0.1", "10.0.0.0/8").
type NetworkPolicy struct {
	// Public allows any public address on ports 80 and 443, less Deny.
	Public bool `json:"public,omitempty" jsonschema:"Reach any public host on ports 80 and 443, except what deny lists."`
	// Allow lists the host patterns the sandbox may reach.
	Allow []string `json:"allow,omitempty" jsonschema:"Host patterns the sandbox may reach: pypi.org, *.githubusercontent.com, api.example.com:8443, 10.0.0.0/8."`
	// Deny lists patterns refused even when Allow or Public would admit them.
	Deny []string `json:"deny,omitempty" jsonschema:"Host patterns refused even when allow or public admits them."`
}

// None reports whether p reaches nothing.
func (p *NetworkPolicy) None() bool {
	return p == nil || (!p.Public && len(p.Allow) == 0)
}

// Validate reports the first pattern that does not parse, saying which
// list it is in and how to write it.
func (p *NetworkPolicy) Validate() error {
	_, err := p.Normalize()
	return err
}

// Normalize returns p with every pattern in its canonical form (lower
// case, no trailing dot, IDNA as punycode, duplicates dropped), or an
// error naming the first bad one. A nil policy normalizes to nil.
func (p *NetworkPolicy) Normalize() (*NetworkPolicy, error) {
	if p == nil {
		return nil, nil
	}
	const maxPatterns = 1000
	if len(p.Allow)+len(p.Deny) > maxPatterns {
		return nil, Errorf(EINVALID, "network policy has %d patterns; at most %d are allowed", len(p.Allow)+len(p.Deny), maxPatterns).
			WithSuggestion("use wildcards (*.example.com) or CIDR prefixes to cover many hosts at once")
	}
	out := &NetworkPolicy{Public: p.Public}
	for _, l := range []struct {
		name string
		in   []string
		out  *[]string
	}{{"allow", p.Allow, &out.Allow}, {"deny", p.Deny, &out.Deny}} {
		seen := map[string]bool{}
		for _, s := range l.in {
			hp, err := ParseHostPattern(s)
			if err != nil {
				return nil, Errorf(EINVALID, "network %s entry %q: %s", l.name, s, err.Error()).
					WithSuggestion("write a host pattern such as pypi.org, *.githubusercontent.com, api.example.com:8443, 127.0.0.1 or 10.0.0.0/8")
			}
			c := hp.String()
			if !seen[c] {
				seen[c] = true
				*l.out = append(*l.out, c)
			}
		}
	}
	return out, nil
}

// String describes p for messages and logs: "none", "public",
// "allow pypi.org, *.example.com; deny evil.example.com".
func (p *NetworkPolicy) String() string {
	if p == nil || (!p.Public && len(p.Allow) == 0 && len(p.Deny) == 0) {
		return "none"
	}
	var parts []string
	if p.Public {
		parts = append(parts, "public")
	}
	if len(p.Allow) > 0 {
		parts = append(parts, "allow "+strings.Join(p.Allow, ", "))
	}
	if len(p.Deny) > 0 {
		parts = append(parts, "deny "+strings.Join(p.Deny, ", "))
	}
	if !p.Public && len(p.Allow) == 0 {
		parts = append([]string{"none"}, parts...)
	}
	return strings.Join(parts, "; ")
}

// Port values of a HostPattern besides a port number.
const (
	// DefaultPorts admits 80 and 443 in an allow-list, every port in a
	// deny-list.
	DefaultPorts = 0
	// AnyPort admits every port (":*").
	AnyPort = -1
)

// HostPattern is one entry of a network policy's allow- or deny-list:
// a domain name, a wildcard domain, or an address prefix, and a port.
type HostPattern struct {
	// Name is a normalized domain name (see NormalizeHost); empty for an
	// address pattern.
	Name string
	// Wildcard makes Name match its subdomains (and not Name itself).
	Wildcard bool
	// Prefix is set for an address pattern; a single address is a /32
	// or /128.
	Prefix netip.Prefix
	// Port is a port number, DefaultPorts or AnyPort.
	Port int
}

// ParseHostPattern parses "pypi.org", "*.example.com", "example.com:8080",
// "api.example.com:*", "127.0.0.1", "10.0.0.0/8:5432", "[::1]:8080" or
// "fd00::/8".
func ParseHostPattern(s string) (HostPattern, error) {
	var hp HostPattern
	s = strings.TrimSpace(s)
	if s == "" {
		return hp, fmt.Errorf("empty pattern")
	}
	if len(s) > 300 {
		return hp, fmt.Errorf("pattern longer than 300 bytes")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return hp, fmt.Errorf("missing ]")
		}
		host, port = s[1:i], s[i+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return hp, fmt.Errorf("unexpected %q after ]", port)
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(s, ":") {
			return hp, fmt.Errorf("empty port")
		}
	case strings.Count(s, ":") > 1: // IPv6 without a port
	default:
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
			if port == "" {
				return hp, fmt.Errorf("empty port")
			}
		}
	}
	switch port {
	case "":
	case "*":
		hp.Port = AnyPort
	default:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return hp, fmt.Errorf("port %q is not a number from 1 to 65535 or *", port)
		}
		hp.Port = n
	}
	if strings.Contains(host, "/") {
		pf, err := netip.ParsePrefix(host)
		if err != nil {
			return hp, fmt.Errorf("bad CIDR prefix: %v", err)
		}
		pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-unmapBits(pf.Addr()))
		hp.Prefix = pf.Masked()
		return hp, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return hp, fmt.Errorf("zoned addresses are not supported")
		}
		a = a.Unmap()
		hp.Prefix = netip.PrefixFrom(a, a.BitLen())
		return hp, nil
	}
	if host == "*" {
		return hp, fmt.Errorf("a bare * is not a pattern: set public to reach any public host")
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		hp.Wildcard = true
		host = rest
	}
	name, err := NormalizeHost(host)
	if err != nil {
		return hp, err
	}
	hp.Name = name
	return hp, nil
}

// unmapBits is how many leading bits an IPv4-mapped IPv6 prefix loses
// when it is turned into its IPv4 form.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// String is the canonical form ParseHostPattern reads back.
func (h HostPattern) String() string {
	var host string
	switch {
	case h.Prefix.IsValid():
		if h.Prefix.IsSingleIP() {
			host = h.Prefix.Addr().String()
		} else {
			host = h.Prefix.String()
		}
		if h.Prefix.Addr().Is6() && h.Port != DefaultPorts {
			host = "[" + host + "]"
		}
	case h.Wildcard:
		host = "*." + h.Name
	default:
		host = h.Name
	}
	switch h.Port {
	case DefaultPorts:
		return host
	case AnyPort:
		return host + ":*"
	}
	return host + ":" + strconv.Itoa(h.Port)
}

// IsAddress reports whether h names addresses rather than a domain.
func (h HostPattern) IsAddress() bool { return h.Prefix.IsValid() }

// MatchName reports whether the normalized name matches h's domain.
func (h HostPattern) MatchName(name string) bool {
	if h.Name == "" {
		return false
	}
	if h.Wildcard {
		return len(name) > len(h.Name)+1 && strings.HasSuffix(name, h.Name) && name[len(name)-len(h.Name)-1] == '.'
	}
	return name == h.Name
}

// MatchAddr reports whether a lies in h's address prefix.
func (h HostPattern) MatchAddr(a netip.Addr) bool {
	return h.Prefix.IsValid() && h.Prefix.Contains(a.Unmap())
}

// MatchPort reports whether h admits port; deny says how DefaultPorts
// reads (every port in a deny-list, 80 and 443 in an allow-list).
func (h HostPattern) MatchPort(port int, deny bool) bool {
	switch h.Port {
	case AnyPort:
		return true
	case DefaultPorts:
		return deny || port == 80 || port == 443
	}
	return h.Port == port
}

// NormalizeHost puts a domain name in the form policies compare: lower
// case, without its trailing dot, internationalized labels as punycode
// (IDNA's ASCII form). It refuses what is no host name, including
// numeric forms resolvers read as IPv4 addresses ("2130706433",
// "0x7f.1"), which must be written as plain addresses.
func NormalizeHost(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty host name")
	}
	if len(s) > 253*4 || !utf8.ValidString(s) {
		return "", fmt.Errorf("host name is too long or not UTF-8")
	}
	labels := strings.Split(strings.ToLower(s), ".")
	for i, l := range labels {
		if l == "" {
			return "", fmt.Errorf("host name %q has an empty label", s)
		}
		if !isASCII(l) {
			p, err := punycode(l)
			if err != nil {
				return "", fmt.Errorf("host name %q: %v", s, err)
			}
			labels[i] = "xn--" + p
			l = labels[i]
		}
		if len(l) > 63 {
			return "", fmt.Errorf("host name %q has a label longer than 63 bytes", s)
		}
		for j := 0; j < len(l); j++ {
			c := l[j]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("host name %q holds %q, which no host name may", s, c)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("host name %q has a label starting or ending with '-'", s)
		}
	}
	name := strings.Join(labels, ".")
	if len(name) > 253 {
		return "", fmt.Errorf("host name is longer than 253 bytes")
	}
	if numericLabel(labels[len(labels)-1]) {
		return "", fmt.Errorf("%q is a numeric address form, not a host name: write the address as a plain IP (127.0.0.1)", s)
	}
	return name, nil
}

// numericLabel reports whether a last label is all digits or a 0x hex
// number, which inet_aton-style resolvers read as part of an IPv4 address.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		l = h
		if l == "" {
			return true
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// punycode encodes one label as RFC 3492 says (without the xn-- prefix).
func punycode(label string) (string, error) {
	const (
		base, tmin, tmax, skew, damp = 36, 1, 26, 38, 700
		initialBias, initialN        = 72, 128
		maxInt                       = 1<<31 - 1
	)
	digit := func(d int) byte {
		if d < 26 {
			return byte('a' + d)
		}
		return byte('0' + d - 26)
	}
	adapt := func(delta, points int, first bool) int {
		if first {
			delta /= damp
		} else {
			delta /= 2
		}
		delta += delta / points
		k := 0
		for delta > ((base-tmin)*tmax)/2 {
			delta /= base - tmin
			k += base
		}
		return k + (base-tmin+1)*delta/(delta+skew)
	}
	runes := []rune(label)
	var out []byte
	for _, r := range runes {
		if r < 0x80 {
			out = append(out, byte(r))
		}
	}
	b := len(out)
	h := b
	if b > 0 {
		out = append(out, '-')
	}
	n, delta, bias := initialN, 0, initialBias
	for h < len(runes) {
		m := maxInt
		for _, r := range runes {
			if int(r) >= n && int(r) < m {
				m = int(r)
			}
		}
		if (m - n) > (maxInt-delta)/(h+1) {
			return "", fmt.Errorf("label too long to encode")
		}
		delta += (m - n) * (h + 1)
		n = m
		for _, r := range runes {
			if int(r) < n {
				delta++
			}
			if int(r) == n {
				q := delta
				for k := base; ; k += base {
					t := k - bias
					if t < tmin {
						t = tmin
					} else if t > tmax {
						t = tmax
					}
					if q < t {
						break
					}
					out = append(out, digit(t+(q-t)%(base-t)))
					q = (q - t) / (base - t)
				}
				out = append(out, digit(q))
				bias = adapt(delta, h+1, h == b)
				delta = 0
				h++
			}
		}
		delta++
		n++
	}
	return string(out), nil
}

// NetworkStats counts one session's egress, as the proxy serving it saw.
type NetworkStats struct {
	// Connections counts the connections the sandbox opened to the proxy.
	Connections int64 `json:"connections"`
	// Active is how many are open now.
	Active int64 `json:"active"`
	// BytesOut and BytesIn count bytes sent to and received from outside.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	// Refused counts refused requests; RefusedHosts splits them by host
	// (at most a few dozen hosts, the rest under "other").
	Refused      int64            `json:"refused"`
	RefusedHosts map[string]int64 `json:"refused_hosts,omitempty"`
}

// Adopter is a Runtime that keeps per-process state for the sandboxes it
// looks after (the local runtime's egress socket): Adopt tells it that
// this process now looks after sandbox id, which an earlier process
// started (recovery after a crash, or a warm sandbox another process
// made). Adopting a sandbox twice is harmless.
type Adopter interface {
	Adopt(id string) error
}
