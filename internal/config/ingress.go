package config

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/cordon-project/cordon/internal/broker/ingress"
)

// IngressRoute is one declared inbound route (network ingress, contract
// section 3): the trusted side listens on Listen on the host and, for
// each connection it admits (policy ingress.connect on the Route, the
// ingress budgets, MaxConcurrent), connects inside the sandbox's network
// namespace to 127.0.0.1:Port and relays the bytes. Nothing else reaches
// into the sandbox.
type IngressRoute struct {
	// Name identifies the route in receipts, logs and policy (the Route
	// entity); unique; same syntax as Config.Workload. Key: name.
	Name string
	// Port is the TCP port the program listens on inside the sandbox
	// (its 127.0.0.1), 1024–65535 (below are the gateway's). Key: port.
	Port int
	// Listen is the host address the route accepts on: an IP literal and
	// a port ("127.0.0.1:18789", "[::1]:8080"); port 0 takes any free
	// port. Default 127.0.0.1:<Port>. Key: listen.
	Listen netip.AddrPort
	// UnsafeListen allows a Listen address that is not loopback: the
	// route is then reachable from the network. Weakens isolation:
	// reported by Warnings, and refused in a daemon sandbox's
	// configuration from a caller that is not root. Key: unsafe_listen.
	UnsafeListen bool
	// MaxConcurrent bounds the route's connections open at once; further
	// connections are refused (and receipted). 1–4096, default
	// DefaultIngressMaxConcurrent. Key: max_concurrent.
	MaxConcurrent int
}

// Ingress defaults and bounds.
const (
	DefaultIngressMaxConcurrent = 64
	maxIngressConcurrent        = 4096
	// MinIngressPort is the lowest sandbox port a route may lead to:
	// below it are only the gateway's own listeners.
	MinIngressPort = 1024
	// MaxIngressRoutes bounds the routes of one configuration.
	MaxIngressRoutes = 16
)

type rawIngress struct {
	Name          string   `yaml:"name"`
	Port          intValue `yaml:"port"`
	Listen        string   `yaml:"listen"`
	UnsafeListen  bool     `yaml:"unsafe_listen"`
	MaxConcurrent intValue `yaml:"max_concurrent"`
}

// buildIngress checks the inbound routes: unique names, a sandbox port,
// a host address that is loopback unless unsafe_listen says otherwise,
// no host address (with a fixed port) or sandbox port declared twice.
func buildIngress(c *Config, routes []rawIngress, ix *index) {
	if len(routes) > MaxIngressRoutes {
		ix.errf("ingress", "declares %d routes; at most %d", len(routes), MaxIngressRoutes)
	}
	names, listens, ports := map[string]bool{}, map[netip.AddrPort]int{}, map[int]int{}
	for i, r := range routes {
		p := fmt.Sprintf("ingress[%d]", i)
		if checkName(ix, p+".name", r.Name) {
			if names[r.Name] {
				ix.errf(p+".name", "route %q is declared twice", r.Name)
			}
			names[r.Name] = true
		}
		route := IngressRoute{Name: r.Name, Port: int(r.Port.n), UnsafeListen: r.UnsafeListen, MaxConcurrent: DefaultIngressMaxConcurrent}
		switch {
		case !r.Port.set:
			ix.errf(p+".port", "required: the TCP port the program listens on inside the sandbox (127.0.0.1), e.g. 18789")
		case r.Port.n < 1 || r.Port.n > 65535:
			ix.errf(p+".port", "%d is not a port; want 1–65535", r.Port.n)
		case r.Port.n < MinIngressPort:
			// Inside the sandbox the ports below 1024 are the gateway's
			// (80–83: model, egress, tools, state brokers); the program
			// cannot listen there. A route to one would hand whoever
			// connects on the host the sandbox's brokers: its model
			// credential, its egress, its managed state.
			ix.errf(p+".port", "%d is below %d: inside the sandbox those ports are the gateway's (80–83) and the program cannot listen on them; serve on a port from %d on", r.Port.n, MinIngressPort, MinIngressPort)
		default:
			if j, dup := ports[route.Port]; dup {
				ix.errf(p+".port", "port %d is already the port of ingress[%d]", route.Port, j)
			}
			ports[route.Port] = i
		}
		if r.Listen == "" {
			route.Listen = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(route.Port))
		} else {
			ap, err := ParseListen(r.Listen)
			if err != nil {
				ix.errf(p+".listen", "%v", err)
			}
			route.Listen = ap
		}
		if a := route.Listen.Addr(); a.IsValid() && !a.IsLoopback() && !r.UnsafeListen {
			ix.errf(p+".listen", "%s is not a loopback address: the route would be reachable from the network; set unsafe_listen: true on the route to accept that", route.Listen)
		}
		if route.Listen.IsValid() && route.Listen.Port() != 0 {
			if j, dup := listens[route.Listen]; dup {
				ix.errf(p+".listen", "%s is already the address of ingress[%d]", route.Listen, j)
			}
			listens[route.Listen] = i
		}
		if r.MaxConcurrent.set {
			if r.MaxConcurrent.n < 1 || r.MaxConcurrent.n > maxIngressConcurrent {
				ix.errf(p+".max_concurrent", "is %d; want 1 to %d", r.MaxConcurrent.n, maxIngressConcurrent)
			}
			route.MaxConcurrent = int(r.MaxConcurrent.n)
		}
		c.Ingress = append(c.Ingress, route)
	}
}

// ParseListen parses an ingress listen address: an IP literal (IPv6 in
// brackets, no zone) and a port 0–65535. Host names are refused: the
// address the trusted side binds must not depend on a resolver.
func ParseListen(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s is not an IP address and port such as 127.0.0.1:18789 or [::1]:8080", strconv.Quote(s))
	}
	if ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("%s: an address with a zone is not supported", strconv.Quote(s))
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// ingressWarnings are the routes that weaken isolation: a listen address
// that is not loopback.
func (c *Config) ingressWarnings() []string {
	var w []string
	for _, r := range c.Ingress {
		if !r.Listen.Addr().IsLoopback() {
			w = append(w, fmt.Sprintf("ingress %s: unsafe_listen: the route listens on %s, reachable from the network, not only from this host", r.Name, r.Listen))
		}
	}
	return w
}

// IngressConfig is the ingress broker process's configuration: the
// routes, in file order.
func (c *Config) IngressConfig() ingress.Config {
	var out ingress.Config
	for _, r := range c.Ingress {
		out.Routes = append(out.Routes, ingress.Route{Name: r.Name, Port: r.Port, Listen: r.Listen.String(), MaxConcurrent: r.MaxConcurrent})
	}
	return out
}
