package egress

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

type reasonErr string

func (r reasonErr) Error() string  { return "refused: " + string(r) }
func (r reasonErr) Reason() string { return string(r) }

type errResolver struct{ err error }

func (e errResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, e.err
}

// A resolver that checks addresses itself (the privileged side's checked
// dialer, for a broker process with no network) keeps its address-denied
// reason; any other resolver error is resolve-failed.
func TestLookupKeepsTheCheckedResolversReason(t *testing.T) {
	p, err := newAddrPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{reasonErr(ReasonAddressDenied), ReasonAddressDenied},
		{reasonErr(ReasonHostNotAllowed), ReasonResolveFailed},
		{errors.New("no such host"), ReasonResolveFailed},
	} {
		_, why, _ := lookupChecked(context.Background(), nil, errResolver{tc.err}, p, time.Second, "x.test")
		if why != tc.want {
			t.Errorf("lookupChecked(resolver error %v) = %q, want %q", tc.err, why, tc.want)
		}
	}
}

// Destinations runs the broker's checks: names only, the allow-list with
// ports (port 0: any rule naming the host), and the address ranges.
func TestDestinations(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	d, err := NewDestinations([]Rule{{Host: "a.test", Ports: []int{8443}}}, nil, map[string][]netip.Addr{"a.test": {lo}}, errResolver{errors.New("no network")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"A.Test.", 8443, ""}, {"a.test", 0, ""}, {"a.test", 443, ReasonPortNotAllowed},
		{"b.test", 0, ReasonHostNotAllowed}, {"127.0.0.1", 8443, ReasonIPLiteral},
	} {
		if _, why := d.Name(tc.host, tc.port); why != tc.want {
			t.Errorf("Name(%q, %d) = %q, want %q", tc.host, tc.port, why, tc.want)
		}
	}
	if _, why := d.Lookup(context.Background(), "a.test"); why != ReasonAddressDenied {
		t.Errorf("Lookup(a.test → loopback) = %q, want %q", why, ReasonAddressDenied)
	}
	if _, ok := d.Addr(netip.MustParseAddr("8.8.8.8")); !ok {
		t.Errorf("Addr(8.8.8.8) denied, want allowed")
	}
	if _, ok := d.Addr(netip.MustParseAddr("::ffff:10.0.0.1")); ok {
		t.Errorf("Addr(::ffff:10.0.0.1) allowed, want denied")
	}
}
