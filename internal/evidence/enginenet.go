package evidence

import (
	"fmt"
	"strings"
)

// EngineNet is an engine's network namespace a sandbox was spawned into
// instead of one of cordon's own (sandbox.Spec.EngineNet).
type EngineNet struct {
	// Path is where the engine named it; Reason who accepted it.
	Path, Reason string
}

// WithEngineNet adds to b, the boundaries read from a sandbox in an
// engine's network namespace (en; nil: none), the fact that keeps its
// network boundary unverified whatever the other checks read: cordon did
// not build that namespace, the engine (and anyone it lets) may change
// its interfaces and routes at any time, and other containers may share
// it. The namespace and interface checks stay as read (not the host's;
// what it holds now), and this fact repeats them in its reason.
func WithEngineNet(b map[string]Boundary, en *EngineNet) {
	if en == nil {
		return
	}
	nb := b[Network]
	ifs, routes := "unread", "unread"
	for _, c := range nb.Facts {
		switch c.Name {
		case "interfaces":
			ifs = c.Got
		case "ipv4_routes":
			routes = c.Got
		}
	}
	got := fmt.Sprintf("the engine's network namespace %s (%s): interfaces %s; %s", en.Path, en.Reason, ifs, routes)
	if strings.HasSuffix(routes, " routes") && !strings.HasPrefix(routes, "0 ") {
		got += " (routes out exist)"
	}
	nb.Facts = append(nb.Facts, Check{Name: "own_network_namespace", Want: "a network namespace of cordon's own (nothing to route to)", Got: got, Source: "the trusted side's spawn (sandbox.Spec.EngineNet)"})
	nb.Verified = false
	b[Network] = nb
}

// EngineNetNonClaim is the record's non-claim for a sandbox in an
// engine's network namespace, with what its network boundary read.
func EngineNetNonClaim(en *EngineNet, b Boundary) string {
	for _, c := range b.Facts {
		if c.Name == "own_network_namespace" {
			return "network boundary not claimed: " + c.Got + "; egress is whatever the engine's namespace routes, not only through a cordon gateway"
		}
	}
	return "network boundary not claimed: the engine's network namespace " + en.Path + " (" + en.Reason + ")"
}
