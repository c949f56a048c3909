package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestHostPoolTCPForcedCharges: the v1 TCP limit (memory.kmem.tcp) is not
// a bound by itself. The kernel charges past it whenever it must let a
// socket make progress (a receive queue that is empty takes one skb, a
// sender under its send buffer is let through), so a program that opens
// many small loopback connections and writes once on each pins about
// 40 KiB per connection past the limit: 5000 connections in a sandbox
// limited to 64 MiB pinned over 200 MiB of host TCP memory, and with the
// default memory limit enough connections to pass the host's tcp_mem hard
// limit, after which every TCP allocation on the host fails. From outside
// the test follows the sandbox's memory.kmem.tcp.max_usage_in_bytes: the
// trusted side must end the sandbox soon after it passes its limit.
// Positive control (test build without the watch): the same program
// holds well over twice the limit.
func TestHostPoolTCPForcedCharges(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	const limit = 64 << 20
	const conns = "5000"
	// The watch allows a quarter of the limit past it, and polls: allow
	// another 32 MiB for what the program adds between two polls.
	const bound = limit + limit/4 + 32<<20
	st := newStateDir(t)
	peak, _, probe, r := watchTCPPeak(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M"}, "hold", "tcpmany", conns)...)
	// The group is gone once the sandbox is, so the last value read may
	// be a little behind; at least half the limit shows the program was
	// well on its way (the watch kills only past tcpBound).
	if peak < limit/2 {
		t.Errorf("kmem.tcp peak %d seen from outside: the program never neared its limit %d, the test proves nothing", peak, limit)
	}
	if peak > bound {
		t.Errorf("kmem.tcp peak %d: the sandbox pinned host TCP memory past its limit %d + margin (bound %d)", peak, limit, bound)
	}
	if probe != "" || r.Code == 0 || !r.Outcome.OOM {
		t.Errorf("sandbox past its TCP limit: probe %q, exit %d, outcome %+v; want it ended (no probe result) and reported as out of memory\nstderr: %s", probe, r.Code, r.Outcome, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "socket") {
		t.Errorf("stderr does not say the sandbox was ended for its socket memory:\n%s", r.Stderr)
	}
	t.Logf("peak %d (limit %d); exit %d; stderr %s", peak, limit, r.Code, r.Stderr)

	cpeak, _, cprobe, _ := watchTCPPeak(t, hooksBin, st, probeArgs(withoutLayer("tcp-watch", []string{"--json", "--memory", "64M"}), "hold", "tcpmany", conns)...)
	if cpeak < 2*limit || !strings.HasPrefix(cprobe, "conns="+conns) {
		t.Errorf("control without the watch: kmem.tcp peak %d, probe %q; want all %s connections and a peak above %d (the kernel's forced charges)", cpeak, cprobe, conns, 2*limit)
	}
	t.Logf("control: peak %d, probe %s", cpeak, cprobe)
	requireNoResidue(t, st)
}

// TestHostPoolTCPUnaccepted: a connection the program has not accepted
// yet is charged to no memory cgroup (the kernel charges it at accept),
// and inherits its listener's raised receive buffer: 200 such connections
// with 1 MiB written on each held 200 MiB of host TCP memory for a sandbox
// limited to 64 MiB, none of it in its memory.kmem.tcp. From outside the
// test follows the bytes queued in the sandbox's network namespace
// (/proc/INIT/net/tcp): the trusted side must end the sandbox near its
// bound. Positive control (test build without the watch): the same
// program holds them all.
func TestHostPoolTCPUnaccepted(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	const limit = 64 << 20
	const conns = "200"
	// tcpBound (a quarter past the limit), plus what the program queues
	// between two reads of its socket table (100 ms).
	const bound = limit + limit/4 + 64<<20
	st := newStateDir(t)
	kmem, queued, probe, r := watchTCPPeak(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M"}, "hold", "tcpunaccepted", conns)...)
	if queued < limit/2 {
		t.Errorf("bytes queued in the sandbox's network namespace peaked at %d: the program never neared its limit %d, the test proves nothing", queued, limit)
	}
	if queued > bound {
		t.Errorf("bytes queued in the sandbox's network namespace peaked at %d, want at most %d", queued, bound)
	}
	if probe != "" || r.Code == 0 || !r.Outcome.OOM || !strings.Contains(r.Stderr, "socket") {
		t.Errorf("sandbox past its bound with unaccepted connections: probe %q, exit %d, outcome %+v; want it ended and reported\nstderr: %s", probe, r.Code, r.Outcome, r.Stderr)
	}
	t.Logf("queued peak %d, kmem.tcp peak %d (limit %d); exit %d", queued, kmem, limit, r.Code)

	ckmem, cqueued, cprobe, _ := watchTCPPeak(t, hooksBin, st, probeArgs(withoutLayer("tcp-watch", []string{"--json", "--memory", "64M"}), "hold", "tcpunaccepted", conns)...)
	if cqueued < 2*limit || ckmem > limit || !strings.HasPrefix(cprobe, "conns="+conns) {
		t.Errorf("control without the watch: %d bytes queued, kmem.tcp peak %d, probe %q; want all %s connections, over %d queued, none of it charged past the limit", cqueued, ckmem, cprobe, conns, 2*limit)
	}
	t.Logf("control: queued %d, kmem.tcp peak %d, probe %s", cqueued, ckmem, cprobe)
	requireNoResidue(t, st)
}

// TestHostPoolTCPResetUnaccepted: a connection reset by its peer while it
// waits to be accepted is unhashed — the namespace's sockstat count and
// its /proc/net/tcp no longer show it — but stays in the listener's accept
// queue with everything it received, charged to no memory cgroup. 80 such
// connections of a few MiB each, behind one listener, held ~230 MiB of
// host TCP memory for a sandbox limited to 64 MiB while the watch, which
// counted accept queues only when sockstat showed more than bound/perSocket
// sockets, saw one socket. The trusted side must end the sandbox. Positive
// control (test build without the watch): the same program holds all 80,
// and from outside the listener's accept queue (ss in the sandbox's
// network namespace) shows 80 while sockstat shows at most 2 sockets and
// /proc/INIT/net/tcp almost no bytes: the counts the watch used to gate on.
func TestHostPoolTCPResetUnaccepted(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Fatalf("ss (iproute2) reads the accept queues from outside: %v", err)
	}
	const limit = 64 << 20
	const conns = 80
	st := newStateDir(t)
	_, _, probe, r := watchTCPPeak(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M"}, "hold", "tcpreset", strconv.Itoa(conns))...)
	if probe != "" || r.Code == 0 || !r.Outcome.OOM || !strings.Contains(r.Stderr, "socket") {
		t.Errorf("sandbox holding reset connections in an accept queue: probe %q, exit %d, outcome %+v; want it ended and reported\nstderr: %s", probe, r.Code, r.Outcome, r.Stderr)
	}

	h := startHeld(t, hooksBin, st, probeArgs(withoutLayer("tcp-watch", []string{"--json", "--memory", "64M"}), "hold", "tcpreset", strconv.Itoa(conns))...)
	if !strings.HasPrefix(h.Probe.Data, fmt.Sprintf("conns=%d ", conns)) {
		t.Fatalf("control without the watch: probe %+v, want all %d connections", h.Probe, conns)
	}
	initPid, _ := h.pids()
	waiting := acceptQueued(t, initPid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/sockstat", initPid))
	if err != nil {
		t.Fatal(err)
	}
	var inuse int
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "TCP:" {
			inuse, _ = strconv.Atoi(f[2])
		}
	}
	queued, _ := queuedIn(initPid)
	if waiting != conns || inuse > 2 || queued > limit/8 {
		t.Errorf("control: %d connections waiting (want %d), sockstat inuse %d (want at most 2), %d bytes in /proc/net/tcp (want under %d)", waiting, conns, inuse, queued, limit/8)
	}
	t.Logf("control: probe %s; waiting %d, sockstat inuse %d, table bytes %d", h.Probe.Data, waiting, inuse, queued)
	h.finish()
	requireNoResidue(t, st)
}

// TestHostPoolTCPMultipath: a Multipath TCP connection keeps what it
// received in its own socket, which no TCP table shows (its subflow in
// /proc/net/tcp queues nothing), and one not yet accepted is charged to no
// memory cgroup: 20 of them held 77 MiB of host TCP memory with 0 bytes in
// the table, where the watch looks. The filter refuses IPPROTO_MPTCP
// sockets (programs fall back to TCP). From outside the test reads the
// sandbox's accept queues (ss in its network namespace): none. Positive
// control (test build without the filter, the watch still on): the same
// program holds all its connections waiting, the sandbox alive, and the
// socket table shows almost nothing queued.
func TestHostPoolTCPMultipath(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Fatalf("ss (iproute2) reads the accept queues from outside: %v", err)
	}
	testkit.RequireFile(t, "/proc/sys/net/mptcp/enabled", "no Multipath TCP in this kernel (this machine kind has it)")
	const limit = 64 << 20
	const conns = 40
	st := newStateDir(t)
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M"}, "hold", "tcpmptcp", strconv.Itoa(conns))...)
	initPid, _ := h.pids()
	if waiting := acceptQueued(t, initPid); h.Probe.OK || h.Probe.Errno != "EPERM" || waiting != 0 {
		t.Errorf("MPTCP in the sandbox: probe %+v, %d connections waiting; want EPERM and none", h.Probe, waiting)
	}
	h.finish()

	c := startHeld(t, hooksBin, st, probeArgs(withoutLayer("seccomp", append([]string{"--json", "--memory", "64M"}, lowerLevel...)), "hold", "tcpmptcp", strconv.Itoa(conns))...)
	cinit, _ := c.pids()
	waiting := acceptQueued(t, cinit)
	queued, _ := queuedIn(cinit)
	if !strings.HasPrefix(c.Probe.Data, fmt.Sprintf("conns=%d ", conns)) || waiting != conns || queued > limit/8 {
		t.Errorf("control without the filter: probe %+v, %d waiting (want %d), %d bytes in /proc/net/tcp (want under %d)", c.Probe, waiting, conns, queued, limit/8)
	}
	t.Logf("control: probe %s; waiting %d, table bytes %d", c.Probe.Data, waiting, queued)
	if r := c.finish(); r.Code != 0 {
		t.Errorf("control: exit %d (the watch saw nothing: the sandbox should live)\nstderr: %s", r.Code, r.Stderr)
	}
	requireNoResidue(t, st)
}

// acceptQueued is the number of connections waiting in the accept queues
// of the TCP listeners in the network namespace of pid, from the host
// (ss: the listener's Recv-Q).
func acceptQueued(t *testing.T, pid int) int {
	t.Helper()
	out, err := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ss", "-Hltn").CombinedOutput()
	if err != nil {
		t.Fatalf("ss in the sandbox's network namespace: %v: %s", err, out)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "LISTEN" {
			q, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("ss line %q", l)
			}
			n += q
		}
	}
	return n
}

// watchTCPPeak runs bin with args (the probe under hold), polling from the
// host the sandbox's memory.kmem.tcp.max_usage_in_bytes and the bytes
// queued on the TCP sockets of its network namespace until the probe
// reports (then it releases it) or cordon ends. It returns the highest
// values read, the probe's data ("" if it never reported) and cordon's
// result.
func watchTCPPeak(t *testing.T, bin, state string, args ...string) (int64, int64, string, result) {
	t.Helper()
	var peak, queued int64
	// The group's high-water mark, read from the group itself once found:
	// it is still readable after the init was killed, until cordon removes
	// the group, so the peak at the kill is seen even when a poll came late.
	var maxUsage string
	poll := func(cordon int) {
		if inits := childPids(cordon); len(inits) == 1 {
			if q, ok := queuedIn(inits[0]); ok && q > queued {
				queued = q
			}
			if maxUsage == "" {
				maxUsage = memoryGroupFile(inits[0], "memory.kmem.tcp.max_usage_in_bytes")
			}
		}
		if maxUsage == "" {
			return
		}
		if v, err := os.ReadFile(maxUsage); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil && n > peak {
				peak = n
			}
		}
	}
	data, r := runHeldProbe(t, bin, state, heldProbeTiming{limit: 90 * time.Second, every: 5 * time.Millisecond, settle: 200 * time.Millisecond}, poll, args...)
	return peak, queued, data, r
}

// memoryGroupFile is file in the sandbox memory group of pid ("" when pid
// is gone or not in a sandbox's group: an init that has exited shows the
// root group).
func memoryGroupFile(pid int, file string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" && strings.HasPrefix(f[2], "/cordon/") {
			return "/sys/fs/cgroup/memory" + f[2] + "/" + file
		}
	}
	return ""
}

// heldProbeTiming: how long runHeldProbe waits at most, how often it
// polls, and how long after the probe's report it polls once more.
type heldProbeTiming struct{ limit, every, settle time.Duration }

// runHeldProbe runs bin with args (a probe under hold, which reports and
// then waits for its stdin to close), calling poll with cordon's pid every
// tm.every until the probe reports (then once more after tm.settle, and
// it is released) or cordon ends. It returns the probe's data ("" if it
// never reported) and cordon's result.
func runHeldProbe(t *testing.T, bin, state string, tm heldProbeTiming, poll func(cordon int), args ...string) (string, result) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stdin, cmd.Stderr = inR, &errb
	outcome := outcomeFD(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	var out strings.Builder
	probe := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			l := sc.Text()
			out.WriteString(l + "\n")
			if strings.HasPrefix(l, `{"op"`) {
				var p ProbeResult
				_ = json.Unmarshal([]byte(l), &p)
				probe <- p.Data
			}
		}
	}()
	var data string
	deadline := time.After(tm.limit)
loop:
	for {
		select {
		case data = <-probe:
			poll(cmd.Process.Pid)
			time.Sleep(tm.settle)
			poll(cmd.Process.Pid)
			break loop
		case <-done:
			break loop
		case <-deadline:
			cmd.Process.Kill()
			t.Errorf("cordon %v: neither a probe result nor an end within %v", args, tm.limit)
			break loop
		case <-time.After(tm.every):
			poll(cmd.Process.Pid)
		}
	}
	inW.Close()
	<-done
	_ = cmd.Wait()
	return data, parseResult(cmd.ProcessState.ExitCode(), out.String(), errb.String(), outcome())
}

// queuedIn is netnsQueued without failing the test: the sandbox may end
// between two reads. Listeners' queues count connections, not bytes.
func queuedIn(pid int) (int64, bool) {
	var total int64
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			return 0, false
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) < 5 || f[3] == "0A" {
				continue
			}
			tx, rx, _ := strings.Cut(f[4], ":")
			a, _ := strconv.ParseInt(tx, 16, 64)
			c, _ := strconv.ParseInt(rx, 16, 64)
			if a >= 1<<31 {
				a = 0 // a racy read's wrapped write_seq - snd_una (see parseProcNetTCP)
			}
			total += a + c
		}
	}
	return total, true
}

// TestHostPoolTCPWatchAfterDaemonRestart: a daemon that restarts
// re-attaches its running sandboxes; the TCP watch must follow them. After
// the restart, a program exec'd in the sandbox leaves 200 connections of
// 1 MiB unaccepted (charged to no memory cgroup); from outside the test
// follows the bytes queued in the sandbox's network namespace and sees the
// sandbox ended near its bound. Positive control (daemon test build
// without the watch): the same program holds them all and the sandbox
// lives on.
func TestHostPoolTCPWatchAfterDaemonRestart(t *testing.T) {
	testkit.RequireRoot(t)
	const limit = 64 << 20
	const bound = limit + limit/4 + 64<<20
	run := func(skip bool) (queued int64, r result, initAlive bool) {
		st := newStateDir(t)
		var d *daemon
		if skip {
			d = startDaemon(t, st, "--test-skip-layer", "tcp-watch")
		} else {
			d = startDaemon(t, st)
		}
		ws := userWorkspace(t)
		b, err := os.ReadFile(filepath.Join(probeDir, "probe"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "probe"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		d.createStart("net", "--memory", "64M", "--workspace", ws, "--", "/bin/sleep", "1000")
		before := d.ls()["net"]
		d.kill()
		if !alive(before.InitPid) {
			t.Fatal("the sandbox died with the daemon")
		}
		if skip {
			d.start("--test-skip-layer", "tcp-watch")
		} else {
			d.start()
		}
		if i := d.ls()["net"]; i.State != "running" || i.InitPid != before.InitPid {
			t.Fatalf("after the restart: %+v, want the same sandbox running", i)
		}
		done := make(chan result, 1)
		go func() { done <- d.cli("sandbox", "exec", "net", "--", "/workspace/probe", "tcpunaccepted", "200") }()
		for {
			if q, ok := queuedIn(before.InitPid); ok && q > queued {
				queued = q
			}
			select {
			case r = <-done:
				time.Sleep(300 * time.Millisecond) // the kill, if any, has landed
				return queued, r, alive(before.InitPid)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	queued, r, live := run(false)
	if queued < limit/2 || queued > bound {
		t.Errorf("after a daemon restart: bytes queued in the sandbox's network namespace peaked at %d, want between %d and %d", queued, limit/2, bound)
	}
	if live || strings.Contains(r.Stdout, "conns=200") {
		t.Errorf("after a daemon restart: sandbox alive %v, exec %d %q; want the sandbox killed before the program finished", live, r.Code, r.Stdout)
	}
	t.Logf("queued peak %d; exec %d", queued, r.Code)
	cqueued, cr, clive := run(true)
	if !clive || !strings.Contains(cr.Stdout, "conns=200") || cqueued < 2*limit {
		t.Errorf("control without the watch: alive %v, exec %d %q, queued peak %d; want all 200 connections, over %d queued, the sandbox alive", clive, cr.Code, cr.Stdout, cqueued, 2*limit)
	}
	t.Logf("control: queued peak %d", cqueued)
}
