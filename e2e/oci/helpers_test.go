package oci

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/conformance/probeops"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// image is the Debian root (engines.Image) as the tests' dockerd knows it.
const image = "cordon-test/debian:bookworm"

// runtimes: every harness check runs with runc (the control that the
// harness works) and with cordon; only the cordon runs assert cordon's
// properties.
var runtimes = []string{"runc", "cordon"}

// base is the start of a `docker run` with runtime rt: never a network
// that routes anywhere (the tests' dockerd has no bridge at all).
func base(rt string, more ...string) []string {
	return append([]string{"run", "--runtime", rt, "--network", "none"}, more...)
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// ociState is what `cordon oci state` prints (the OCI state and cordon's
// own fields).
type ociState struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Pid         int               `json:"pid"`
	Annotations map[string]string `json:"annotations"`
	SandboxID   string            `json:"sandbox_id"`
	StateDir    string            `json:"state_dir"`
	Root        string            `json:"-"` // the runtime root it was read from
}

// cordonState asks cordon (as the engine would) for the state of a
// container dockerd started through runtime `cordon`.
func cordonState(t *testing.T, d *engines.Docker, id string) ociState {
	t.Helper()
	root := d.RuntimeRootOf(id)
	if root == "" {
		t.Fatalf("no runtime state directory of container %s under %s", id, d.ExecRoot)
	}
	out, err := exec.Command(cordonBin, "oci", "--root", root, "state", id).Output()
	if err != nil {
		t.Fatalf("cordon oci state %s: %v %s", id, err, stderrOf(err))
	}
	var s ociState
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("cordon oci state %s: %v\n%s", id, err, out)
	}
	s.Root = root
	// The state printed is the OCI state: cordon's own ids are its
	// annotations.
	if s.SandboxID == "" {
		s.SandboxID = s.Annotations["dev.cordon.sandbox-id"]
	}
	return s
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// inspect reads one field of `docker inspect` with a Go template.
func inspect(t *testing.T, d *engines.Docker, id, tmpl string) string {
	t.Helper()
	return d.Must(t, "inspect", "-f", tmpl, id)
}

// children maps each pid to its children, from /proc/*/stat.
func children() map[int][]int {
	m := map[int][]int{}
	for _, p := range engines.Processes() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				m[pp] = append(m[pp], p)
			}
		}
	}
	return m
}

// descendants lists every live descendant of pid.
func descendants(pid int) []int {
	m := children()
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range m[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// hostPid finds the host pid of the container's process whose command
// line contains marker: the container's pid (what the engine was told)
// itself or one of its descendants. For runc the container's pid is the
// program; for cordon it is the keeper, and the program runs below the
// sandbox's init. It waits up to 10 s for the process to appear.
func hostPid(t *testing.T, d *engines.Docker, id, marker string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid, err := strconv.Atoi(inspect(t, d, id, "{{.State.Pid}}")); err == nil && pid > 0 {
			for _, p := range append([]int{pid}, descendants(pid)...) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				if bytes.Contains(b, []byte(marker)) {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process of container %s has %q in its command line", id, marker)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// status reads /proc/PID/status into a map of its fields.
func status(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// probeResult parses the probe's one-line JSON report from output.
func probeResult(t *testing.T, out string) probeops.Result {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		var r probeops.Result
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil && r.Op != "" {
			return r
		}
	}
	t.Fatalf("no probe report in %q", out)
	return probeops.Result{}
}

// attempts is the per-attempt map of an op that tries several targets.
func attempts(t *testing.T, r probeops.Result) map[string]string {
	t.Helper()
	m := map[string]string{}
	if err := json.Unmarshal([]byte(r.Data), &m); err != nil {
		t.Fatalf("probe %s data %q: %v (err %s)", r.Op, r.Data, err, r.Err)
	}
	return m
}

// cgroupDirsOf lists the cordon cgroup directories of a sandbox, on
// every hierarchy.
func cgroupDirsOf(id string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/cordon/" + id, "/sys/fs/cgroup/*/cordon/" + id} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// gcReport is `cordon gc --json` (registry.ReclaimReport).
type gcReport struct {
	Reclaimed      []string `json:"reclaimed"`
	Live           []string `json:"live"`
	Unattributable []string `json:"unattributable"`
}

// gc runs `cordon gc --json` on a state directory.
func gc(t *testing.T, stateDir string) gcReport {
	t.Helper()
	args := []string{"gc", "--json"}
	if stateDir != "" {
		args = append([]string{"--state-dir", stateDir}, args...)
	}
	out, err := exec.Command(cordonBin, args...).Output()
	var r gcReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("cordon %v: %v %s\n%s", args, err, stderrOf(err), out)
	}
	if err != nil {
		t.Logf("cordon %v: %v %s", args, err, stderrOf(err))
	}
	return r
}

// mentions reports whether any entry of list names the sandbox id.
func mentions(list []string, id string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, id) })
}
