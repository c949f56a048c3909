package oci

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// handlers are the CRI runtime handlers every CRI test runs under: runc
// is the harness's positive control (the same calls work with the
// engine's own runtime), cordon the runtime under test.
var handlers = []string{"runc", "cordon"}

// engine is a private containerd with its CRI plugin and a client of it.
type engine struct {
	c   *engines.ContainerdCRI
	cri *engines.CRI
	ctx context.Context
}

// startEngine starts a private containerd for t whose CRI runtime
// handlers are runc (Debian's), cordon (this build's cordon-oci) and
// cordon-enet (the same with --engine-network accept, enetRuntime), and a
// client of it; t's cleanup stops both.
func startEngine(t testing.TB) *engine {
	t.Helper()
	runc := testkit.RequireCommand(t, "runc is the CRI tests' positive control (package runc)", "runc")
	c := engines.StartContainerd(t,
		engines.Runtime{Name: "runc", Binary: runc},
		engines.Runtime{Name: engines.CordonHandler, Binary: cordonOCI},
		enetRuntime(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	client, err := engines.DialCRI(ctx, c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &engine{c: c, cri: client, ctx: ctx}
}

// pod is a running pod sandbox.
type pod struct {
	id      string
	handler string
	cfg     *cri.PodSandboxConfig
}

// runPod runs a pod sandbox under handler; the test's cleanup stops and
// removes it (a no-op if the test already did).
func (e *engine) runPod(t testing.TB, handler string) pod {
	t.Helper()
	name := "p-" + handler + "-" + hexID(4)
	cfg := engines.PodConfig(name, hexID(8), e.c.CgroupParent)
	id, err := e.cri.RunPod(e.ctx, cfg, handler)
	if err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, e.c.Log())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.cri.StopPod(ctx, id)
		_ = e.cri.RemovePod(ctx, id)
	})
	return pod{id: id, handler: handler, cfg: cfg}
}

// runContainer creates and starts a container of the test image running
// args in p.
func (e *engine) runContainer(t testing.TB, p pod, args []string, mounts ...*cri.Mount) string {
	t.Helper()
	id, err := e.cri.CreateContainer(e.ctx, p.id, engines.ContainerConfig("c-"+hexID(4), e.c.Image, args, mounts...), p.cfg)
	if err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, e.c.Log())
	}
	if err := e.cri.StartContainer(e.ctx, id); err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, e.c.Log())
	}
	return id
}

// taskPID is the pid containerd's task reports for a container: the
// runtime's pid-file (runc: the program; cordon: its keeper).
func (e *engine) taskPID(t testing.TB, id string) int {
	t.Helper()
	r, err := e.cri.ContainerInfo(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(r.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("container %s: no task pid in its verbose status (%v): %q", id, err, r.Info["info"])
	}
	return info.Pid
}

// podPID is the pid of the pod sandbox's own container (its task).
func (e *engine) podPID(t testing.TB, id string) int {
	t.Helper()
	r, err := e.cri.PodStatus(e.ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(r.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("pod %s: no task pid in its verbose status (%v): %q", id, err, r.Info["info"])
	}
	return info.Pid
}

// runtimeRoot is the --root the runc v2 shim gives the handler's runtime
// binary: the handler's Root joined with containerd's namespace.
func (e *engine) runtimeRoot(handler string) string {
	return filepath.Join(e.c.RuntimeRoots[handler], e.c.Namespace)
}

// keeperState is `cordon oci --root ROOT state ID` (the runc-compatible state
// with cordon's annotations).
type keeperState struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
}

func (e *engine) cordonState(t testing.TB, id string) keeperState {
	t.Helper()
	return e.stateUnder(t, "cordon", id)
}

// probeReport is the JSON line `cordon __probe OP` prints.
type probeReport struct {
	Op    string `json:"op"`
	OK    bool   `json:"ok"`
	Errno string `json:"errno"`
	Err   string `json:"err"`
	Data  string `json:"data"`
}

// probeMount binds the cordon binary read-only into a container at
// /cordon: its __probe ops are the escape attempts.
func probeMount() *cri.Mount {
	return &cri.Mount{ContainerPath: "/cordon", HostPath: cordonBin, Readonly: true}
}

// probeIn runs `/cordon __probe OP ARGS...` in container id (ExecSync)
// and returns its report.
func (e *engine) probeIn(t testing.TB, id string, op string, args ...string) probeReport {
	t.Helper()
	out, errb, code, err := e.cri.ExecSync(e.ctx, id, time.Minute, append([]string{"/cordon", "__probe", op}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parseProbe(t, fmt.Sprintf("in %s: exit %d, stderr %q", id, code, errb), out)
}

// probeHost runs the same op on the host (the positive control: the
// attempt works where nothing denies it).
func probeHost(t testing.TB, op string, args ...string) probeReport {
	t.Helper()
	out, err := exec.Command(cordonBin, append([]string{"__probe", op}, args...)...).Output()
	if err != nil {
		t.Fatalf("host probe %s: %v", op, err)
	}
	return parseProbe(t, "on the host", string(out))
}

func parseProbe(t testing.TB, where, out string) probeReport {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r probeReport
		if strings.HasPrefix(sc.Text(), `{"op"`) && json.Unmarshal(sc.Bytes(), &r) == nil {
			return r
		}
	}
	t.Fatalf("probe %s printed no result: %q", where, out)
	return probeReport{}
}

// attemptsOf decodes a probe's per-attempt outcomes (its Data).
func attemptsOf(t testing.TB, r probeReport) map[string]string {
	t.Helper()
	m := map[string]string{}
	if err := json.Unmarshal([]byte(r.Data), &m); err != nil {
		t.Fatalf("probe %s: data %q: %v (err %q)", r.Op, r.Data, err, r.Err)
	}
	return m
}

// procStatus is the host's /proc/PID/status as key → value.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// children maps each live pid to its children, from the host's /proc.
func childMap() map[int][]int {
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procStatus(pid)
		if err != nil {
			continue
		}
		if pp, err := strconv.Atoi(st["PPid"]); err == nil {
			kids[pp] = append(kids[pp], pid)
		}
	}
	return kids
}

// tree is pid and all its descendants.
func tree(pid int) []int {
	kids := childMap()
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, kids[out[i]]...)
	}
	return out
}

// findProgram is the pid in root's process tree whose command line is
// exactly argv (the container's program, seen from the host).
func findProgram(t testing.TB, root int, argv []string) int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, pid := range tree(root) {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(b) == want {
				return pid
			}
		}
	}
	t.Fatalf("no process %q under pid %d (tree %v)", argv, root, tree(root))
	return 0
}

// procIdentity is a pid with its start time: a process, not a number the
// kernel may hand out again.
type procIdentity struct {
	pid   int
	start string
}

func identify(pid int) procIdentity {
	return procIdentity{pid: pid, start: startTime(pid)}
}

func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// alive reports whether the same process still exists (a zombie counts
// as gone: it has ended).
func (p procIdentity) alive() bool {
	st, err := procStatus(p.pid)
	if err != nil || strings.HasPrefix(st["State"], "Z") {
		return false
	}
	return startTime(p.pid) == p.start
}

func hexID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
