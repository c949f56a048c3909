// Command daemon benchmarks cordon's host manager through its protocol
// (the same client the CLI uses), against a running `cordon daemon`:
//
//   - create+start latency of an idle sandbox (no gateway);
//   - exec latency of /bin/true in a warm sandbox;
//   - density: N idle sandboxes created and started, the daemon's memory
//     (VmRSS, and PSS from smaps_rollup) per sandbox, and the host's
//     MemAvailable drop (sandbox inits included, for information);
//   - emergency stop: stop_all of every sandbox, timed by the client and
//     by the daemon.
//
// It prints one JSON object. bench/daemon.sh runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

var (
	socket  = flag.String("socket", "", "the daemon's socket")
	pid     = flag.Int("pid", 0, "the daemon's pid (memory)")
	latN    = flag.Int("lat", 30, "sandboxes for the create+start latency")
	execN   = flag.Int("exec", 200, "execs for the exec latency")
	density = flag.Int("density", 500, "idle sandboxes for the density and stop --all phases")
	stopN   = flag.Int("stop", 100, "sandboxes for the timed emergency stop")
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func pct(d []time.Duration, q float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}

// memKiB reads a "Key:   N kB" line of a /proc file.
func memKiB(path, key string) int64 {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			f := strings.Fields(l)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func main() {
	flag.Parse()
	c, err := proto.Dial(*socket)
	must(err)
	defer c.Close()
	ctx := context.Background()
	out := map[string]any{}
	createStart := func(name string) (time.Duration, time.Duration) {
		t0 := time.Now()
		must(c.Do(ctx, "create", hostmgr.CreateArgs{Name: name}, nil, nil))
		t1 := time.Now()
		must(c.Do(ctx, "start", hostmgr.NameArgs{Name: name}, nil, nil))
		return t1.Sub(t0), time.Since(t1)
	}
	rm := func(name string) { must(c.Do(ctx, "rm", hostmgr.NameArgs{Name: name}, nil, nil)) }

	// create+start latency.
	var cr, stt, both []time.Duration
	for i := range *latN {
		a, b := createStart(fmt.Sprintf("lat-%d", i))
		cr, stt, both = append(cr, a), append(stt, b), append(both, a+b)
	}
	out["create_ms"] = map[string]float64{"p50": pct(cr, .5), "p90": pct(cr, .9), "p99": pct(cr, .99)}
	out["start_ms"] = map[string]float64{"p50": pct(stt, .5), "p90": pct(stt, .9), "p99": pct(stt, .99)}
	out["create_start_ms"] = map[string]float64{"p50": pct(both, .5), "p90": pct(both, .9), "p99": pct(both, .99)}

	// exec latency in a warm sandbox (stdio: /dev/null).
	null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	must(err)
	var ex []time.Duration
	for range *execN {
		t0 := time.Now()
		err := c.Call(ctx, "exec", hostmgr.ExecArgs{Name: "lat-0", Argv: []string{"/bin/true"}}, []*os.File{null, null, null}, func(proto.Response) error { return nil })
		must(err)
		ex = append(ex, time.Since(t0))
	}
	out["exec_true_ms"] = map[string]float64{"p50": pct(ex, .5), "p90": pct(ex, .9), "p99": pct(ex, .99)}
	for i := range *latN {
		rm(fmt.Sprintf("lat-%d", i))
	}

	// Density.
	status := fmt.Sprintf("/proc/%d/status", *pid)
	rollup := fmt.Sprintf("/proc/%d/smaps_rollup", *pid)
	rss0, pss0, avail0 := memKiB(status, "VmRSS"), memKiB(rollup, "Pss"), memKiB("/proc/meminfo", "MemAvailable")
	start := time.Now()
	made := 0
	var failed string
	for i := range *density {
		name := fmt.Sprintf("d-%d", i)
		if err := c.Do(ctx, "create", hostmgr.CreateArgs{Name: name}, nil, nil); err != nil {
			failed = fmt.Sprintf("create %s: %v", name, err)
			break
		}
		if err := c.Do(ctx, "start", hostmgr.NameArgs{Name: name}, nil, nil); err != nil {
			failed = fmt.Sprintf("start %s: %v", name, err)
			break
		}
		made++
	}
	took := time.Since(start)
	time.Sleep(2 * time.Second) // let the runtime settle
	rss1, pss1, avail1 := memKiB(status, "VmRSS"), memKiB(rollup, "Pss"), memKiB("/proc/meminfo", "MemAvailable")
	threads := memKiB(status, "Threads")
	// What the daemon spends on idle sandboxes (each has a watch of its TCP
	// memory and socket table): its CPU time over 10 s with nothing asked.
	cpu0 := cpuTicks(*pid)
	time.Sleep(10 * time.Second)
	idleCPU := float64(cpuTicks(*pid)-cpu0) / 100 / 10 // ticks are 1/100 s
	var is []hostmgr.Info
	must(c.Do(ctx, "ls", struct{}{}, nil, &is))
	running := 0
	for _, i := range is {
		if i.State == "running" {
			running++
		}
	}
	out["density"] = map[string]any{
		"requested": *density, "running": running, "failed": failed, "seconds": took.Seconds(),
		"daemon_rss_kib_before": rss0, "daemon_rss_kib_after": rss1,
		"daemon_rss_kib_per_sandbox":             float64(rss1-rss0) / float64(max(made, 1)),
		"daemon_pss_kib_per_sandbox":             float64(pss1-pss0) / float64(max(made, 1)),
		"daemon_threads":                         threads,
		"daemon_idle_cpu_fraction_of_one_core":   idleCPU,
		"host_memavailable_drop_kib_per_sandbox": float64(avail0-avail1) / float64(max(made, 1)),
	}

	// Emergency stop of every sandbox (timed at stopN first when density
	// made more: stop the extra ones first, untimed).
	if made > *stopN {
		for i := *stopN; i < made; i++ {
			must(c.Do(ctx, "stop", hostmgr.NameArgs{Name: fmt.Sprintf("d-%d", i)}, nil, nil))
		}
	}
	t0 := time.Now()
	var r hostmgr.StopAllResult
	must(c.Do(ctx, "stop_all", struct{}{}, nil, &r))
	out["stop_all"] = map[string]any{"sandboxes": len(r.Stopped), "failed": len(r.Failed), "client_ms": float64(time.Since(t0).Microseconds()) / 1000,
		"daemon_ms": float64(r.Duration.Microseconds()) / 1000}
	for i := range made {
		rm(fmt.Sprintf("d-%d", i))
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// cpuTicks is pid's user + system time in clock ticks (/proc/PID/stat).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	// After the command: state is f[0]; utime and stime are fields 14, 15.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	must(err1)
	must(err2)
	return u + st
}
