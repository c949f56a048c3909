package probes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:          "exhaust.memory",
		Class:       record.Exhaustion,
		Clause:      "§2.5 exhaustion, §2.3 resource limits are kernel-enforced: memory past the sandbox's limit is contained, reported, and has no host effect",
		Title:       "an allocation past --memory 32M is OOM-killed inside the sandbox; cordon reports it, the cgroup is gone, a host process lives on",
		Destructive: true,
		Timeout:     90 * time.Second,
		Run:         exhaustMemory,
	})
	conformance.Register(conformance.Probe{
		ID:          "exhaust.pids",
		Class:       record.Exhaustion,
		Clause:      "§2.5 exhaustion, §2.3 resource limits are kernel-enforced: processes past the sandbox's limit are contained and none outlives the sandbox",
		Title:       "a fork bomb under --pids 32 gets fewer than 32 processes; none of them runs on the host after the sandbox ends",
		Destructive: true,
		Timeout:     90 * time.Second,
		Run:         exhaustPids,
	})
	conformance.Register(conformance.Probe{
		ID:          "exhaust.disk",
		Class:       record.Exhaustion,
		Clause:      "§2.5 exhaustion, §2.3 resource limits are kernel-enforced: scratch disk past the sandbox's limit is contained and has no host effect",
		Title:       "filling /tmp under --tmp-size 8M stops at 8 MiB on the sandbox's own tmpfs; the host filesystem's free space is unchanged",
		Destructive: true,
		Timeout:     90 * time.Second,
		Run:         exhaustDisk,
	})
}

// exhaustMemory: the program touches 128 MiB under --memory 32M. From
// outside: cordon's exit status is 137 with oom in its outcome (cordon
// itself survived to say so), the sandbox's cgroups are gone, and a
// process the probe started on the host is still alive. Control: the same
// allocation under --memory 512M completes (exit 0, no OOM), so the limit
// is what killed it.
func exhaustMemory(ctx context.Context, e *conformance.Env) conformance.Outcome {
	witness := exec.Command("/bin/sleep", "300")
	if err := witness.Start(); err != nil {
		return conformance.Outcome{Err: fmt.Errorf("the host witness process: %w", err)}
	}
	e.Cleanup(func() { _ = witness.Process.Kill(); _ = witness.Wait() })
	w, _, ok := readProcStamp(witness.Process.Pid)
	if !ok {
		return conformance.Outcome{Err: fmt.Errorf("cannot read the witness process %d", witness.Process.Pid)}
	}
	const alloc = "128"
	over, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--memory", "32M"}, Op: []string{"alloc", alloc}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	o, err := parseExitOutcome(over)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	left := sandboxCgroups(o.SandboxID)
	ctl, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--memory", "512M"}, Op: []string{"alloc", alloc}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	co, err := parseExitOutcome(ctl)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: over.Hint(), Facts: []record.Fact{
		{Name: "cordon's exit status for a " + alloc + " MiB allocation under --memory 32M", Want: "137, oom", Got: fmt.Sprintf("%d, oom=%v, signal %d", over.Code, o.OOM, o.Signal),
			OK: over.Code == 137 && o.OOM && o.Signal == 9, Source: "cordon run --json outcome (the trusted side's wait status and the cgroup's OOM counter)"},
		{Name: "the sandbox's cgroup directories after the run", Want: "none", Got: fmt.Sprint(left), OK: len(left) == 0, Source: "the host's /sys/fs/cgroup"},
		{Name: "a process the probe started on the host", Want: "still running", Got: fmt.Sprintf("running=%v", w.running()), OK: w.running(), Source: "the host's /proc/PID/stat (pid and start time)"},
		{Name: "the same allocation under --memory 512M", Want: "exit 0, no oom", Got: fmt.Sprintf("exit %d, oom=%v%s", ctl.Code, co.OOM, stderrNote(ctl)), OK: ctl.Code == 0 && !co.OOM,
			Source: "cordon run --json outcome", Control: true},
	}}
}

// exhaustPids: the program forks up to 100 children under --pids 32 and
// holds. From outside: the host counts the fork bomb's processes below
// cordon (fewer than 32), and after the sandbox ends none of them runs and
// its cgroups are gone. Control: the same fork bomb of 40 under --pids
// 256 gets all 40, counted the same way.
func exhaustPids(ctx context.Context, e *conformance.Env) conformance.Outcome {
	limited, procs, hint, err := forkCount(ctx, e, "32", "100")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	left := stillRunning(procs.seen)
	control, _, _, err := forkCount(ctx, e, "256", "40")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: hint, Facts: []record.Fact{
		{Name: "the fork bomb's processes (comm sleep) below cordon, of 100 asked under --pids 32", Want: "1 to 31", Got: strconv.Itoa(limited), OK: limited > 0 && limited < 32,
			Source: "the host's /proc (process tree below cordon, comm)"},
		{Name: "those processes after the sandbox ended", Want: "none running", Got: fmt.Sprint(left), OK: len(left) == 0, Source: "the host's /proc/PID/stat (pid and start time)"},
		{Name: "the sandbox's cgroup directories after the run", Want: "none", Got: fmt.Sprint(procs.cgroups), OK: len(procs.cgroups) == 0, Source: "the host's /sys/fs/cgroup"},
		{Name: "a fork bomb of 40 under --pids 256", Want: "40 processes", Got: strconv.Itoa(control), OK: control == 40,
			Source: "the host's /proc (process tree below cordon, comm)", Control: true},
	}}
}

type forkRun struct {
	seen    []procStamp // the fork bomb's processes, as the host saw them
	cgroups []string    // the sandbox's cgroup dirs left after the run
}

// forkCount runs `hold forkbomb n` under --pids limit and counts, on the
// host, the fork bomb's processes below cordon.
func forkCount(ctx context.Context, e *conformance.Env, limit, n string) (int, forkRun, string, error) {
	h, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--pids", limit}, Op: []string{"hold", "forkbomb", n}})
	if err != nil {
		return 0, forkRun{}, "", err
	}
	// Everything below cordon that runs /bin/sleep is the fork bomb's: by
	// name, not by parent, so that a program the Go runtime could not give
	// another thread (the limit counts threads) and that died leaves its
	// children counted all the same.
	var fr forkRun
	for _, p := range descendants(h.Pid()) {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Pid)); err == nil && strings.TrimSpace(string(comm)) == "sleep" {
			fr.seen = append(fr.seen, p)
		}
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return 0, fr, "", err
	}
	o, err := parseExitOutcome(r)
	if err != nil {
		return 0, fr, "", err
	}
	fr.cgroups = sandboxCgroups(o.SandboxID)
	return len(fr.seen), fr, r.Hint(), nil
}

// exhaustDisk: the program writes up to 512 MiB to /tmp under --tmp-size
// 8M and holds. From outside: the file, read through /proc/PID/root on
// the host, holds at most 8 MiB; the filesystem under /tmp is a tmpfs of
// at most 8 MiB; and the free space of the host filesystem holding the
// state directory dropped by less than half of what was attempted.
// Control: a 4 MiB write under the same limit is there in full.
func exhaustDisk(ctx context.Context, e *conformance.Env) conformance.Outcome {
	const limit = 8 << 20
	freeBefore, err := freeBytes(e.Dir)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	full, fsType, fsSize, hint, err := fillTmp(ctx, e, "512")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	freeAfter, err := freeBytes(e.Dir)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	drop := freeBefore - freeAfter
	ctl, _, _, _, err := fillTmp(ctx, e, "4")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: hint, Facts: []record.Fact{
		{Name: "bytes of /tmp/fill after writing 512 MiB under --tmp-size 8M", Want: "at most 8 MiB", Got: strconv.FormatInt(full, 10), OK: full >= 0 && full <= limit,
			Source: "stat of /proc/PID/root/tmp/fill on the host"},
		{Name: "the filesystem under the sandbox's /tmp", Want: "tmpfs of at most 8 MiB", Got: fmt.Sprintf("type %#x, %d bytes", fsType, fsSize), OK: fsType == unix.TMPFS_MAGIC && fsSize <= limit,
			Source: "statfs of /proc/PID/root/tmp on the host"},
		{Name: "drop of the host filesystem's free space (the state directory's)", Want: "under 256 MiB", Got: strconv.FormatInt(drop, 10), OK: drop < 256<<20,
			Source: "statfs of the probe's directory on the host, before and after"},
		{Name: "bytes of /tmp/fill after writing 4 MiB under --tmp-size 8M", Want: strconv.Itoa(4 << 20), Got: strconv.FormatInt(ctl, 10), OK: ctl == 4<<20,
			Source: "stat of /proc/PID/root/tmp/fill on the host", Control: true},
	}}
}

// fillTmp runs `hold fill /tmp MB` under --tmp-size 8M and reads, through
// the program's root on the host, the file's size and /tmp's filesystem.
func fillTmp(ctx context.Context, e *conformance.Env, mb string) (size int64, fsType int64, fsSize int64, hint string, err error) {
	h, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--tmp-size", "8M"}, Op: []string{"hold", "fill", "/tmp", mb}})
	if err != nil {
		return 0, 0, 0, "", err
	}
	_, progPid, err := h.Pids()
	if err != nil {
		return 0, 0, 0, "", err
	}
	tmp := filepath.Join("/proc", strconv.Itoa(progPid), "root", "tmp")
	size = -1
	if fi, serr := os.Stat(filepath.Join(tmp, "fill")); serr == nil {
		size = fi.Size()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(tmp, &st); err != nil {
		return 0, 0, 0, "", fmt.Errorf("statfs %s: %w", tmp, err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return 0, 0, 0, "", err
	}
	if r.Code != 0 {
		return 0, 0, 0, "", fmt.Errorf("the fill run exited %d: %s", r.Code, strings.TrimSpace(r.Stderr))
	}
	return size, int64(st.Type), int64(st.Blocks) * st.Bsize, r.Hint(), nil
}

func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// stderrNote is cordon's stderr, for a fact's Got when a run did not end
// as expected ("" when it printed nothing).
func stderrNote(r conformance.RunResult) string {
	if t := strings.TrimSpace(r.Stderr); t != "" {
		if len(t) > 300 {
			t = t[:300] + "..."
		}
		return "; cordon said: " + t
	}
	return ""
}
