package e2e

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestHostPoolTCPGateway: the gateway's own cgroup (<id>--gw) has a v1 TCP
// limit (a quarter of the host's pressure threshold at most, 256 MiB for
// a 64 MiB sandbox) that the kernel overshoots like the sandbox's, and the
// agent decides what the gateway's sockets hold: an egress tunnel whose
// agent end never reads piles the upstream's bytes up in the gateway's
// two sockets of it. 3000 such tunnels from a sandbox limited to 64 MiB
// took the gateway's memory.kmem.tcp past 1.25 × its limit while the
// sandbox's own stayed near 0: nothing watched it. From outside the test
// follows the gateway group's memory.kmem.tcp.max_usage_in_bytes: the
// trusted side must end the sandbox near the gateway's bound. Positive
// control (test build without the watch): the same program holds all
// tunnels and the gateway's charge passes the bound.
func TestHostPoolTCPGateway(t *testing.T) {
	testkit.RequireRoot(t)
	requireV1TCP(t)
	st := newStateDir(t)
	// The upstream: sends forever on every connection, never reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		chunk := make([]byte, 1<<20)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = c.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := c.Write(chunk); err != nil && !os.IsTimeout(err) {
						return
					}
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
crossings:
  rate: 500
`, port))
	const tunnels = "3000"
	const gwLimit = 256 << 20 // minGatewayMemory, under a quarter of tcp_mem here
	const bound = gwLimit + gwLimit/4 + 32<<20
	args := []string{"--json", "--memory", "64M", "--config", cfg}
	peak, probe, r := watchGatewayTCPPeak(t, cordonBin, st, probeArgs(args, "hold", "egressflood", tunnels, port)...)
	if peak < gwLimit {
		t.Errorf("the gateway's TCP charge peaked at %d: the program never reached its limit %d, the test proves nothing", peak, gwLimit)
	}
	if peak > bound {
		t.Errorf("the gateway's TCP charge peaked at %d, want at most %d", peak, bound)
	}
	if probe != "" || r.Code == 0 || !r.Outcome.OOM || !strings.Contains(r.Stderr, "socket") {
		t.Errorf("sandbox whose gateway passed its TCP bound: probe %q, exit %d, outcome %+v; want it ended and reported\nstderr: %s", probe, r.Code, r.Outcome, r.Stderr)
	}
	t.Logf("gateway kmem.tcp peak %d (limit %d); exit %d", peak, gwLimit, r.Code)

	cpeak, cprobe, _ := watchGatewayTCPPeak(t, hooksBin, st, probeArgs(withoutLayer("tcp-watch", args), "hold", "egressflood", tunnels, port)...)
	if cpeak <= gwLimit+gwLimit/4 || cprobe != "tunnels="+tunnels {
		t.Errorf("control without the watch: gateway kmem.tcp peak %d, probe %q; want all %s tunnels and over %d", cpeak, cprobe, tunnels, gwLimit+gwLimit/4)
	}
	t.Logf("control: gateway kmem.tcp peak %d, probe %s", cpeak, cprobe)
	requireNoResidue(t, st)
}

// requireV1TCP skips where the memory controller is not v1 (v2 charges
// socket memory to memory.max, whose OOM killer acts); not under CI=true
// on this machine kind, which is v1.
func requireV1TCP(t *testing.T) {
	t.Helper()
	testkit.RequireFile(t, "/sys/fs/cgroup/memory/memory.kmem.tcp.usage_in_bytes", "no v1 memory.kmem.tcp (expected on this machine kind)")
}

// watchGatewayTCPPeak runs bin with args (the probe under hold), polling
// from the host the memory.kmem.tcp.max_usage_in_bytes of the sandbox's
// gateway group until the probe reports (then it releases it) or cordon
// ends. It returns the highest value read, the probe's data ("" if it
// never reported) and cordon's result.
func watchGatewayTCPPeak(t *testing.T, bin, state string, args ...string) (int64, string, result) {
	t.Helper()
	var peak int64
	var gwFile string
	poll := func(cordon int) {
		if gwFile == "" {
			// cordon's children: the sandbox init and the gateway; the
			// init's memory group names the gateway's.
			for _, pid := range childPids(cordon) {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
				if err != nil {
					continue
				}
				for _, l := range strings.Split(string(b), "\n") {
					if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" && strings.HasPrefix(f[2], "/cordon/") && !strings.HasSuffix(f[2], "--gw") {
						gwFile = "/sys/fs/cgroup/memory" + f[2] + "--gw/memory.kmem.tcp.max_usage_in_bytes"
					}
				}
			}
			if gwFile == "" {
				return
			}
		}
		v, err := os.ReadFile(gwFile)
		if err != nil {
			return
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil && n > peak {
			peak = n
		}
	}
	data, r := runHeldProbe(t, bin, state, heldProbeTiming{limit: 120 * time.Second, every: 10 * time.Millisecond, settle: 500 * time.Millisecond}, poll, args...)
	return peak, data, r
}
