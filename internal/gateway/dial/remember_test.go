package dial

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
)

// wildResolver answers every name under wild.test with eight public
// addresses: name n gets the (n mod distinct)-th block of eight — as DNS
// an agent controls under an allowed wildcard would.
type wildResolver struct{ distinct int }

func (r wildResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(host, "n"), ".wild.test"))
	base := (n % r.distinct) * 8
	out := make([]netip.Addr, 8)
	for i := range out {
		v := base + i
		out[i] = netip.AddrFrom4([4]byte{8, byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return out, nil
}

func (e *Egress) remembered() (addrs, names int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ns := range e.seen {
		names += len(ns)
	}
	return len(e.seen), names
}

// TestEgressRememberBounded: what the egress policy remembers of the
// resolutions a broker process asks for is bounded in all — addresses and
// the names behind them — not per address: a compromised egress broker
// process resolving many names under an allowed wildcard cannot grow the
// privileged side's memory (or the work of each later resolution) beyond
// that bound. Control: once the remembered answers expire, new ones are
// remembered and vouch for a dial again.
func TestEgressRememberBounded(t *testing.T) {
	d, err := egress.NewDestinations([]egress.Rule{{Host: "*.wild.test", Ports: []int{443}}}, nil, nil, wildResolver{distinct: 512})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEgress(d)
	now := time.Unix(1_000_000, 0)
	e.now = func() time.Time { return now }
	ctx := context.Background()
	for i := range 40000 {
		if _, err := e.Resolve(ctx, "n"+strconv.Itoa(i)+".wild.test"); err != nil {
			t.Fatalf("Resolve(n%d) = %v", i, err)
		}
	}
	addrs, names := e.remembered()
	if addrs > maxSeen || names > maxSeenNames {
		t.Errorf("remembered %d addresses and %d names, want at most %d and %d", addrs, names, maxSeen, maxSeenNames)
	}
	// Later: the answers expired; a fresh resolution vouches again.
	now = now.Add(2 * resolvedTTL)
	as, err := e.Resolve(ctx, "n1.wild.test")
	if err != nil || len(as) == 0 {
		t.Fatalf("Resolve after expiry = %v, %v", as, err)
	}
	if _, err := e.Plan(ctx, as[0].String(), 443); err != nil {
		t.Errorf("Plan(%s) after a fresh resolution = %v, want allowed", as[0], err)
	}
	if _, err := e.Plan(ctx, as[0].String(), 80); err == nil {
		t.Errorf("Plan(%s:80) = allowed, want refused (the rule lists 443)", as[0])
	}
}
