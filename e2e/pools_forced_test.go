package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
	requireRoot(t)
	t.Parallel()
	const limit = 64 << 20
	const conns = "5000"
	// The watch allows a quarter of the limit past it, and polls: allow
	// another 32 MiB for what the program adds between two polls.
	const bound = limit + limit/4 + 32<<20
	st := newStateDir(t)
	peak, probe, r := watchTCPPeak(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M"}, "hold", "tcpmany", conns)...)
	if peak < limit {
		t.Errorf("kmem.tcp peak %d seen from outside: the program never reached its limit %d, the test proves nothing", peak, limit)
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

	cpeak, cprobe, _ := watchTCPPeak(t, hooksBin, st, probeArgs(withoutLayer("tcp-watch", []string{"--json", "--memory", "64M"}), "hold", "tcpmany", conns)...)
	if cpeak < 2*limit || !strings.HasPrefix(cprobe, "conns="+conns) {
		t.Errorf("control without the watch: kmem.tcp peak %d, probe %q; want all %s connections and a peak above %d (the kernel's forced charges)", cpeak, cprobe, conns, 2*limit)
	}
	t.Logf("control: peak %d, probe %s", cpeak, cprobe)
	requireNoResidue(t, st)
}

// watchTCPPeak runs bin with args (the probe under hold), polling the
// sandbox's memory.kmem.tcp.max_usage_in_bytes from the host until the
// probe reports (then it releases it) or cordon ends. It returns the
// highest value read, the probe's data ("" if it never reported) and
// cordon's result.
func watchTCPPeak(t *testing.T, bin, state string, args ...string) (int64, string, result) {
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
	var peak int64
	var data string
	poll := func() {
		inits := childPids(cmd.Process.Pid)
		if len(inits) != 1 {
			return
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", inits[0]))
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			// An init that has exited shows the root group: skip it.
			if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" && strings.HasPrefix(f[2], "/cordon/") {
				v, err := os.ReadFile("/sys/fs/cgroup/memory" + f[2] + "/memory.kmem.tcp.max_usage_in_bytes")
				if err != nil {
					return
				}
				if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil && n > peak {
					peak = n
				}
			}
		}
	}
	deadline := time.After(90 * time.Second)
loop:
	for {
		select {
		case data = <-probe:
			poll()
			time.Sleep(200 * time.Millisecond)
			poll()
			break loop
		case <-done:
			break loop
		case <-deadline:
			cmd.Process.Kill()
			t.Errorf("cordon %v: neither a probe result nor an end within 90s", args)
			break loop
		case <-time.After(5 * time.Millisecond):
			poll()
		}
	}
	inW.Close()
	<-done
	_ = cmd.Wait()
	return peak, data, parseResult(cmd.ProcessState.ExitCode(), out.String(), errb.String())
}
