package oci

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The lease pool cordon's sandboxes get their uid ranges from (the same
// constants as e2e's).
const (
	poolBase = 0x40000000
	poolEnd  = poolBase + 4096*65536
)

// posture is what the host's /proc says about a container's program.
type posture struct {
	CapEff, NoNewPrivs, Seccomp string
	UIDMap                      string   // /proc/PID/uid_map, one line
	UIDs                        []uint64 // the four Uid: values
}

func readPosture(t *testing.T, pid int) posture {
	t.Helper()
	st, err := procStatus(pid)
	if err != nil {
		t.Fatalf("read the status of the container's program (pid %d): %v", pid, err)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	p := posture{CapEff: st["CapEff"], NoNewPrivs: st["NoNewPrivs"], Seccomp: st["Seccomp"], UIDMap: strings.TrimSpace(string(m))}
	for _, f := range strings.Fields(st["Uid"]) {
		u, _ := strconv.ParseUint(f, 10, 64)
		p.UIDs = append(p.UIDs, u)
	}
	return p
}

// problems lists how p falls short of a cordon sandbox's posture: no
// effective capability, no_new_privs, a seccomp filter, and a user
// namespace mapped onto one range of cordon's lease pool, with the
// program's host uids inside it.
func (p posture) problems() []string {
	var out []string
	if p.CapEff != "0000000000000000" {
		out = append(out, "CapEff "+p.CapEff)
	}
	if p.NoNewPrivs != "1" {
		out = append(out, "NoNewPrivs "+p.NoNewPrivs)
	}
	if p.Seccomp != "2" {
		out = append(out, "Seccomp "+p.Seccomp)
	}
	f := strings.Fields(p.UIDMap)
	if len(f) != 3 {
		return append(out, fmt.Sprintf("uid_map %q is not one range", p.UIDMap))
	}
	lo, _ := strconv.ParseUint(f[1], 10, 64)
	n, _ := strconv.ParseUint(f[2], 10, 64)
	if lo < poolBase || lo+n > poolEnd || n == 0 {
		out = append(out, fmt.Sprintf("uid_map %q is not a range of the lease pool", p.UIDMap))
	}
	for _, u := range p.UIDs {
		if u < lo || u >= lo+n {
			out = append(out, fmt.Sprintf("host uid %d outside the mapped range", u))
		}
	}
	return out
}

// testCRIPosture: a CRI-started container under the cordon handler runs
// its program (and the pod's own container) in a cordon sandbox, seen
// from the host's /proc: CapEff 0, NoNewPrivs 1, Seccomp 2, a uid_map onto
// a leased range; and cordon's state for both, read through the runtime
// root of this containerd's config, says DEDICATED_CONTAINER was
// admitted. The same check on the runc handler's container fails: it is
// a check that can tell the two apart.
func testCRIPosture(t *testing.T, e *engine) {
	for _, h := range handlers {
		t.Run(h, func(t *testing.T) {
			p := e.runPod(t, h)
			argv := []string{"sleep", "86400." + strconv.Itoa(os.Getpid())}
			id := e.runContainer(t, p, argv)
			prog := findProgram(t, e.taskPID(t, id), argv)
			got := readPosture(t, prog).problems()
			if h == "runc" {
				if len(got) == 0 {
					t.Fatalf("runc's container passes the cordon posture check: the check cannot tell a cordon sandbox from runc's")
				}
				t.Logf("runc's container, as expected, is not a cordon sandbox: %v", got)
				return
			}
			if len(got) != 0 {
				t.Errorf("the program of a cordon container (host pid %d): %v", prog, got)
			}
			for _, s := range []string{p.id, id} {
				st := e.cordonState(t, s)
				a := st.Annotations
				if a["dev.cordon.level-admitted"] != "DEDICATED_CONTAINER" || a["dev.cordon.sandbox-id"] == "" || st.Status != "running" {
					t.Errorf("cordon oci state %s: status %q, annotations %v; want running, DEDICATED_CONTAINER admitted, a sandbox id", s, st.Status, a)
				}
				if a["dev.cordon.evidence"] == "" {
					t.Errorf("cordon oci state %s names no evidence record", s)
				} else if ev, err := os.ReadFile(a["dev.cordon.evidence"]); err != nil {
					t.Errorf("evidence record of %s: %v", s, err)
				} else if !strings.Contains(string(ev), `"got": "overlay ro,`) && !strings.Contains(string(ev), `"got": "overlay rw,`) {
					// The overlayfs snapshotter's root, rebuilt by cordon
					// from idmapped layers (docs/oci.md "Overlay roots").
					t.Errorf("evidence record of %s: the root fact does not read cordon's overlay\n%.3000s", s, ev)
				}
			}
		})
	}
}
