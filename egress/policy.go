package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mcpbox/mcpbox"
)

// policy is a NetworkPolicy parsed for matching.
type policy struct {
	src          *mcpbox.NetworkPolicy
	public       bool
	allow, deny  []mcpbox.HostPattern
	allowAddrSet bool // some allow pattern names addresses
}

func compile(p *mcpbox.NetworkPolicy) (*policy, error) {
	c := &policy{src: p}
	if p == nil {
		return c, nil
	}
	c.public = p.Public
	for _, s := range p.Allow {
		hp, err := mcpbox.ParseHostPattern(s)
		if err != nil {
			return nil, fmt.Errorf("allow entry %q: %w", s, err)
		}
		c.allow = append(c.allow, hp)
		c.allowAddrSet = c.allowAddrSet || hp.IsAddress()
	}
	for _, s := range p.Deny {
		hp, err := mcpbox.ParseHostPattern(s)
		if err != nil {
			return nil, fmt.Errorf("deny entry %q: %w", s, err)
		}
		c.deny = append(c.deny, hp)
	}
	return c, nil
}

// refusal is why a request was not let through; it becomes the HTTP
// answer the sandbox's client (and the model behind it) reads.
type refusal struct {
	status int    // 403 by policy, 400 malformed, 502 upstream
	host   string // as the request named it, for counters and logs
	reason string
}

func (r *refusal) Error() string { return r.reason }

// target is a host the policy admitted by name or address.
type target struct {
	host string     // normalized name, or the address's string
	addr netip.Addr // set for an IP literal
	port int
}

// check decides a request for host:port by name (or, for an IP literal,
// by address), before any resolution. Deny is consulted first.
func (p *policy) check(host string, port int) (*target, *refusal) {
	named := p.src.String()
	if p.src.None() {
		return nil, &refusal{403, host, fmt.Sprintf("this session has no network access (its network policy is none), so %s cannot be reached; "+
			"ask for a network policy that allows %s", hostPort(host, port), host)}
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		if a.Zone() != "" {
			return nil, &refusal{400, host, "zoned addresses are not supported"}
		}
		a = a.Unmap()
		t := &target{host: a.String(), addr: a, port: port}
		for _, d := range p.deny {
			if d.MatchAddr(a) && d.MatchPort(port, true) {
				return nil, &refusal{403, t.host, fmt.Sprintf("%s is refused by the deny-list entry %q of this session's network policy (%s)", hostPort(t.host, port), d.String(), named)}
			}
		}
		for _, al := range p.allow {
			if al.MatchAddr(a) && al.MatchPort(port, false) {
				return t, nil
			}
		}
		if kind := special(a); kind != "" {
			return nil, &refusal{403, t.host, fmt.Sprintf("%s is a %s address, which this session's network policy (%s) does not name; "+
				"add it (or its prefix) to the allow-list to reach it", t.host, kind, named)}
		}
		if p.public && (port == 80 || port == 443) {
			return t, nil
		}
		return nil, p.notAllowed(t.host, port)
	}
	name, err := mcpbox.NormalizeHost(host)
	if err != nil {
		return nil, &refusal{400, host, "bad host name: " + err.Error()}
	}
	for _, d := range p.deny {
		if d.MatchName(name) && d.MatchPort(port, true) {
			return nil, &refusal{403, name, fmt.Sprintf("%s is refused by the deny-list entry %q of this session's network policy (%s)", hostPort(name, port), d.String(), named)}
		}
	}
	for _, al := range p.allow {
		if al.MatchName(name) && al.MatchPort(port, false) {
			return &target{host: name, port: port}, nil
		}
	}
	if p.public && (port == 80 || port == 443) {
		return &target{host: name, port: port}, nil
	}
	return nil, p.notAllowed(name, port)
}

func (p *policy) notAllowed(host string, port int) *refusal {
	named := p.src.String()
	for _, al := range p.allow {
		if (al.MatchName(host) || al.IsAddress() && al.Prefix.IsSingleIP() && al.Prefix.Addr().String() == host) && !al.MatchPort(port, false) {
			return &refusal{403, host, fmt.Sprintf("port %d of %s is not allowed by this session's network policy (%s): only 80 and 443 are, unless an entry names the port (%s:%d)",
				port, host, named, host, port)}
		}
	}
	if p.public {
		return &refusal{403, host, fmt.Sprintf("port %d of %s is not allowed by this session's network policy (%s): public reaches ports 80 and 443 only; add %s:%d to the allow-list",
			port, host, named, host, port)}
	}
	return &refusal{403, host, fmt.Sprintf("%s is not on the allow-list of this session's network policy (%s); ask for it to be added", hostPort(host, port), named)}
}

// admit filters the addresses a name resolved to: a denied address, or a
// special one (loopback, private, …) the policy does not name by address,
// is dropped, whatever name led to it. It refuses when none is left.
func (p *policy) admit(t *target, addrs []netip.Addr) ([]netip.Addr, *refusal) {
	var ok []netip.Addr
	var why string
	for _, a := range addrs {
		a = a.Unmap()
		if d := p.deniedAddr(a, t.port); d != "" {
			why = fmt.Sprintf("%s resolves to %s, which the deny-list entry %q of this session's network policy (%s) refuses", t.host, a, d, p.src.String())
			continue
		}
		if kind := special(a); kind != "" && !p.namesAddr(a) {
			why = fmt.Sprintf("%s resolves to %s, a %s address, which this session's network policy (%s) does not name; "+
				"add the address (or its prefix) to the allow-list if that is intended", t.host, a, kind, p.src.String())
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		if why == "" {
			why = t.host + " resolves to no address"
		}
		return nil, &refusal{403, t.host, why}
	}
	return ok, nil
}

func (p *policy) deniedAddr(a netip.Addr, port int) string {
	for _, d := range p.deny {
		if d.MatchAddr(a) && d.MatchPort(port, true) {
			return d.String()
		}
	}
	return ""
}

func (p *policy) namesAddr(a netip.Addr) bool {
	for _, al := range p.allow {
		if al.MatchAddr(a) {
			return true
		}
	}
	return false
}

// specialPrefixes are the addresses no name may lead to unless the
// policy names them: everything that is not a public unicast address.
var specialPrefixes = []struct {
	p    netip.Prefix
	kind string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "private (shared, carrier-grade NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "reserved (documentation)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "reserved (documentation)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "reserved (documentation)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "reserved (IPv4-compatible)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "reserved (NAT64)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved (NAT64)"},
	{netip.MustParsePrefix("100::/64"), "reserved (discard)"},
	{netip.MustParsePrefix("2001::/32"), "reserved (Teredo)"},
	{netip.MustParsePrefix("2001:db8::/32"), "reserved (documentation)"},
	{netip.MustParsePrefix("2002::/16"), "reserved (6to4)"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// special names the kind of a non-public address, "" for a public one.
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
func special(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() {
		return "invalid"
	}
	for _, s := range specialPrefixes {
		if s.p.Contains(a) {
			return s.kind
		}
	}
	if a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "broadcast"
	}
	if !a.IsGlobalUnicast() {
		return "reserved"
	}
	return ""
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(port)
}
