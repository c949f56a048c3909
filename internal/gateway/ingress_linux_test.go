package gateway

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/gateway/dial"
	"github.com/cordon-project/cordon/internal/testkit"
)

// The dial policy of the ingress broker: 127.0.0.1 at a declared port,
// nothing else (no other port, no other address, no name, no resolution).
func TestIngressDialPolicy(t *testing.T) {
	// "m" leads to the model broker's port: refused whatever the
	// configuration says (the gateway's own listeners are no route).
	routes := []ingress.Route{{Name: "ui", Port: 18789}, {Name: "api", Port: 8080}, {Name: "m", Port: ModelPort}, {Name: "s", Port: StatePort}}
	gate := newIngressGate(routes)
	d := newIngressDial(routes, gate)
	ctx := context.Background()
	for _, c := range []struct {
		host string
		port int
		ok   bool
	}{
		{"127.0.0.1", 18789, true},
		{"127.0.0.1", 8080, true},
		{"::ffff:127.0.0.1", 8080, true},
		{"127.0.0.1", 18790, false},
		{"127.0.0.2", 18789, false},
		{"::1", 18789, false},
		{"0.0.0.0", 18789, false},
		{"10.0.0.1", 18789, false},
		{"localhost", 18789, false},
		{"127.0.0.1", ModelPort, false},
		{"127.0.0.1", StatePort, false},
	} {
		gate.grant(1, c.port) // an admitted connection: the address decides
		plan, err := d.Plan(ctx, c.host, c.port)
		gate.revoke(1)
		var r *dial.Refused
		switch {
		case c.ok && (err != nil || len(plan) != 1 || plan[0].String() != "127.0.0.1:"+strconv.Itoa(c.port)):
			t.Errorf("Plan(%s, %d) = %v, %v; want 127.0.0.1:%d", c.host, c.port, plan, err, c.port)
		case !c.ok && (err == nil || !errors.As(err, &r) || r.Why != dial.ReasonNotDeclared):
			t.Errorf("Plan(%s, %d) = %v, %v; want refused as not declared", c.host, c.port, plan, err)
		}
	}
	if _, err := d.Resolve(ctx, "localhost"); err == nil {
		t.Error("Resolve(localhost) succeeded; the ingress broker resolves nothing")
	}
}

// A route's host listener: port 0 is bound to a free port and reported;
// an address in use fails with ErrIngressListen naming the route, the
// address and the cause, and leaves nothing open.
func TestListenIngress(t *testing.T) {
	files, addrs, err := listenIngress([]ingress.Route{{Name: "ui", Port: 1, Listen: "127.0.0.1:0"}})
	if err != nil || len(files) != 1 || len(addrs) != 1 || strings.HasSuffix(addrs[0], ":0") {
		t.Fatalf("listenIngress(port 0) = %v, %v, %v", files, addrs, err)
	}
	defer files[0].Close()
	// The bound address is taken now: a second route on it fails.
	_, _, err = listenIngress([]ingress.Route{{Name: "a", Port: 1, Listen: "127.0.0.1:0"}, {Name: "b", Port: 2, Listen: addrs[0]}})
	if !errors.Is(err, ErrIngressListen) || !strings.Contains(err.Error(), "route b on "+addrs[0]) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("listenIngress(taken) = %v", err)
	}
	if _, _, err := listenIngress([]ingress.Route{{Name: "x", Port: 1, Listen: "not an address"}}); !errors.Is(err, ErrIngressListen) {
		t.Errorf("listenIngress(bad) = %v", err)
	}
}

// The sandbox's network namespace is held by descriptor. A dial in
// flight when the gateway stops used to read the descriptor's number and
// then open /proc/self/fd/<number>: closed meanwhile, the number could be
// another file — in a daemon, another sandbox's namespace being opened
// for its own gateway — and root's socket would be made there. Now the
// descriptor is held for the whole setns: once closed, socket fails and
// never names a number. Control: before close, socket makes a socket.
func TestSandboxNetnsSocketAfterClose(t *testing.T) {
	testkit.RequireRoot(t)
	ns, err := openSandboxNetns(os.Getpid()) // this process's own namespace stands in
	if err != nil {
		t.Fatal(err)
	}
	fd, err := ns.socket(context.Background(), false)
	if err != nil {
		t.Fatalf("control: socket before close = %v", err)
	}
	unix.Close(fd)
	ns.close()
	// The next descriptor opened takes the number the namespace had.
	other, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if fd, err := ns.socket(context.Background(), false); err == nil {
		unix.Close(fd)
		t.Fatal("socket after close succeeded; want it refused")
	}
	ns.close() // twice: no panic
}
