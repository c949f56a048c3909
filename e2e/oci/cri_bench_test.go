package oci

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// The bench's timing wrapper: a runtime handler "H-timed" runs this test
// binary as the child "timeshim", which runs the real runtime binary with
// the same arguments and stdio and appends one line per invocation to a
// log: the duration in nanoseconds and the arguments. The wrapper's own
// start is outside the measured interval; only the bench uses it.
const (
	timeshimLog    = "CORDON_BENCH_TIMESHIM_LOG"
	timeshimTarget = "CORDON_BENCH_TIMESHIM_TARGET"
)

// Only this child is dispatched here (other files of the package may
// register children of their own with Dispatch).
func init() {
	if os.Getenv(testkit.ChildVar) == "timeshim" {
		testkit.Dispatch(map[string]func() int{"timeshim": timeshim})
	}
}

func timeshim() int {
	target, logPath := os.Getenv(timeshimTarget), os.Getenv(timeshimLog)
	env := slices.DeleteFunc(os.Environ(), func(s string) bool {
		return strings.HasPrefix(s, testkit.ChildVar+"=") || strings.HasPrefix(s, "CORDON_BENCH_TIMESHIM_")
	})
	cmd := exec.Command(target, os.Args[1:]...)
	cmd.Args[0] = filepath.Base(target)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if f, ferr := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600); ferr == nil {
		fmt.Fprintf(f, "%d %s\n", took.Nanoseconds(), strings.Join(os.Args[1:], " "))
		f.Close()
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return 127
	}
	return 0
}

// timedRuntime is a runtime handler NAME-timed whose binary is a script
// running the timeshim around binary, logging to logPath.
func timedRuntime(b *testing.B, dir, name, binary, logPath string) engines.Runtime {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(dir, name+"-timed")
	body := fmt.Sprintf("#!/bin/sh\n%s=timeshim %s=%s %s=%s exec %s \"$@\"\n",
		testkit.ChildVar, timeshimTarget, binary, timeshimLog, logPath, exe)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		b.Fatal(err)
	}
	return engines.Runtime{Name: name + "-timed", Binary: script}
}

// benchSample is one pod's times through the CRI (ms), and for a timed
// handler the time spent inside the runtime binary for the same steps.
type benchSample struct {
	pod, ctr, down       float64 // RunPodSandbox; CreateContainer+StartContainer; stop and remove both
	rtPod, rtCtr, rtDown float64 // runtime binary time for the same (timed handlers only)
}

// BenchmarkCRIStart (bench/cri.sh) measures the CRI create+start path
// under each handler, interleaved in one run: RunPodSandbox, then
// CreateContainer+StartContainer, then StopContainer (timeout 0),
// RemoveContainer, StopPodSandbox, RemovePodSandbox. Handlers NAME-timed
// run the same runtime through the timing wrapper, which gives the time
// spent inside the runtime binary. CORDON_BENCH_N pods per handler
// (default 20); CORDON_BENCH_HANDLERS (default "runc,cordon").
func BenchmarkCRIStart(b *testing.B) {
	n := 20
	if v, err := strconv.Atoi(os.Getenv("CORDON_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	names := []string{"runc", engines.CordonHandler}
	if v := os.Getenv("CORDON_BENCH_HANDLERS"); v != "" {
		names = strings.Split(v, ",")
	}
	runc := testkit.RequireCommand(b, "runc is the bench's baseline", "runc")
	dir := b.TempDir()
	logPath := filepath.Join(dir, "runtime.log")
	bins := map[string]string{"runc": runc, engines.CordonHandler: cordonOCI}
	var runtimes []engines.Runtime
	var handlers []string
	for _, h := range names {
		runtimes = append(runtimes, engines.Runtime{Name: h, Binary: bins[h]}, timedRuntime(b, dir, h, bins[h], logPath))
		handlers = append(handlers, h, h+"-timed")
	}
	// A tiny image (the static busybox): the native snapshotter copies the
	// whole image for every container, and a Debian image's copy would
	// dominate what is measured, for both runtimes alike.
	c := engines.StartContainerdWith(b, engines.BusyboxRoot(b), runtimes...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	client, err := engines.DialCRI(ctx, c.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	e := &engine{c: c, cri: client, ctx: ctx}
	samples := map[string][]benchSample{}
	for i := 0; i < n+1; i++ { // round 0 warms caches and is dropped
		for k := range handlers {
			h := handlers[(i+k)%len(handlers)]
			s := e.benchOne(b, h, logPath)
			if i > 0 {
				samples[h] = append(samples[h], s)
			}
		}
	}
	b.StopTimer()
	fmt.Print(benchReport(names, samples, n))
}

// benchOne runs one pod with one container through its whole CRI life.
func (e *engine) benchOne(b *testing.B, h, logPath string) benchSample {
	b.Helper()
	_ = os.Remove(logPath)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	cfg := engines.PodConfig("b-"+hexID(4), hexID(8), e.c.CgroupParent)
	t0 := time.Now()
	pod, err := e.cri.RunPod(e.ctx, cfg, h)
	if err != nil {
		b.Fatalf("%v\n%s", err, e.c.Log())
	}
	t1 := time.Now()
	id, err := e.cri.CreateContainer(e.ctx, pod, engines.ContainerConfig("c", e.c.Image, []string{"sleep", "86400"}), cfg)
	if err == nil {
		err = e.cri.StartContainer(e.ctx, id)
	}
	if err != nil {
		b.Fatalf("%v\n%s", err, e.c.Log())
	}
	t2 := time.Now()
	for _, step := range []error{e.cri.StopContainer(e.ctx, id, 0), e.cri.RemoveContainer(e.ctx, id), e.cri.StopPod(e.ctx, pod), e.cri.RemovePod(e.ctx, pod)} {
		if step != nil {
			b.Fatal(step)
		}
	}
	t3 := time.Now()
	s := benchSample{pod: ms(t1.Sub(t0)), ctr: ms(t2.Sub(t1)), down: ms(t3.Sub(t2))}
	if strings.HasSuffix(h, "-timed") {
		s.rtPod, s.rtCtr, s.rtDown = runtimeTimes(b, logPath, pod, id)
	}
	return s
}

// runtimeTimes sums the timeshim's log (ms): create and start of the pod's
// container, create and start of the container, and every other call
// (kill, delete, state) for either.
func runtimeTimes(b *testing.B, logPath, pod, ctr string) (rtPod, rtCtr, rtDown float64) {
	b.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		b.Fatalf("the timing wrapper logged nothing: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ns, rest, _ := strings.Cut(sc.Text(), " ")
		d, _ := strconv.ParseFloat(ns, 64)
		d /= 1e6
		args := strings.Fields(rest)
		sub := subcommand(args)
		switch {
		case (sub == "create" || sub == "start") && slices.Contains(args, pod):
			rtPod += d
		case (sub == "create" || sub == "start") && slices.Contains(args, ctr):
			rtCtr += d
		default:
			rtDown += d
		}
	}
	return rtPod, rtCtr, rtDown
}

// subcommand is the first argument of a runtime call that is a runc
// command (global flags and their values come first).
func subcommand(args []string) string {
	for _, a := range args {
		switch a {
		case "create", "start", "state", "kill", "delete", "exec", "features", "ps", "update", "pause", "resume":
			return a
		}
	}
	return ""
}

func benchReport(names []string, samples map[string][]benchSample, n int) string {
	var b strings.Builder
	col := func(h string, f func(benchSample) float64) []float64 {
		var v []float64
		for _, s := range samples[h] {
			v = append(v, f(s))
		}
		return v
	}
	startPath := func(s benchSample) float64 { return s.pod + s.ctr }
	rtStart := func(s benchSample) float64 { return s.rtPod + s.rtCtr }
	fmt.Fprintf(&b, "\nCRI through a private containerd %s, %d pods per handler, interleaved (ms, median / p90)\n\n", "1.6", n)
	b.WriteString("| handler | RunPodSandbox | Create+StartContainer | create+start path | stop+remove | runtime binary, create+start | runtime binary, stop+remove |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, h := range names {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", h,
			mp(col(h, func(s benchSample) float64 { return s.pod })), mp(col(h, func(s benchSample) float64 { return s.ctr })),
			mp(col(h, startPath)), mp(col(h, func(s benchSample) float64 { return s.down })),
			mp(col(h+"-timed", rtStart)), mp(col(h+"-timed", func(s benchSample) float64 { return s.rtDown })))
	}
	if slices.Contains(names, "runc") && slices.Contains(names, engines.CordonHandler) {
		runcTotal, cordonTotal := median(col("runc", startPath)), median(col(engines.CordonHandler, startPath))
		runcRT := median(col("runc-timed", rtStart))
		fmt.Fprintf(&b, "\ncordon's added time on the create+start path: %.1f ms median; runc's own runtime time %.1f ms: ratio %.2f (target <= 1.5)\n",
			cordonTotal-runcTotal, runcRT, (cordonTotal-runcTotal)/runcRT)
	}
	return b.String()
}

func mp(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", median(v), quantile(v, 0.9))
}

func median(v []float64) float64 { return quantile(v, 0.5) }

func quantile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	k := float64(len(s)-1) * p
	f := int(k)
	c := min(f+1, len(s)-1)
	return s[f] + (s[c]-s[f])*(k-float64(f))
}
