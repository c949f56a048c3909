package egress

import "net/netip"

// Config is the egress broker's configuration: internal/config builds it
// from the file (config.Config.EgressConfig) and the gateway process
// hands its fields to New as they came over the config pipe.
type Config struct {
	Allow []Rule `json:"allow,omitempty"`
	// UnsafeAllowRanges weaken isolation (Options.UnsafeAllowRanges).
	UnsafeAllowRanges []netip.Prefix          `json:"unsafe_allow_ranges,omitempty"`
	Resolve           map[string][]netip.Addr `json:"resolve,omitempty"`
}

// Options are the broker's options with c's destinations; the caller
// adds the authority channel, the logger and the rest.
func (c Config) Options() Options {
	return Options{Allow: c.Allow, UnsafeAllowRanges: c.UnsafeAllowRanges, Resolve: c.Resolve}
}
