package probeops

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// Ops of the cross-tenant view probes (tenant.receipts, tenant.approvals).
func init() { register("daemon-call", daemonCall) }

// daemonCall asks the daemon at SOCKET for each OP in turn, with no
// arguments: daemon-call SOCKET OP... It reports, per op, "ok" or the
// daemon's (or the connection's) error. What a caller learns from the
// answers is the point: the probe compares them.
func daemonCall(a []string) (string, error) {
	if len(a) < 2 {
		return "", fmt.Errorf("usage: daemon-call SOCKET OP...")
	}
	out := map[string]string{}
	for _, op := range a[1:] {
		out[op] = callOnce(a[0], op)
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func callOnce(sock, op string) string {
	cl, err := proto.Dial(sock)
	if err != nil {
		return outcome("", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res json.RawMessage
	return outcome("", cl.Do(ctx, op, nil, nil, &res))
}
