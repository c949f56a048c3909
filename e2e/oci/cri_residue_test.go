package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCRIShimKilledResidue: SIGKILL of a pod's shim (by its pid: the shim
// whose -address is this test's containerd and whose -id is the pod)
// while the pod and a container run. After the CRI's next calls
// (StopPodSandbox, RemovePodSandbox) and `cordon gc`, nothing of either
// is left: no process of theirs (keepers, sandbox inits, programs), no
// runtime state under the handler's root, and for cordon no cgroup of the
// sandboxes and no live record. runc is the harness's control.
func testCRIShimKilledResidue(t *testing.T, e *engine) {
	for _, h := range handlers {
		t.Run(h, func(t *testing.T) {
			p := e.runPod(t, h)
			argv := []string{"sleep", "86402." + strconv.Itoa(os.Getpid())}
			id := e.runContainer(t, p, argv)
			findProgram(t, e.taskPID(t, id), argv)
			var procs []procIdentity
			for _, pid := range append(tree(e.podPID(t, p.id)), tree(e.taskPID(t, id))...) {
				procs = append(procs, identify(pid))
			}
			var sandboxes []string
			if h == "cordon" {
				for _, s := range []string{p.id, id} {
					sb := e.cordonState(t, s).Annotations["dev.cordon.sandbox-id"]
					if sb == "" || len(sandboxCgroupDirs(sb)) == 0 {
						t.Fatalf("container %s: sandbox %q, cgroups %v; want a sandbox with its cgroups before the kill", s, sb, sandboxCgroupDirs(sb))
					}
					sandboxes = append(sandboxes, sb)
				}
			}
			shim := e.c.ShimOf(p.id)
			if shim == 0 {
				t.Fatalf("no shim of pod %s found (shims of this containerd: %v)", p.id, e.c.ShimPIDs())
			}
			if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// kubelet's next calls for a pod whose shim died.
			if err := e.cri.StopPod(e.ctx, p.id); err != nil {
				t.Errorf("StopPodSandbox after the shim's SIGKILL: %v", err)
			}
			if err := e.cri.RemovePod(e.ctx, p.id); err != nil {
				t.Errorf("RemovePodSandbox after the shim's SIGKILL: %v", err)
			}
			left := residue(h, e, []string{p.id, id}, procs, sandboxes)
			if len(left) != 0 {
				t.Logf("after the CRI's calls, before cordon gc: %v", left)
			}
			if h == "cordon" {
				gc := cordonGC(t)
				for _, sb := range sandboxes {
					if slices.Contains(gc.Live, sb) {
						t.Errorf("cordon gc: sandbox %s is still live", sb)
					}
				}
			}
			waitNoResidue(t, h, e, []string{p.id, id}, procs, sandboxes)
		})
	}
}

// residue lists what is left of the containers ids (their processes,
// runtime state, and for cordon their sandboxes' cgroups).
func residue(h string, e *engine, ids []string, procs []procIdentity, sandboxes []string) []string {
	var left []string
	for _, p := range procs {
		if p.alive() {
			left = append(left, fmt.Sprintf("process %d", p.pid))
		}
	}
	for _, id := range ids {
		if _, err := os.Lstat(filepath.Join(e.runtimeRoot(h), id)); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, fmt.Sprintf("runtime state %s (%v)", id, err))
		}
	}
	for _, sb := range sandboxes {
		for _, d := range sandboxCgroupDirs(sb) {
			left = append(left, "cgroup "+d)
		}
	}
	return left
}

func waitNoResidue(t *testing.T, h string, e *engine, ids []string, procs []procIdentity, sandboxes []string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := residue(h, e, ids, procs, sandboxes)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the shim's SIGKILL, the CRI's stop and remove and cordon gc, still left:\n  %s", strings.Join(left, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sandboxCgroupDirs lists the cgroup directories of cordon sandbox id present
// on the host, in every hierarchy.
func sandboxCgroupDirs(id string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/cordon/" + id, "/sys/fs/cgroup/*/cordon/" + id} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// gcOutcome is `cordon gc --json`.
type gcOutcome struct {
	Reclaimed []string `json:"reclaimed"`
	Live      []string `json:"live"`
}

// cordonGC runs `cordon gc --json` on the host's cordon state (the one the
// runtime's keepers use).
func cordonGC(t *testing.T) gcOutcome {
	t.Helper()
	out, err := exec.Command(cordonBin, "gc", "--json").Output()
	var r gcOutcome
	if err != nil || json.Unmarshal(out, &r) != nil {
		t.Fatalf("cordon gc --json: %v\n%s", err, out)
	}
	return r
}
