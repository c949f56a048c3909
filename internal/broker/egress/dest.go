package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// Destinations is the egress broker's destination check as the
// privileged side's checked dialer runs it (internal/gateway/dial): the
// same allow-list, resolution and address checks the Broker runs, with
// the same reason codes, for a broker process that has no network of its
// own and so can neither resolve nor dial itself.
type Destinations struct {
	allow    *allowlist
	addrs    *addrPolicy
	resolve  map[string][]netip.Addr
	resolver Resolver
	timeout  time.Duration
}

// NewDestinations compiles the checks from an egress configuration: the
// allow rules, the unsafe ranges (re-allowed address ranges) and the
// static Resolve map, as Options has them. A nil resolver is
// net.DefaultResolver. It reads the host's interface addresses once, to
// deny them as targets.
func NewDestinations(rules []Rule, unsafe []netip.Prefix, resolve map[string][]netip.Addr, resolver Resolver) (*Destinations, error) {
	allow, err := compileAllow(rules)
	if err != nil {
		return nil, err
	}
	addrs, err := newAddrPolicy(unsafe)
	if err != nil {
		return nil, err
	}
	d := &Destinations{allow: allow, addrs: addrs, resolver: resolver, timeout: DefaultConnectTimeout}
	if d.resolve, err = compileResolve(resolve); err != nil {
		return nil, err
	}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	return d, nil
}

// Name normalizes host and checks it against the allow-list for port;
// port 0 asks whether any rule names the host at all. It returns the
// normalized name, or a reason (ReasonBadHost, ReasonIPLiteral,
// ReasonHostNotAllowed, ReasonPortNotAllowed).
func (d *Destinations) Name(host string, port int) (string, string) {
	name, why := normalizeHost(host)
	if why != "" {
		return "", why
	}
	if _, why := d.allow.match(name, port); why != "" && (port != 0 || why == ReasonHostNotAllowed) {
		return "", why
	}
	return name, ""
}

// Lookup resolves an allowed, normalized name and checks every address:
// one denied address denies the name (ReasonAddressDenied); no answer is
// ReasonResolveFailed. The caller has checked the name with Name.
func (d *Destinations) Lookup(ctx context.Context, name string) ([]netip.Addr, string) {
	as, why, _ := lookupChecked(ctx, d.resolve, d.resolver, d.addrs, d.timeout, name)
	return as, why
}

// Addr checks one address as Lookup checks each resolved one, and
// returns the form to dial.
func (d *Destinations) Addr(a netip.Addr) (netip.Addr, bool) { return d.addrs.check(a) }

// lookupChecked resolves name through the static map or the resolver and
// checks every address (Broker.lookup's rule). err is the resolver's
// error, for the caller's debug log.
func lookupChecked(ctx context.Context, resolve map[string][]netip.Addr, resolver Resolver, p *addrPolicy, timeout time.Duration, name string) ([]netip.Addr, string, error) {
	as, ok := resolve[name]
	if !ok {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		var err error
		as, err = resolver.LookupNetIP(rctx, "ip", name)
		cancel()
		if err != nil {
			if r, ok := errors.AsType[Refusal](err); ok && r.Reason() == ReasonAddressDenied {
				// A resolver that checks addresses itself (the checked
				// dialer's) keeps its reason.
				return nil, ReasonAddressDenied, err
			}
			return nil, ReasonResolveFailed, err
		}
	}
	if len(as) == 0 {
		return nil, ReasonResolveFailed, nil
	}
	out := make([]netip.Addr, 0, min(len(as), maxDialAddrs))
	for _, a := range as {
		c, ok := p.check(a)
		if !ok {
			return nil, ReasonAddressDenied, nil
		}
		if len(out) < maxDialAddrs && !containsAddr(out, c) {
			out = append(out, c)
		}
	}
	return out, "", nil
}
