package dial

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
)

// Resolver looks names up on the privileged side; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// None refuses everything: the policy of a broker that reaches no network
// (state).
type None struct{ Broker string }

// Plan refuses.
func (n None) Plan(_ context.Context, host string, port int) ([]netip.AddrPort, error) {
	return nil, &Refused{Broker: n.Broker, Target: net.JoinHostPort(host, strconv.Itoa(port)), Why: ReasonNotDeclared}
}

// Resolve refuses.
func (n None) Resolve(_ context.Context, host string) ([]netip.Addr, error) {
	return nil, &Refused{Broker: n.Broker, Target: host, Why: ReasonNotDeclared}
}

// Fixed allows exactly the declared host:port destinations — the model
// routes' upstreams, the remote tool servers' URLs — and resolves a
// declared name on the privileged side. When the operator declared the
// name its answer is trusted as far as DNS is and ranges are not checked
// (a model upstream may well be a local proxy); a configuration from
// anyone else is held to the egress address checks (CheckAddrs).
type Fixed struct {
	broker   string
	allowed  map[string]bool // "host:port", host lower-case
	resolver Resolver
	// check, when set, must pass every address dialled (else
	// ReasonAddressDenied) and gives the form to dial.
	check func(netip.Addr) (netip.Addr, bool)
}

// CheckAddrs holds every address f dials to check (for instance
// egress.Destinations.Addr: no loopback, private, link-local, metadata or
// host address) and returns f.
func (f *Fixed) CheckAddrs(check func(netip.Addr) (netip.Addr, bool)) *Fixed {
	f.check = check
	return f
}

// NewFixed returns the policy for the declared destinations, each
// "host:port" (IPv6 literals bracketed). A nil resolver is
// net.DefaultResolver.
func NewFixed(broker string, dests []string, resolver Resolver) *Fixed {
	f := &Fixed{broker: broker, allowed: map[string]bool{}, resolver: resolver}
	if f.resolver == nil {
		f.resolver = net.DefaultResolver
	}
	for _, d := range dests {
		if h, p, err := net.SplitHostPort(d); err == nil {
			f.allowed[net.JoinHostPort(strings.ToLower(strings.TrimSuffix(h, ".")), p)] = true
		}
	}
	return f
}

// Plan checks host:port is declared and resolves it.
func (f *Fixed) Plan(ctx context.Context, host string, port int) ([]netip.AddrPort, error) {
	t := net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), strconv.Itoa(port))
	if !f.allowed[t] {
		return nil, &Refused{Broker: f.broker, Target: t, Why: ReasonNotDeclared}
	}
	h := strings.TrimSuffix(host, ".")
	var as []netip.Addr
	if a, err := netip.ParseAddr(h); err == nil {
		as = []netip.Addr{a}
	} else if as, err = f.resolver.LookupNetIP(ctx, "ip", h); err != nil || len(as) == 0 {
		return nil, &Refused{Broker: f.broker, Target: t, Why: egress.ReasonResolveFailed}
	}
	out := make([]netip.AddrPort, 0, min(len(as), maxAddrs))
	for _, a := range as[:min(len(as), maxAddrs)] {
		a = a.Unmap()
		if f.check != nil {
			// One denied address denies the name, as for egress: a name
			// that also resolves to loopback is not dialled at all.
			c, ok := f.check(a)
			if !ok {
				return nil, &Refused{Broker: f.broker, Target: t, Why: egress.ReasonAddressDenied}
			}
			a = c
		}
		out = append(out, netip.AddrPortFrom(a, uint16(port)))
	}
	return out, nil
}

// Resolve refuses: these brokers dial declared names directly.
func (f *Fixed) Resolve(_ context.Context, host string) ([]netip.Addr, error) {
	return nil, &Refused{Broker: f.broker, Target: host, Why: ReasonNotDeclared}
}

// Egress is the egress broker's policy: the allow-list, resolution and
// address checks of internal/broker/egress (Destinations), run on the
// privileged side. The broker process resolves first (Resolve: before it
// asks policy and budget, as the egress broker always has) and then dials
// a checked address; Plan allows an address only if this policy itself
// resolved an allowed name to it within resolvedTTL, and the name's rule
// allows the port, and the address passes the checks again.
type Egress struct {
	d *egress.Destinations

	mu        sync.Mutex
	seen      map[netip.Addr]map[string]time.Time // address → names that resolved to it, and when
	pairs     int                                 // (address, name) pairs in seen
	nextPurge time.Time                           // no sweep of seen before this
	now       func() time.Time
}

// resolvedTTL is how long a resolution vouches for a later dial of its
// addresses: longer than the broker's connect timeout plus its ClientHello
// wait.
const resolvedTTL = time.Minute

// maxSeen and maxSeenNames bound the remembered resolutions of one broker
// process: addresses, and (address, name) pairs in all. A bound per
// address alone let a process that resolves many names under an allowed
// wildcard keep about a quarter of a million pairs on the privileged side,
// and made every later resolution walk them all.
// maxNamesPerAddr keeps vouched cheap: it walks one address's names.
const (
	maxSeen         = 4096
	maxSeenNames    = 8192
	maxNamesPerAddr = 64
)

// purgeEvery is how often, at most, a full memory is swept for expired
// answers (a sweep walks every pair).
const purgeEvery = time.Second

// NewEgress returns the egress policy over the compiled destinations.
func NewEgress(d *egress.Destinations) *Egress {
	return &Egress{d: d, seen: map[netip.Addr]map[string]time.Time{}, now: time.Now}
}

// Resolve checks host against the allow-list (any port), resolves it and
// checks every address; it remembers the answer for Plan.
func (e *Egress) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	name, why := e.d.Name(host, 0)
	if why != "" {
		return nil, &Refused{Broker: "egress", Target: host, Why: why}
	}
	addrs, why := e.d.Lookup(ctx, name)
	if why != "" {
		return nil, &Refused{Broker: "egress", Target: name, Why: why}
	}
	e.remember(name, addrs)
	return addrs, nil
}

// Plan allows a checked address this policy resolved an allowed name to
// (the broker process dials addresses, never names), or resolves and
// checks a name itself.
func (e *Egress) Plan(ctx context.Context, host string, port int) ([]netip.AddrPort, error) {
	t := net.JoinHostPort(host, strconv.Itoa(port))
	a, err := netip.ParseAddr(host)
	if err != nil {
		name, why := e.d.Name(host, port)
		if why != "" {
			return nil, &Refused{Broker: "egress", Target: t, Why: why}
		}
		addrs, why := e.d.Lookup(ctx, name)
		if why != "" {
			return nil, &Refused{Broker: "egress", Target: t, Why: why}
		}
		out := make([]netip.AddrPort, 0, len(addrs))
		for _, x := range addrs {
			out = append(out, netip.AddrPortFrom(x, uint16(port)))
		}
		return out, nil
	}
	c, ok := e.d.Addr(a)
	if !ok {
		return nil, &Refused{Broker: "egress", Target: t, Why: egress.ReasonAddressDenied}
	}
	if !e.vouched(c, port) {
		return nil, &Refused{Broker: "egress", Target: t, Why: egress.ReasonHostNotAllowed}
	}
	return []netip.AddrPort{netip.AddrPortFrom(c, uint16(port))}, nil
}

// remember records that name resolved to addrs. When the memory is full
// it first sweeps expired answers (at most once per purgeEvery); what
// still does not fit is not remembered, so a dial of it is refused (fail
// closed) until older answers expire.
func (e *Egress) remember(name string, addrs []netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if (len(e.seen) >= maxSeen || e.pairs+len(addrs) > maxSeenNames) && !now.Before(e.nextPurge) {
		e.nextPurge = now.Add(purgeEvery)
		for a, names := range e.seen {
			for n, t := range names {
				if now.Sub(t) > resolvedTTL {
					delete(names, n)
					e.pairs--
				}
			}
			if len(names) == 0 {
				delete(e.seen, a)
			}
		}
	}
	for _, a := range addrs {
		names := e.seen[a]
		if _, ok := names[name]; ok {
			names[name] = now
			continue
		}
		if e.pairs >= maxSeenNames || len(names) >= maxNamesPerAddr || (names == nil && len(e.seen) >= maxSeen) {
			continue // full of live answers: this address cannot be dialled
		}
		if names == nil {
			names = map[string]time.Time{}
			e.seen[a] = names
		}
		names[name] = now
		e.pairs++
	}
}

// vouched reports whether a name allowed on port resolved to a recently.
func (e *Egress) vouched(a netip.Addr, port int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for name, t := range e.seen[a] {
		if now.Sub(t) > resolvedTTL {
			continue
		}
		if _, why := e.d.Name(name, port); why == "" {
			return true
		}
	}
	return false
}
