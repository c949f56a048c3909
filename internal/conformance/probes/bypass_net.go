package probes

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.net.host-loopback",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: direct network",
		Title:  "a TCP connect from the sandbox to a listener on the host's loopback never arrives",
		Run:    hostLoopback,
	})
}

// hostLoopback: the program dials a listener the runner opened on the
// host's 127.0.0.1; the listener's accept count, read on the host, must
// stay 0. Control: the same op run on the host reaches it.
func hostLoopback(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ln, err := e.Listener()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	target := "tcp:" + ln.Addr()
	r, err := e.Run(ctx, conformance.RunOpts{Op: []string{"connects", target}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if r.Op == nil {
		return conformance.Outcome{Err: fmt.Errorf("the run (exit %d) did not run the probe: %s", r.Code, r.Stderr)}
	}
	inside := ln.Settle(0)
	if _, err := e.HostOp(ctx, "connects", target); err != nil {
		return conformance.Outcome{Err: err}
	}
	total := ln.Settle(inside + 1)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		{Name: "connections from the sandbox accepted by " + ln.Addr(), Want: "0", Got: strconv.FormatInt(inside, 10), OK: inside == 0, Source: "the runner's listener on the host, accept count"},
		{Name: "the same connect from the host", Want: "1 accepted", Got: strconv.FormatInt(total-inside, 10) + " accepted", OK: total-inside == 1, Source: "the runner's listener on the host, accept count", Control: true},
	}}
}
