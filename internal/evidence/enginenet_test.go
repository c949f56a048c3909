package evidence

import (
	"strings"
	"testing"
)

// TestWithEngineNet: a sandbox in an engine's network namespace never has
// its network boundary verified, even when every check read passes (an
// engine's namespace with lo only); the fact names the namespace, who
// accepted it, and the interfaces and routes read. Without one (nil) the
// boundaries are left as read (the control).
func TestWithEngineNet(t *testing.T) {
	read := func(ifs, routes string) map[string]Boundary {
		return map[string]Boundary{
			Network: {Verified: ifs == "lo" && routes == "0 routes", Facts: []Check{
				{Name: "net_namespace", OK: true},
				{Name: "interfaces", Got: ifs, OK: ifs == "lo"},
				{Name: "ipv4_routes", Got: routes, OK: routes == "0 routes"},
			}},
			Process: {Verified: true},
		}
	}
	en := &EngineNet{Path: "/run/netns/cni-1", Reason: "the operator's"}
	for _, c := range []struct {
		ifs, routes, want string
		routesOut         bool
	}{
		{"lo", "0 routes", "the engine's network namespace /run/netns/cni-1 (the operator's): interfaces lo; 0 routes", false},
		{"lo,eth0", "2 routes", "interfaces lo,eth0; 2 routes (routes out exist)", true},
		{"lo", "unreadable: gone", "unreadable: gone", false},
	} {
		b := read(c.ifs, c.routes)
		WithEngineNet(b, en)
		nb := b[Network]
		last := nb.Facts[len(nb.Facts)-1]
		if nb.Verified || last.Name != "own_network_namespace" || last.OK || !strings.Contains(last.Got, c.want) || strings.Contains(last.Got, "routes out exist") != c.routesOut {
			t.Errorf("WithEngineNet(%s, %s): verified %v, last fact %+v; want unverified, own_network_namespace saying %q", c.ifs, c.routes, nb.Verified, last, c.want)
		}
		if !b[Process].Verified || len(nb.Facts) != 4 {
			t.Errorf("WithEngineNet(%s, %s) touched more than the network boundary's one fact: %+v", c.ifs, c.routes, b)
		}
		if nc := EngineNetNonClaim(en, nb); !strings.HasPrefix(nc, "network boundary not claimed: "+last.Got) {
			t.Errorf("EngineNetNonClaim = %q", nc)
		}
	}
	b := read("lo", "0 routes")
	WithEngineNet(b, nil)
	if !b[Network].Verified || len(b[Network].Facts) != 3 {
		t.Errorf("WithEngineNet(nil) changed the boundaries: %+v", b[Network])
	}
}
