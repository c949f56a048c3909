package egress

import (
	"net/netip"
)

// Admits reports what the broker's allow-list and address checks decide
// about host:port before policy is asked, with the same code the broker
// runs: the deciding rule and "" when admitted, or the reason it refuses
// (ReasonIPLiteral, ReasonHostNotAllowed, ReasonPortNotAllowed,
// ReasonAddressDenied, …). resolved are the addresses the configuration
// pins for the name (Options.Resolve); when it pins none, the addresses
// are only known at connect time and checked then (checked is false).
// For `cordon policy explain`: its verdict must be the runtime's.
func Admits(rules []Rule, unsafe []netip.Prefix, resolve map[string][]netip.Addr, host string, port int) (rule, reason string, checked bool, err error) {
	a, err := compileAllow(rules)
	if err != nil {
		return "", "", false, err
	}
	p, err := newAddrPolicy(unsafe)
	if err != nil {
		return "", "", false, err
	}
	name, why := normalizeHost(host)
	if why != "" {
		return "", why, true, nil
	}
	if rule, why = a.match(name, port); why != "" {
		return rule, why, true, nil
	}
	as, ok := resolve[name]
	if !ok {
		return rule, "", false, nil
	}
	if len(as) == 0 {
		return rule, ReasonResolveFailed, true, nil
	}
	for _, x := range as {
		if _, ok := p.check(x); !ok {
			return rule, ReasonAddressDenied, true, nil
		}
	}
	return rule, "", true, nil
}
