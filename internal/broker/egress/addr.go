package egress

import (
	"fmt"
	"net"
	"net/netip"
)

// deniedV4 are IPv4 ranges no agent connection may reach unless an
// Options.UnsafeAllowRanges prefix covers the address. Everything else in
// IPv4 is publicly routed unicast.
var deniedV4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),      // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT shared space: the provider's side of a carrier NAT
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback: the host's own services
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, including 169.254.169.254 cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),   // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (DS-Lite, NAT64 discovery …)
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1: documentation, never on the Internet
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // private (RFC 1918)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking: often lab or internal fabric
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2: documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3: documentation
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255 broadcast
}

// Documentation ranges are denied, not allowed: they are never routed on
// the Internet, so a name resolving into one is a misconfiguration or a
// trick, and denying costs nothing legitimate.

// globalV6 is the only IPv6 space an agent may reach: global unicast.
// Everything outside it is denied by construction — ::/128 unspecified,
// ::1 loopback, ::/96 IPv4-compatible, ::ffff:0:0:0/96 SIIT, 100::/64
// discard, 64:ff9b:1::/48 local-use NAT64, fc00::/7 unique local,
// fe80::/10 link-local, fec0::/10 site-local, ff00::/8 multicast — except
// the well-known NAT64 prefix, which is judged by the IPv4 it embeds.
// (::ffff:0:0/96 IPv4-mapped never reaches this check: it is unmapped
// first and judged as IPv4.)
var globalV6 = netip.MustParsePrefix("2000::/3")

// deniedV6 are special ranges inside globalV6.
var deniedV6 = []netip.Prefix{
	netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments: Teredo (embeds an obfuscated IPv4), benchmarking, ORCHID, AMT
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
}

// embeddingV6 are IPv6 prefixes whose addresses carry an IPv4 address
// that a translator or relay will deliver to; the embedded address is
// checked as if it were dialed directly.
var embeddingV6 = []struct {
	prefix netip.Prefix
	at     int // byte offset of the IPv4 address
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12}, // NAT64 well-known prefix (RFC 6052)
	{netip.MustParsePrefix("2002::/16"), 2},     // 6to4 (RFC 3056)
}

// addrPolicy decides which resolved addresses a connection may dial.
type addrPolicy struct {
	unsafe []netip.Prefix
	own    map[netip.Addr]bool // the host's interface addresses, read at New
}

func newAddrPolicy(unsafe []netip.Prefix) (*addrPolicy, error) {
	p := &addrPolicy{own: map[netip.Addr]bool{}}
	for _, u := range unsafe {
		if !u.IsValid() {
			return nil, fmt.Errorf("egress: invalid UnsafeAllowRanges prefix %v", u)
		}
		p.unsafe = append(p.unsafe, netip.PrefixFrom(u.Addr().Unmap(), unmappedBits(u)).Masked())
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress: read interface addresses: %w", err)
	}
	for _, a := range ifs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			p.own[na.Unmap()] = true
		}
	}
	return p, nil
}

func unmappedBits(u netip.Prefix) int {
	if u.Addr().Is4In6() {
		return max(u.Bits()-96, 0)
	}
	return u.Bits()
}

// check reports whether a may be dialed, and returns the form to dial:
// IPv4-mapped IPv6 is unmapped first, so ::ffff:127.0.0.1 is judged (and
// dialed) as 127.0.0.1. Scoped (zoned) addresses are never allowed.
func (p *addrPolicy) check(a netip.Addr) (netip.Addr, bool) {
	if !a.IsValid() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	return a, p.allowed(a)
}

func (p *addrPolicy) allowed(a netip.Addr) bool {
	for _, u := range p.unsafe {
		if u.Contains(a) {
			return true
		}
	}
	if p.own[a] {
		return false
	}
	if a.Is4() {
		for _, d := range deniedV4 {
			if d.Contains(a) {
				return false
			}
		}
		return true
	}
	for _, e := range embeddingV6 {
		if e.prefix.Contains(a) {
			b := a.As16()
			return p.allowed(netip.AddrFrom4([4]byte(b[e.at : e.at+4])))
		}
	}
	if !globalV6.Contains(a) {
		return false
	}
	for _, d := range deniedV6 {
		if d.Contains(a) {
			return false
		}
	}
	return true
}
