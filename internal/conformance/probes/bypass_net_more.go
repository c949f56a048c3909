package probes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.net.no-route",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: direct network",
		Title:  "the sandbox's network namespace has only lo and no route; a listener on another loopback address of the host is never reached",
		Run:    noRoute,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.net.dns",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: DNS",
		Title:  "a DNS query to a resolver on the host's loopback (a runner-owned UDP socket) never arrives",
		Run:    dnsBypass,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.net.host-abstract-socket",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: host sockets",
		Title:  "a connect from the sandbox to an abstract Unix socket the runner listens on in the host's network namespace never arrives",
		Run:    hostAbstract,
	})
}

// hostAbstract: abstract Unix sockets live in the network namespace; the
// runner listens on one in the host's, the program dials it by name and
// the accept count, read on the host, stays 0. Control: the same connect
// from the host is accepted.
func hostAbstract(ctx context.Context, e *conformance.Env) conformance.Outcome {
	name := "@cordon-conformance-" + randToken(8)
	ln, err := fixture.Listen("unix", name)
	if err != nil {
		return broke(err)
	}
	e.Cleanup(func() { ln.Close() })
	target := "unix:" + name
	r, err := e.Run(ctx, conformance.RunOpts{Op: []string{"connects", target}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	inside := ln.Settle(0)
	if _, err := e.HostOp(ctx, "connects", target); err != nil {
		return broke(err)
	}
	total := ln.Settle(inside + 1)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("connections from the sandbox accepted by "+name, "0", itoa(inside), inside == 0, "the runner's abstract socket on the host, accept count"),
		control("the same connect from the host", "1 accepted", itoa(total-inside)+" accepted", total-inside == 1, "the runner's abstract socket on the host, accept count"),
	}}
}

// netDevs lists the interfaces of pid's network namespace
// (/proc/PID/net/dev, read on the host).
func netDevs(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	slices.Sort(out)
	return out, nil
}

// netRoutes lists the IPv4 routes of pid's network namespace
// (/proc/PID/net/route: the main table, "DEV DEST/MASK") and the IPv6
// routes whose device is not lo.
func netRoutes(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/route", pid))
	if err != nil {
		return nil, err
	}
	var out []string
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); i > 0 && len(f) > 7 {
			out = append(out, f[0]+" "+f[1]+"/"+f[7])
		}
	}
	b6, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/ipv6_route", pid))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b6)), "\n") {
		if f := strings.Fields(l); len(f) == 10 && f[9] != "lo" {
			out = append(out, f[9]+" "+f[0]+"/"+f[1]+" (ipv6)")
		}
	}
	return out, nil
}

// noRoute: the program, held, asks the kernel for a route to a documentation
// address (a UDP connect: nothing is sent, even where a route exists); the
// host reads the program's network namespace through /proc/PID/net: only
// lo, no route. A listener the runner opened on 127.0.0.2 on the host is
// dialled from inside and must count 0. Control: the host dials it (1), and
// the same /proc reading of the runner's own namespace lists its routes.
func noRoute(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ln, err := fixture.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return conformance.Outcome{NotEvidenced: "this host has no 127.0.0.2 on its loopback: " + err.Error()}
	}
	e.Cleanup(func() { ln.Close() })
	target := "tcp:" + ln.Addr()
	r, err := e.Run(ctx, conformance.RunOpts{Op: []string{"connects", target}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	inside := ln.Settle(0)
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "udproute", "192.0.2.1:9", "[2001:db8::1]:9"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	devs, err := netDevs(prog)
	if err != nil {
		return broke(err)
	}
	routes, err := netRoutes(prog)
	if err != nil {
		return broke(err)
	}
	hint, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	if _, err := e.HostOp(ctx, "connects", target); err != nil {
		return broke(err)
	}
	total := ln.Settle(inside + 1)
	self, err := netRoutes(os.Getpid())
	if err != nil {
		return broke(err)
	}
	facts := []record.Fact{
		fact("interfaces of the program's network namespace", "lo", strings.Join(devs, " "), slices.Equal(devs, []string{"lo"}), "/proc/PID/net/dev of the held program, read on the host"),
		fact("routes of the program's network namespace (IPv4 main table, IPv6 off lo)", "none", strings.TrimSpace(fmt.Sprint(len(routes))+" "+strings.Join(routes, ", ")), len(routes) == 0, "/proc/PID/net/route and ipv6_route of the held program, read on the host"),
		fact("connections from the sandbox accepted by "+ln.Addr(), "0", itoa(inside), inside == 0, "the runner's listener on the host's 127.0.0.2, accept count"),
		control("the same connect to "+ln.Addr()+" from the host", "1 accepted", itoa(total-inside)+" accepted", total-inside == 1, "the runner's listener on the host, accept count"),
	}
	if len(self) > 0 {
		// The reading would see routes where there are some.
		facts = append(facts, control("the same route reading of the runner's own namespace", "routes listed", fmt.Sprint(len(self))+" routes", true, "/proc/self/net/route of the runner"))
	}
	return conformance.Outcome{Hint: hint.Hint(), Facts: facts}
}

// dnsBypass: a resolver stand-in (a UDP socket the runner binds on the
// host's 127.0.0.53, where a local resolver would listen) counts the
// queries it receives; the program's query must not arrive. Control: the
// same query from the host arrives.
func dnsBypass(ctx context.Context, e *conformance.Env) conformance.Outcome {
	u, err := listenUDP(e, "127.0.0.53:0")
	if err != nil {
		if u, err = listenUDP(e, "127.0.0.1:0"); err != nil {
			return broke(err)
		}
	}
	name := "cordon-conformance-" + randToken(4) + ".test"
	r, err := e.Run(ctx, conformance.RunOpts{Op: []string{"dnsquery", u.Addr(), name}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	inside := u.Settle(0)
	if _, err := e.HostOp(ctx, "dnsquery", u.Addr(), name); err != nil {
		return broke(err)
	}
	total := u.Settle(inside + 1)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("DNS queries from the sandbox received by "+u.Addr(), "0", itoa(inside), inside == 0, "the runner's UDP socket on the host, datagram count"),
		control("the same query from the host", "1 received", itoa(total-inside)+" received", total-inside == 1, "the runner's UDP socket on the host, datagram count"),
	}}
}
