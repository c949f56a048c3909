package probeops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// Ops of the cross-tenant view probes (tenant.receipts, tenant.approvals).
func init() {
	register("daemon-call", daemonCall)
	register("opens", func(a []string) (string, error) { return attempts(a, openOne) })
	register("dial-keep", dialKeep)
}

// openOne opens a file read-only and reads one byte; it reports the
// outcome only, never the content (the file may be another tenant's).
func openOne(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Read(make([]byte, 1))
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return "", err
}

// dialKeep connects to ADDR over TCP and keeps the connection open.
func dialKeep(a []string) (string, error) {
	if len(a) != 1 {
		return "", fmt.Errorf("usage: dial-keep ADDR")
	}
	c, err := net.DialTimeout("tcp", a[0], 3*time.Second)
	if err != nil {
		return "", err
	}
	kept = append(kept, c) // open until the process ends (pools.go): run it under hold
	return c.LocalAddr().String(), nil
}

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
