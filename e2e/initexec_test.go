package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// This file drives the provider's daemon mode next to the cordon binary.
// The test binary imports the provider, so it is a sandbox init too
// (package sbinit's init dispatches on argv[0], as in cordon); as the
// child "daemon-spawner" (see children in harness_test.go) it is a daemon
// stand-in instead, before TestMain builds anything: it spawns a
// daemon-mode sandbox in the state dir spawnerEnv names, prints it and
// waits to be killed.

const spawnerEnv = "CORDON_E2E_DAEMON_SPAWNER"

func spawnDaemonSandbox() int {
	dir := os.Getenv(spawnerEnv)
	ctx := context.Background()
	st, err := store.Open(dir, store.DefaultPool)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	p, err := linux.New(linux.Options{StateDir: dir, Store: st, Daemon: true})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	sb, err := p.Provision(ctx, sandbox.Spec{Level: sandbox.DedicatedContainer, Stdout: null, Stderr: null})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	adm, err := sb.Start(ctx)
	if err == nil && adm.Level < sandbox.DedicatedContainer {
		err = fmt.Errorf("admitted %v", adm.Level)
	}
	if err == nil {
		err = sb.Exec(ctx)
	}
	if err != nil {
		sb.Deprovision(ctx)
		fmt.Println("ERROR", err)
		return 1
	}
	ds := sb
	fmt.Printf("SPAWNED %s %d %d\n", ds.ID(), ds.InitPid(), ds.InitStartTime())
	time.Sleep(time.Hour)
	return 0
}

// A daemon-owned sandbox outlives the SIGKILL of the process that spawned
// it; standalone `cordon gc` and `cordon run` (which reclaims at start)
// never reclaim it, although its owner is gone; a later process attaches
// to it and execs under the same boundary, then removes it without residue.
func TestInitExecDaemonSandboxOutlivesSpawner(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireStaticBuild(t)
	state := newStateDir(t)
	helper := testkit.Child(t, "daemon-spawner", spawnerEnv+"="+state)
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %q, %v", line, err)
	}
	var id string
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(line, "SPAWNED %s %d %d", &id, &pid, &start); err != nil {
		t.Fatalf("helper said %q", line)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	st, err := store.Open(state, store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := linux.New(linux.Options{StateDir: state, Store: st, Daemon: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, nothing stays behind.
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		_ = linux.ReleaseRecord(context.Background(), st, p, id)
	})

	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	io.Copy(io.Discard, out)
	alive := func(when string) {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("%s: the sandbox init is gone: %v", when, err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if f[0] == "Z" || f[19] != strconv.FormatUint(start, 10) {
			t.Fatalf("%s: the sandbox init: state %s start %s, want running since %d", when, f[0], f[19], start)
		}
	}
	time.Sleep(200 * time.Millisecond)
	alive("after its spawner's SIGKILL")
	ctx := context.Background()
	rec, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	// With no daemon running, the range is still claimed host-wide (the
	// init holds the lease lock): a cordon run from another state dir,
	// alive at the same time, gets another range.
	other := newStateDir(t)
	ev := filepath.Join(t.TempDir(), "ev.json")
	if r := cordon(t, cordonBin, other, "run", "--evidence", ev, "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("cordon run in another state dir = %d\n%s", r.Code, r.Stderr)
	}
	var evRec struct {
		Lease struct{ UID uint32 } `json:"lease"`
	}
	if b, err := os.ReadFile(ev); err != nil || json.Unmarshal(b, &evRec) != nil {
		t.Fatalf("evidence: %v", err)
	}
	if evRec.Lease.UID == rec.Lease.UID {
		t.Errorf("a cordon run from another state dir leased %d, the range of the live daemon sandbox", evRec.Lease.UID)
	}

	// Standalone cordon leaves it alone.
	r := cordon(t, cordonBin, state, "gc", "--json")
	var rep linux.Report
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rep) != nil {
		t.Fatalf("cordon gc = %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if len(rep.Reclaimed) != 0 || !containsStr(rep.Live, id) || containsStr(rep.Unattributable, id) {
		t.Errorf("cordon gc report %+v; want %s live and nothing reclaimed", rep, id)
	}
	if r := cordon(t, cordonBin, state, "run", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("cordon run = %d\n%s", r.Code, r.Stderr)
	}
	alive("after cordon gc and cordon run")
	rec, err = st.Get(ctx, id)
	if err != nil || rec.Kind != store.KindDaemon {
		t.Fatalf("record after cordon gc/run: %+v, %v", rec, err)
	}
	for _, d := range cgroup.PlannedDirs(p.Layout(), id) {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("cgroup %s after cordon gc/run: %v", d, err)
		}
	}

	// A restarted daemon attaches and execs under the boundary.
	h, err := p.Attach(ctx, rec, pid, start)
	if err != nil {
		t.Fatal(err)
	}
	ds := h
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := ds.ExecProcess(ctx, []string{"/bin/sh", "-c", "id -u; grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status; echo x > /etc/x 2>/dev/null || echo denied"}, nil, "", [3]*os.File{nil, wr, wr})
	wr.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rd)
	rd.Close()
	if ex, err := proc.Wait(ctx); err != nil || ex != (sandbox.Exit{}) {
		t.Errorf("exec'd process ended %+v, %v", ex, err)
	}
	got := strings.Join(strings.Fields(string(b)), " ")
	if want := "1000 NoNewPrivs: 1 Seccomp: 2 CapEff: 0000000000000000 CapBnd: 0000000000000000 denied"; !strings.Contains(got, "1000") || !strings.Contains(got, "NoNewPrivs: 1") || !strings.Contains(got, "Seccomp: 2") ||
		!strings.Contains(got, "CapEff: 0000000000000000") || !strings.Contains(got, "CapBnd: 0000000000000000") || !strings.HasSuffix(got, "denied") {
		t.Errorf("exec'd process said %q, want the facts of %q", got, want)
	}
	if _, err := ds.ExecProcess(ctx, []string{"/no/such/program"}, nil, "", [3]*os.File{}); !isNotFound(err) {
		t.Errorf("exec of a missing program = %v, want an ExecError NotFound", err)
	}

	if err := h.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 5000); err != nil || n != 1 {
		t.Errorf("the init did not exit after Deprovision (%d, %v)", n, err)
	}
	if _, err := st.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("record after Deprovision: %v", err)
	}
	if _, err := os.Lstat(p.RunSocket(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exec socket after Deprovision: %v", err)
	}
	if res, err := cgroup.Residue(p.Layout()); err != nil || containsStr(res, id) {
		t.Errorf("cgroups after Deprovision: %v, %v", res, err)
	}
}

func isNotFound(err error) bool {
	var xe *linux.ExecError
	return errors.As(err, &xe) && xe.NotFound()
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
