package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/setns"
	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// enetHandler is a CRI runtime handler whose runtime is cordon with the
// host operator's --engine-network=accept and the level it requires.
// The runc v2 shim's options name a binary and take no arguments, so the
// operator's flags come through a wrapper script (docs/oci.md).
const enetHandler = "cordon-enet"

// ptpGateway is the host end of every test pod's ptp link, in
// containerd's own network namespace (engines.ContainerdCRI's CNI
// network 10.254.0.0/24: host-local's gateway is its first address).
const ptpGateway = "10.254.0.1"

// enetRuntime writes the wrapper script into dir and returns the handler.
func enetRuntime(t testing.TB, dir string) engines.Runtime {
	t.Helper()
	script := filepath.Join(dir, "cordon-oci-engine-net")
	body := fmt.Sprintf("#!/bin/sh\nexec %s --engine-network accept --level DEDICATED_RUNTIME \"$@\"\n", cordonOCI)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return engines.Runtime{Name: enetHandler, Binary: script}
}

// stateUnder is `cordon oci state ID` under handler's runtime root.
func (e *engine) stateUnder(t testing.TB, handler, id string) keeperState {
	t.Helper()
	out, err := exec.Command(cordonBin, "oci", "--root", e.runtimeRoot(handler), "state", id).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("cordon oci state %s: %v", id, err)
	}
	var s keeperState
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("cordon oci state %s: %v\n%s", id, err, out)
	}
	return s
}

// podNetPath is the network namespace containerd made for pod id (its
// sandbox container's runtime spec, from the pod's verbose status).
func (e *engine) podNetPath(t testing.TB, id string) string {
	t.Helper()
	r, err := e.cri.PodStatus(e.ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string } `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(r.Info["info"]), &info); err != nil {
		t.Fatalf("pod %s: verbose status: %v", id, err)
	}
	for _, n := range info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" && n.Path != "" {
			return n.Path
		}
	}
	t.Fatalf("pod %s: no network namespace path in its runtime spec: %q", id, r.Info["info"])
	return ""
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// testCRIEngineNetwork: with the host operator's --engine-network=accept
// (handler cordon-enet), a pod's container runs in the pod's network
// namespace (the one containerd's CNI plugin configured): read from the
// host, the program's /proc/PID/ns/net is the pod's; inside it sees the
// pod's eth0, and it reaches the harness's listener at the pod network's
// gateway — in containerd's private network namespace — but not the
// host's loopback listener. The state and evidence say so: admitted
// DEDICATED_RUNTIME, the network boundary not verified,
// dev.cordon.network naming the joined namespace. The control is the
// same pod under the handler cordon (cordon's own namespace): another
// namespace, lo only, the gateway's listener out of reach, admitted
// DEDICATED_CONTAINER.
func testCRIEngineNetwork(t *testing.T, e *engine) {
	var ln *fixture.Counter
	if err := setns.Do(fmt.Sprintf("/proc/%d/ns/net", e.c.PID()), unix.CLONE_NEWNET, func() (err error) {
		ln, err = fixture.Listen("tcp", "0.0.0.0:0")
		return err
	}); err != nil {
		t.Fatalf("listen in containerd's network namespace: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	hostLn := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	gw, host := "tcp:"+ptpGateway+":"+ln.Port(), "tcp:"+hostLn.Addr()
	for _, c := range []struct {
		handler string
		accept  bool
	}{{enetHandler, true}, {"cordon", false}} {
		t.Run(c.handler, func(t *testing.T) {
			p := e.runPod(t, c.handler)
			argv := []string{"sleep", "86402." + strconv.Itoa(os.Getpid())}
			id := e.runContainer(t, p, argv, probeMount())
			prog := findProgram(t, e.taskPID(t, id), argv)
			podNet := inode(t, e.podNetPath(t, p.id))
			if got := inode(t, fmt.Sprintf("/proc/%d/ns/net", prog)); (got == podNet) != c.accept {
				t.Errorf("the program's network namespace is inode %d, the pod's %d; want them equal = %v", got, podNet, c.accept)
			}
			dev, _, code, err := e.cri.ExecSync(e.ctx, id, time.Minute, "cat", "/proc/net/dev")
			if err != nil || code != 0 || strings.Contains(dev, "eth0:") != c.accept || !strings.Contains(dev, "lo:") {
				t.Errorf("/proc/net/dev inside (exit %d, %v):\n%s\nwant eth0 listed = %v, and lo", code, err, dev, c.accept)
			}
			before := ln.Accepted()
			got := attemptsOf(t, e.probeIn(t, id, "connects", gw, host))
			want := before
			if c.accept {
				want++
			}
			if n := ln.Settle(want); n != want || (got[gw] == "ok") != c.accept {
				t.Errorf("the gateway's listener accepted %d (was %d; probe said %v); want %d", n, before, got, want)
			}
			if n := hostLn.Settle(0); n != 0 || got[host] == "ok" {
				t.Errorf("the host's loopback listener accepted %d (probe said %v); want 0", n, got)
			}
			checkEngineNetState(t, e.stateUnder(t, c.handler, id), c.accept)
		})
	}
}

// checkEngineNetState reads the container's state annotations and its
// evidence record.
func checkEngineNetState(t *testing.T, s keeperState, accept bool) {
	t.Helper()
	a := s.Annotations
	wantLevel, wantNet := "DEDICATED_CONTAINER", "cordon's own network namespace"
	if accept {
		wantLevel, wantNet = "DEDICATED_RUNTIME", "joined (accepted by the host operator: --engine-network=accept; network boundary not verified)"
	}
	if a["dev.cordon.level-admitted"] != wantLevel || a["dev.cordon.level-requested"] != wantLevel || !strings.Contains(a["dev.cordon.network"], wantNet) {
		t.Errorf("state: admitted %q requested %q network %q; want %s and %q", a["dev.cordon.level-admitted"], a["dev.cordon.level-requested"], a["dev.cordon.network"], wantLevel, wantNet)
	}
	b, err := os.ReadFile(a["dev.cordon.evidence"])
	if err != nil {
		t.Fatal(err)
	}
	var rec evidence.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if v := rec.Boundaries[evidence.Network].Verified; v == accept {
		t.Errorf("evidence: network boundary verified = %v with accept = %v", v, accept)
	}
	if nc := strings.Join(rec.NonClaims, "\n"); strings.Contains(nc, "network boundary not claimed") != accept {
		t.Errorf("evidence non-claims (accept = %v):\n%s", accept, nc)
	}
}
