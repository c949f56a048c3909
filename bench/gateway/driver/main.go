// Command driver runs the gateway benchmark (bench/gateway.sh builds the
// programs and calls it). Everything is on 127.0.0.1 or in the network
// namespace cordon creates for the sandbox.
//
// It starts the fake upstream (bench/gateway/upstream), smokescreen, and
// three long-lived load clients (bench/gateway/load) that wait for phases
// on stdin: one on the host talking to the upstream directly, one inside
// `cordon run --config` talking through the gateway (model broker on
// 127.0.0.1:80, egress proxy on 127.0.0.1:81 in the sandbox's namespace),
// one on the host using smokescreen as its HTTPS proxy. Each phase runs
// on every path back to back, so the ratios come from one machine state.
// Around each phase it reads the CPU time of the processes under test from
// /proc: the gateway process (argv[0] "cordon-gateway", a child of
// cordon), the privileged cordon process (it serves the authority: SQLite),
// smokescreen, and the upstream.
//
// After the run it reads the receipts (`cordon receipts --json`) and
// attributes them to phases by time, and prints markdown tables; the raw
// numbers go to -out/gateway.json.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/bench/gateway/wire"
)

var (
	binDir        = flag.String("bin", "", "directory with cordon, load, upstream, authority (bound read-only into the sandbox at /bench)")
	smokeBin      = flag.String("smokescreen", "", "smokescreen binary (empty: skip)")
	outDir        = flag.String("out", "bench/out", "where gateway.json and the logs go")
	httpsPort     = flag.Int("https-port", 443, "port of the HTTPS file server on 127.0.0.1 (443: the broker checks the SNI)")
	modelDur      = flag.Duration("model-dur", 8*time.Second, "duration of each model phase")
	egressDur     = flag.Duration("egress-dur", 5*time.Second, "duration of each egress phase")
	warmup        = flag.Duration("warmup", time.Second, "warm-up before each phase (not measured)")
	only          = flag.String("only", "", "run only these phases (comma-separated names)")
	rerender      = flag.String("report", "", "print the tables of an earlier run's gateway.json and exit")
	authorityArgs = flag.String("authority-args", "-n 2000 -dur 3s -held 0", "arguments of the authority-channel micro-benchmark (empty: skip)")
)

const (
	apiKey   = "sk-ant-bench-custodied-key-2f9c0e7d1a"
	hostName = "allowed.test"
	workload = "gwbench"
)

// proc is a started child; all are ended by PID at exit.
type proc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

func start(name string, cmd *exec.Cmd, withStdin bool) (*proc, error) {
	p := &proc{name: name, cmd: cmd}
	logf, err := os.Create(filepath.Join(*outDir, "gw-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if withStdin {
		if p.in, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	so, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(so)
	p.out.Buffer(make([]byte, 1<<20), 1<<20)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

// line reads the next stdout line of p as JSON into v.
func (p *proc) line(v any) error {
	if !p.out.Scan() {
		return fmt.Errorf("%s ended (see %s/gw-%s.log): %v", p.name, *outDir, p.name, p.out.Err())
	}
	if err := json.Unmarshal(p.out.Bytes(), v); err != nil {
		return fmt.Errorf("%s: %q: %w", p.name, p.out.Text(), err)
	}
	return nil
}

// stopAll ends every child by its PID: stdin closed first (the load
// clients then exit and cordon tears its sandbox down), then SIGTERM, then
// SIGKILL after 5 s.
func stopAll() {
	procsMu.Lock()
	ps := slices.Clone(procs)
	procs = nil
	procsMu.Unlock()
	for _, p := range slices.Backward(ps) {
		if p.in != nil {
			p.in.Close()
		}
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
			continue
		case <-time.After(3 * time.Second):
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	}
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("driver: ")
	if *rerender != "" {
		b, err := os.ReadFile(*rerender)
		if err != nil {
			log.Fatal(err)
		}
		var old struct {
			Results     map[string]map[string]*result
			Authority   json.RawMessage
			Smokescreen string
		}
		if err := json.Unmarshal(b, &old); err != nil {
			log.Fatal(err)
		}
		report(os.Stdout, old.Results, old.Authority, old.Smokescreen != "")
		return
	}
	if *binDir == "" {
		log.Fatal("-bin is required")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		log.Printf("%v: stopping", s)
		// Ending the children makes bench return (its reads fail) and
		// remove its temporary directory; exit anyway if it does not.
		stopAll()
		time.Sleep(10 * time.Second)
		os.Exit(130)
	}()
	err := bench()
	stopAll()
	if err != nil {
		log.Fatal(err)
	}
}

type (
	phase = wire.Phase
	stats = wire.Stats
)

// result is the load generator's report and what the driver adds.
type result struct {
	wire.Result

	// Filled by the driver: CPU ms of each watched process during the
	// measured phase, and the receipts recorded in its window.
	ProcCPUms map[string]float64 `json:"proc_cpu_ms,omitempty"`
	Receipts  *receiptStats      `json:"receipts,omitempty"`
}

type receiptStats struct {
	N         int    `json:"n"`
	Denied    int    `json:"denied"`
	Duration  stats  `json:"duration_ms"`
	FirstByte *stats `json:"first_byte_ms,omitempty"`
}

// path is one way of reaching the upstream.
type path struct {
	name  string
	load  *proc
	watch func() map[string]int // name -> pid, read at each phase
}

func bench() error {
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	bin := func(n string) string { return filepath.Join(*binDir, n) }
	work, err := os.MkdirTemp("", "cordon-gwbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The sandbox's init reaches the state dir below: traversable, not
	// listable (bench/run.sh does the same).
	if err := os.Chmod(work, 0o711); err != nil {
		return err
	}
	state := filepath.Join(work, "state")
	if err := os.Mkdir(state, 0o711); err != nil {
		return err
	}
	// The bind source holds binaries and the CA certificate, nothing secret;
	// the key and the config live beside it, outside every bind.
	if err := os.Chmod(*binDir, 0o755); err != nil {
		return err
	}
	certFile := bin("cert.pem")

	// Upstream.
	up, err := start("upstream", exec.Command(bin("upstream"), "-key", apiKey, "-cert", certFile,
		"-https", fmt.Sprintf("127.0.0.1:%d", *httpsPort), "-name", hostName), false)
	if err != nil {
		return err
	}
	var addrs struct{ Model, HTTPS string }
	if err := up.line(&addrs); err != nil {
		return err
	}
	_, hport, _ := net.SplitHostPort(addrs.HTTPS)
	fileURL := fmt.Sprintf("https://%s:%s/file", hostName, hport)

	// cordon's config: the production path with every limit set.
	keyFile := filepath.Join(work, "upstream-key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		return err
	}
	// Policy on, as in production: the allow-lists again in Cedar, plus a
	// forbid every decision must also evaluate.
	polFile := filepath.Join(work, "policy.cedar")
	pol := fmt.Sprintf(`@id("models") permit(principal, action == Action::"model.invoke", resource) when { resource.name like "claude-*" };
@id("host") permit(principal, action == Action::"egress.connect", resource == Host::%q) when { context.port == %s };
@id("no-opus") forbid(principal, action == Action::"model.invoke", resource) when { resource.name like "claude-opus*" };
`, hostName, hport)
	if err := os.WriteFile(polFile, []byte(pol), 0o600); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version: cordon/v1
workload: %s
tenant: acme
purpose: benchmark
policy: [`+polFile+`]
models:
  - name: claude
    api: anthropic
    upstream: http://%s
    credential: upstream-key
    models: ["claude-*"]
egress:
  allow:
    - host: %s
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    %s: 127.0.0.1
budgets:
  window: 24h
  requests: 1000000000
  input_tokens: 1000000000000000
  output_tokens: 1000000000000000
  egress_bytes: 1000T
  connections: 1000000000
  concurrent_streams: 1024
# The benchmark measures the gateway's path, not the per-sandbox host
# protection bounds (docs/config.md, crossings): raise them out of the way.
crossings:
  max_receipts: 100000000
  rate: 100000
  burst: 100000
secrets:
  upstream-key: {file: %s}
`, workload, addrs.Model, hostName, hport, hostName, keyFile)
	cfgFile := filepath.Join(work, "cordon.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return err
	}
	cordon := func(args ...string) *exec.Cmd {
		return exec.Command(bin("cordon"), append([]string{"--state-dir", state}, args...)...)
	}
	if out, err := cordon("run", "--", "/bin/true").CombinedOutput(); err != nil { // warm the caches once
		return fmt.Errorf("cordon run /bin/true: %v\n%s", err, out)
	}

	loadArgs := []string{"-egress-url", fileURL}
	direct, err := start("load-direct", exec.Command(bin("load"), append(loadArgs, "-model-url", "http://"+addrs.Model, "-key", apiKey,
		"-ca", certFile, "-proxy", "none", "-resolve", hostName+"=127.0.0.1")...), true)
	if err != nil {
		return err
	}
	cd, err := start("load-cordon", cordon(append([]string{"run", "--config", cfgFile, "--ro", *binDir + ":/bench", "--", "/bench/load"},
		append(loadArgs, "-model-url", "env", "-key", "env", "-ca", "/bench/cert.pem", "-proxy", "env")...)...), true)
	if err != nil {
		return err
	}
	paths := []*path{{name: "direct", load: direct, watch: func() map[string]int { return map[string]int{"upstream": up.cmd.Process.Pid} }}}
	// The floor: a bare Go reverse proxy, model phases only.
	bp, err := start("bareproxy", exec.Command(bin("bareproxy"), "-upstream", "http://"+addrs.Model), false)
	if err != nil {
		return err
	}
	var bpAddr struct{ Addr string }
	if err := bp.line(&bpAddr); err != nil {
		return err
	}
	bare, err := start("load-bare", exec.Command(bin("load"), append(loadArgs, "-model-url", "http://"+bpAddr.Addr, "-key", apiKey,
		"-ca", certFile, "-proxy", "none")...), true)
	if err != nil {
		return err
	}
	var hello map[string]any
	if err := bare.line(&hello); err != nil {
		return err
	}
	paths = append(paths, &path{name: "bare", load: bare, watch: func() map[string]int {
		return map[string]int{"bareproxy": bp.cmd.Process.Pid, "upstream": up.cmd.Process.Pid}
	}})
	if err := direct.line(&hello); err != nil {
		return err
	}
	if err := cd.line(&hello); err != nil {
		return err
	}
	cordonPid := cd.cmd.Process.Pid
	gwPids, err := gatewayPids(cordonPid)
	if err != nil {
		return err
	}
	log.Printf("cordon pid %d, gateway pids %v, sandbox env %v", cordonPid, gwPids, hello)
	paths = append(paths, &path{name: "cordon", load: cd, watch: func() map[string]int {
		m := map[string]int{"cordon": cordonPid, "upstream": up.cmd.Process.Pid}
		for n, pid := range gwPids {
			m[n] = pid
		}
		return m
	}})

	var smokeVersion string
	if *smokeBin != "" {
		sp, err := startSmokescreen(work)
		if err != nil {
			return err
		}
		sl, err := start("load-smokescreen", exec.Command(bin("load"), append(loadArgs, "-ca", certFile,
			"-proxy", fmt.Sprintf("http://127.0.0.1:%d", sp.port))...), true)
		if err != nil {
			return err
		}
		if err := sl.line(&hello); err != nil {
			return err
		}
		paths = append(paths, &path{name: "smokescreen", load: sl, watch: func() map[string]int {
			return map[string]int{"smokescreen": sp.proc.cmd.Process.Pid, "upstream": up.cmd.Process.Pid}
		}})
		smokeVersion = "v0.1.0"
	}

	md, ed, w := modelDur.String(), egressDur.String(), warmup.String()
	phases := []phase{
		{Name: "model-stream-c1", Kind: "model", Stream: true, C: 1, Dur: md, Warmup: w},
		{Name: "model-json-c1", Kind: "model", C: 1, Dur: md, Warmup: w},
		{Name: "model-stream-c64", Kind: "model", Stream: true, C: 64, Dur: md, Warmup: w},
		{Name: "egress-latency-c1", Kind: "egress-latency", C: 1, Dur: ed, Warmup: w},
		{Name: "egress-bulk-c1", Kind: "egress-bulk", C: 1, MiB: 256, Dur: ed, Warmup: w},
		{Name: "egress-bulk-c4", Kind: "egress-bulk", C: 4, MiB: 256, Dur: ed, Warmup: w},
		// One tunnel for the whole phase, no warm-up: does it slow down as
		// it ages?
		{Name: "egress-long-c1", Kind: "egress-long", C: 1, MiB: 64, Dur: (2 * *egressDur).String()},
	}
	if *only != "" {
		phases = slices.DeleteFunc(phases, func(p phase) bool { return !slices.Contains(strings.Split(*only, ","), p.Name) })
	}
	results := map[string]map[string]*result{} // phase -> path -> result
	for _, ph := range phases {
		results[ph.Name] = map[string]*result{}
		for _, p := range paths {
			if p.name == "smokescreen" && ph.Kind == "model" || p.name == "bare" && ph.Kind != "model" {
				continue // smokescreen is an egress proxy; the bare proxy a model floor
			}
			r, err := runPhase(p, ph)
			if err != nil {
				return err
			}
			results[ph.Name][p.name] = r
			log.Printf("%-18s %-12s %s", ph.Name, p.name, brief(r))
		}
	}

	// Gateway and store totals for the whole cordon run, then receipts.
	for _, p := range paths {
		if p.load.in != nil {
			p.load.in.Close()
		}
	}
	if err := cd.cmd.Wait(); err != nil {
		return fmt.Errorf("cordon run: %v (see %s/gw-load-cordon.log)", err, *outDir)
	}
	rcOut, err := cordon("receipts", "--json", "--workload", workload).Output()
	if err != nil {
		return fmt.Errorf("cordon receipts: %v", err)
	}
	receipts := parseReceipts(rcOut)
	if err := os.WriteFile(filepath.Join(*outDir, "gw-receipts.jsonl"), rcOut, 0o644); err != nil {
		return err
	}
	for _, ph := range phases {
		if r := results[ph.Name]["cordon"]; r != nil {
			r.Receipts = receiptsIn(receipts, r.Start, r.End)
		}
	}
	var authority json.RawMessage
	if *authorityArgs != "" {
		out, err := exec.Command(bin("authority"), strings.Fields(*authorityArgs)...).Output()
		if err != nil {
			return fmt.Errorf("authority micro-benchmark: %v", err)
		}
		authority = out
	}
	host, _ := os.ReadFile("/proc/loadavg")
	all := map[string]any{"phases": phases, "results": results, "authority": authority, "smokescreen": smokeVersion,
		"config": cfg, "loadavg_end": strings.TrimSpace(string(host)), "receipts_total": len(receipts)}
	b, _ := json.MarshalIndent(all, "", " ")
	if err := os.WriteFile(filepath.Join(*outDir, "gateway.json"), b, 0o644); err != nil {
		return err
	}
	report(os.Stdout, results, authority, smokeVersion != "")
	return nil
}

func brief(r *result) string {
	s := fmt.Sprintf("n=%d err=%d rps=%.1f p50=%.3f p99=%.3f", r.Requests, r.Errors, r.RPS, r.Latency.P50, r.Latency.P99)
	if r.TTFB != nil {
		s += fmt.Sprintf(" ttfb50=%.3f ttfb99=%.3f", r.TTFB.P50, r.TTFB.P99)
	}
	if r.MiBs > 0 {
		s += fmt.Sprintf(" MiB/s=%.1f", r.MiBs)
	}
	keys := make([]string, 0, len(r.ProcCPUms))
	for k := range r.ProcCPUms {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s += fmt.Sprintf(" cpu[%s]=%.0fms", k, r.ProcCPUms[k])
	}
	if r.FirstError != "" {
		s += " first_error=" + r.FirstError
	}
	return s
}

func runPhase(p *path, ph phase) (*result, error) {
	send := func(ph phase) (*result, error) {
		b, _ := json.Marshal(ph)
		if _, err := p.load.in.Write(append(b, '\n')); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		var r result
		if err := p.load.line(&r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	// Warm-up first, on the same client and connections, outside the
	// CPU sample.
	if ph.Warmup != "" {
		w := ph
		w.Name, w.Dur, w.Warmup = ph.Name+"-warmup", ph.Warmup, ""
		if _, err := send(w); err != nil {
			return nil, err
		}
		ph.Warmup = ""
	}
	pids := p.watch()
	before := map[string]float64{}
	for n, pid := range pids {
		before[n] = cpuMS(pid)
	}
	r, err := send(ph)
	if err != nil {
		return nil, err
	}
	r.ProcCPUms = map[string]float64{}
	for n, pid := range pids {
		r.ProcCPUms[n] = cpuMS(pid) - before[n]
		// The gateway is every broker process (and the socket source):
		// "gateway" is their sum.
		if strings.HasPrefix(n, "gateway/") {
			r.ProcCPUms["gateway"] += r.ProcCPUms[n]
		}
	}
	return r, nil
}

// cpuMS is utime+stime of a process (all its threads, exited ones too),
// from /proc/PID/stat, in ms. The resolution is one clock tick (10 ms);
// the per-thread schedstat sum below is ns-precise and preferred when no
// thread exited, which is checked by comparing the two.
func cpuMS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	// After the comm: state is field 3; utime 14 and stime 15 are at 11, 12.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	ticks := (ut + st) * 10 // USER_HZ is 100 on Linux
	ns := schedNS(pid)
	if ns > 0 && math.Abs(ns/1e6-ticks) < 50 {
		return ns / 1e6
	}
	return ticks
}

// schedNS sums the on-CPU time of every live thread of pid.
func schedNS(pid int) float64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum float64
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			sum += v
		}
	}
	return sum
}

// gatewayPids finds the gateway's processes: the children of cordon whose
// argv[0] is "cordon-gateway" (one per broker and the socket source since
// issue 10; one process before), named "gateway/<argv[1]>".
func gatewayPids(parent int) (map[string]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
		if args[0] != "cordon-gateway" {
			continue
		}
		name := "all"
		if len(args) > 1 {
			name = args[1]
		}
		out["gateway/"+name] = pid
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cordon-gateway child of cordon (pid %d)", parent)
	}
	return out, nil
}

type smoke struct {
	proc *proc
	port int
}

// startSmokescreen runs smokescreen on 127.0.0.1 allowing the same one
// name, resolved to 127.0.0.1 like cordon's egress.resolve: in a private
// mount namespace whose /etc/hosts is bind-mounted over (the host's file
// is untouched; the network is the host's loopback).
func startSmokescreen(work string) (*smoke, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	files := map[string]string{
		"hosts": "127.0.0.1 localhost\n127.0.0.1 " + hostName + "\n",
		"acl.yaml": `version: v1
services: []
default:
  project: bench
  action: enforce
  allowed_domains:
    - ` + hostName + "\n",
		"smokescreen.yaml": fmt.Sprintf(`ip: 127.0.0.1
port: %d
allow_ranges: ["127.0.0.1/32"]
acl_file: %s
allow_missing_role: true
`, port, filepath.Join(work, "acl.yaml")),
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(work, n), []byte(c), 0o644); err != nil {
			return nil, err
		}
	}
	// unshare and sh exec in place: the PID is smokescreen's.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$1" /etc/hosts && exec "$2" --config-file "$3"`, "sh",
		filepath.Join(work, "hosts"), *smokeBin, filepath.Join(work, "smokescreen.yaml"))
	p, err := start("smokescreen", cmd, false)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("smokescreen did not listen on 127.0.0.1:%d (see %s/gw-smokescreen.log)", port, *outDir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &smoke{proc: p, port: port}, nil
}

type receipt struct {
	Time      time.Time `json:"time"`
	Broker    string    `json:"broker"`
	Decision  string    `json:"decision"`
	Duration  int64     `json:"duration_ns"`
	FirstByte int64     `json:"first_byte_ns"`
}

func parseReceipts(b []byte) []receipt {
	var out []receipt
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var r receipt
		if err := dec.Decode(&r); err != nil {
			if !errors.Is(err, io.EOF) {
				log.Printf("receipts: %v", err)
			}
			return out
		}
		out = append(out, r)
	}
}

func receiptsIn(rs []receipt, from, to int64) *receiptStats {
	var d, fb []float64
	st := &receiptStats{}
	for _, r := range rs {
		t := r.Time.UnixNano()
		if t < from || t >= to {
			continue
		}
		st.N++
		if r.Decision != "allow" {
			st.Denied++
		}
		d = append(d, float64(r.Duration)/1e6)
		if r.FirstByte > 0 {
			fb = append(fb, float64(r.FirstByte)/1e6)
		}
	}
	st.Duration = fstats(d)
	if len(fb) > 0 {
		s := fstats(fb)
		st.FirstByte = &s
	}
	return st
}

func fstats(v []float64) stats {
	if len(v) == 0 {
		return stats{}
	}
	slices.Sort(v)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return round3(v[max(0, min(i, len(v)-1))])
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return stats{N: len(v), Mean: round3(sum / float64(len(v))), P50: q(.5), P90: q(.9), P99: q(.99), Max: round3(v[len(v)-1])}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// report prints the markdown tables.
func report(w io.Writer, res map[string]map[string]*result, authority json.RawMessage, withSmoke bool) {
	get := func(ph, p string) *result {
		if r := res[ph][p]; r != nil {
			return r
		}
		return &result{}
	}
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	f3 := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	f1 := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	perReq := func(r *result, names ...string) float64 {
		var sum float64
		for _, n := range names {
			sum += r.ProcCPUms[n]
		}
		if r.Requests == 0 {
			return math.NaN()
		}
		return sum / float64(r.Requests)
	}

	fmt.Fprintln(w, "### Model broker: direct vs through the gateway (Anthropic Messages, fake upstream: first event at 10 ms, 10 deltas, 20 ms in all)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| metric | direct | bare Go proxy | cordon | bare − direct | cordon − direct | target (cordon) | |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	lat := func(label, ph string, pick func(*result) float64, target float64) {
		d, b, c := pick(get(ph, "direct")), pick(get(ph, "bare")), pick(get(ph, "cordon"))
		t, ok := "", ""
		if target > 0 {
			t, ok = "≤ +"+strconv.FormatFloat(target, 'f', -1, 64)+" ms", yes(c-d <= target)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %+.3f | %+.3f | %s | %s |\n", label, f3(d), f3(b), f3(c), b-d, c-d, t, ok)
	}
	p50 := func(r *result) float64 { return r.Latency.P50 }
	p99 := func(r *result) float64 { return r.Latency.P99 }
	t50 := func(r *result) float64 {
		if r.TTFB == nil {
			return math.NaN()
		}
		return r.TTFB.P50
	}
	t99 := func(r *result) float64 {
		if r.TTFB == nil {
			return math.NaN()
		}
		return r.TTFB.P99
	}
	lat("streamed, c=1: latency p50 ms", "model-stream-c1", p50, 0.1)
	lat("streamed, c=1: latency p99 ms", "model-stream-c1", p99, 1)
	lat("streamed, c=1: time to first byte p50 ms", "model-stream-c1", t50, 0)
	lat("streamed, c=1: time to first byte p99 ms", "model-stream-c1", t99, 0)
	step := func(name string, q func(stats) float64) func(*result) float64 {
		return func(r *result) float64 {
			st, ok := r.Steps[name]
			if !ok {
				return math.NaN()
			}
			return q(st)
		}
	}
	q50 := func(s stats) float64 { return s.P50 }
	q99 := func(s stats) float64 { return s.P99 }
	lat("streamed, c=1: last event → end of stream p50 ms", "model-stream-c1", step("eof_after_last_byte", q50), 0)
	lat("streamed, c=1: last event → end of stream p99 ms", "model-stream-c1", step("eof_after_last_byte", q99), 0)
	lat("JSON, c=1: latency p50 ms", "model-json-c1", p50, 0.1)
	lat("JSON, c=1: latency p99 ms", "model-json-c1", p99, 1)
	lat("JSON, c=1: first body byte p50 ms", "model-json-c1", t50, 0)
	lat("JSON, c=1: last byte → end of body p50 ms", "model-json-c1", step("eof_after_last_byte", q50), 0)
	lat("streamed, c=64: latency p50 ms", "model-stream-c64", p50, 0)
	lat("streamed, c=64: latency p99 ms", "model-stream-c64", p99, 0)
	lat("streamed, c=64: time to first byte p50 ms", "model-stream-c64", t50, 0)
	lat("streamed, c=64: last event → end of stream p50 ms", "model-stream-c64", step("eof_after_last_byte", q50), 0)
	d64, b64, c64 := get("model-stream-c64", "direct"), get("model-stream-c64", "bare"), get("model-stream-c64", "cordon")
	fmt.Fprintf(w, "| streamed, c=64: throughput req/s | %s | %s | %s | ratio %.3f | ratio %.3f | ratio ≥ 0.95 | %s |\n",
		f1(d64.RPS), f1(b64.RPS), f1(c64.RPS), b64.RPS/d64.RPS, c64.RPS/d64.RPS, yes(c64.RPS/d64.RPS >= 0.95))
	for _, ph := range []string{"model-stream-c1", "model-json-c1", "model-stream-c64"} {
		d, b, c := get(ph, "direct"), get(ph, "bare"), get(ph, "cordon")
		fmt.Fprintf(w, "| %s: proxy CPU ms/request (cordon: gateway + cordon/authority) | — | %.3f | %.3f + %.3f = %.3f | | | | |\n", ph,
			perReq(b, "bareproxy"), perReq(c, "gateway"), perReq(c, "cordon"), perReq(c, "gateway", "cordon"))
		fmt.Fprintf(w, "| %s: CPU ms/request, upstream / client | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | | | | |\n", ph,
			perReq(d, "upstream"), d.CPUms/float64(max(1, d.Requests)), perReq(b, "upstream"), b.CPUms/float64(max(1, b.Requests)),
			perReq(c, "upstream"), c.CPUms/float64(max(1, c.Requests)))
	}
	for _, ph := range []string{"model-stream-c1", "model-json-c1", "model-stream-c64"} {
		for _, p := range []string{"direct", "bare", "cordon"} {
			if r := get(ph, p); r.Errors > 0 {
				fmt.Fprintf(w, "\n%s %s: %d errors, first: %s\n", ph, p, r.Errors, r.FirstError)
			}
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### Egress: HTTPS through a CONNECT proxy (1 MiB file; bulk: 256 MiB bodies, one tunnel each; one tunnel: 64 MiB bodies back to back on one kept-alive tunnel)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| metric | direct | cordon | smokescreen | cordon / smokescreen | target: no worse than smokescreen |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	eg := func(label, ph string, pick func(*result) float64, lowerBetter bool) {
		d, c, s := pick(get(ph, "direct")), pick(get(ph, "cordon")), pick(get(ph, "smokescreen"))
		ok := "—"
		if withSmoke {
			ok = yes((lowerBetter && c <= s) || (!lowerBetter && c >= s))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.3f | %s |\n", label, f3(d), f3(c), f3(s), c/s, ok)
	}
	eg("CONNECT + TLS + 1 MiB, c=1: p50 ms", "egress-latency-c1", p50, true)
	eg("CONNECT + TLS + 1 MiB, c=1: p99 ms", "egress-latency-c1", p99, true)
	eg("downloads/s, c=1", "egress-latency-c1", func(r *result) float64 { return r.RPS }, false)
	eg("bulk, 1 tunnel: MiB/s", "egress-bulk-c1", func(r *result) float64 { return r.MiBs }, false)
	eg("bulk, 4 tunnels: MiB/s", "egress-bulk-c4", func(r *result) float64 { return r.MiBs }, false)
	proxyCPU := func(r *result) float64 {
		return r.ProcCPUms["gateway"] + r.ProcCPUms["cordon"] + r.ProcCPUms["smokescreen"]
	}
	eg("proxy CPU ms per 1 MiB download (cordon: gateway + authority)", "egress-latency-c1", func(r *result) float64 {
		return proxyCPU(r) / float64(max(1, r.Requests))
	}, true)
	eg("proxy CPU ms per GiB, bulk 4 tunnels", "egress-bulk-c4", func(r *result) float64 {
		return proxyCPU(r) / (float64(r.Bytes) / (1 << 30))
	}, true)
	eg("one tunnel for "+get("egress-long-c1", "direct").dur()+": MiB/s overall", "egress-long-c1", func(r *result) float64 { return r.MiBs }, false)
	eg("one tunnel: MiB/s in its first second", "egress-long-c1", func(r *result) float64 { return r.series(0) }, false)
	eg("one tunnel: MiB/s in its last second", "egress-long-c1", func(r *result) float64 { return r.series(-1) }, false)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Steps of one CONNECT + TLS + 1 MiB download at c=1 (httptrace in the client), p50 / p99 ms:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| step | direct | cordon | smokescreen |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, k := range []string{"1_tcp_connect", "2_connect_exchange", "3_tls_handshake", "4_request_to_first_byte", "5_body_1MiB"} {
		fmt.Fprintf(w, "| %s |", k[2:])
		for _, p := range []string{"direct", "cordon", "smokescreen"} {
			st := get("egress-latency-c1", p).Steps[k]
			fmt.Fprintf(w, " %s / %s |", f3(st.P50), f3(st.P99))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, p := range []string{"direct", "cordon", "smokescreen"} {
		r := get("egress-long-c1", p)
		fmt.Fprintf(w, "- one tunnel, %s: MiB/s each second %v", p, r.Series)
		if p == "cordon" {
			fmt.Fprintf(w, "; CPU gateway %.0f ms, cordon (authority) %.0f ms", r.ProcCPUms["gateway"], r.ProcCPUms["cordon"])
		}
		if p == "smokescreen" {
			fmt.Fprintf(w, "; CPU smokescreen %.0f ms", r.ProcCPUms["smokescreen"])
		}
		fmt.Fprintln(w)
	}
	for _, ph := range []string{"egress-latency-c1", "egress-bulk-c1", "egress-bulk-c4"} {
		if r := get(ph, "cordon"); r.ProcCPUms != nil {
			fmt.Fprintf(w, "- %s, cordon CPU: gateway %.0f ms, cordon (authority) %.0f ms; smokescreen %.0f ms\n", ph,
				r.ProcCPUms["gateway"], r.ProcCPUms["cordon"], get(ph, "smokescreen").ProcCPUms["smokescreen"])
		}
		for _, p := range []string{"direct", "cordon", "smokescreen"} {
			if r := get(ph, p); r.Errors > 0 {
				fmt.Fprintf(w, "- %s %s: %d errors, first: %s\n", ph, p, r.Errors, r.FirstError)
			}
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### Receipts of the cordon runs (duration: broker start → settled; first byte: → first byte written to the agent)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | client requests | receipts | denied | duration p50 / p99 ms | first byte p50 / p99 ms | client latency p50 / p99 ms |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, ph := range []string{"model-stream-c1", "model-json-c1", "model-stream-c64", "egress-latency-c1"} {
		c := get(ph, "cordon")
		rs := c.Receipts
		if rs == nil {
			continue
		}
		fb := "—"
		if rs.FirstByte != nil {
			fb = f3(rs.FirstByte.P50) + " / " + f3(rs.FirstByte.P99)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s / %s | %s | %s / %s |\n", ph, c.Requests, rs.N, rs.Denied,
			f3(rs.Duration.P50), f3(rs.Duration.P99), fb, f3(c.Latency.P50), f3(c.Latency.P99))
	}
	fmt.Fprintln(w)

	if len(authority) > 0 {
		var l map[string]map[string]json.RawMessage
		if json.Unmarshal(authority, &l) == nil {
			fmt.Fprintln(w, "### The authority channel alone (bench/gateway/authority: gateway.Authority on a socketpair → SQLite, as the gateway uses it)")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| path | reserve p50 / p99 µs | settle p50 / p99 µs | record p50 / p99 µs | wall µs per sequence | CPU µs per sequence |")
			fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
			pq := func(raw json.RawMessage) string {
				var q struct{ P50, P99 float64 }
				json.Unmarshal(raw, &q)
				return f1(q.P50) + " / " + f1(q.P99)
			}
			num := func(raw json.RawMessage) string {
				var x float64
				if json.Unmarshal(raw, &x) != nil {
					return "—"
				}
				return f1(x)
			}
			for _, k := range []string{"store_model_serial", "authority_model_serial", "authority_model_paced_20ms", "authority_egress_serial"} {
				m := l[k]
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", k, pq(m["reserve_us"]), pq(m["settle_us"]), pq(m["record_us"]),
					num(m["wall_us_per_seq"]), num(m["cpu_us_per_seq"]))
			}
			for _, k := range []string{"authority_model_c64", "authority_egress_c64"} {
				m := l[k]
				fmt.Fprintf(w, "| %s: ceiling %s sequences/s | | | | | %s |\n", k, num(m["seq_per_s"]), num(m["cpu_us_per_seq"]))
			}
			fmt.Fprintln(w)
			if h := l["egress_chunks_held"]; h != nil {
				fmt.Fprintln(w, "A 1 MiB egress chunk reserve and settle inside one open tunnel (since issue 10 a tunnel holds one chunk at a time; N > 0 is refused):")
				fmt.Fprintln(w)
				fmt.Fprintln(w, "| N held | reserve p50 / p99 µs | settle p50 / p99 µs |")
				fmt.Fprintln(w, "| --- | --- | --- |")
				var keys []int
				for k := range h {
					if n, err := strconv.Atoi(k); err == nil {
						keys = append(keys, n)
					}
				}
				slices.Sort(keys)
				for _, n := range keys {
					var m map[string]json.RawMessage
					json.Unmarshal(h[strconv.Itoa(n)], &m)
					fmt.Fprintf(w, "| %d | %s | %s |\n", n, pq(m["reserve_us"]), pq(m["settle_us"]))
				}
				var all struct {
					N  int
					Ms float64
				}
				json.Unmarshal(h["settle_all"], &all)
				fmt.Fprintf(w, "\nClosing that tunnel settles its %d held chunks: %.0f ms of authority round trips.\n\n", all.N, all.Ms)
			}
		}
	}
}

func (r *result) dur() string {
	return strconv.FormatFloat(math.Round(r.ElapsedS), 'f', 0, 64) + " s"
}

// series returns the i-th per-second MiB/s (negative: from the end).
func (r *result) series(i int) float64 {
	if len(r.Series) == 0 {
		return math.NaN()
	}
	if i < 0 {
		i += len(r.Series)
	}
	return r.Series[max(0, min(i, len(r.Series)-1))]
}
