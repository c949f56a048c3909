package linux

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// evidence reads the live sandbox and builds its record. The limits come
// from the cgroup filesystem, read back by the trusted side.
func (sb *linuxSandbox) evidence(in evidence.Inputs) *evidence.Record {
	in.Resource = sb.limitChecks()
	b := evidence.Collect(in)
	engineNet := sb.engineNetEvidence(b)
	level, mode := evidence.Admit(b)
	rec := &evidence.Record{
		Schema: evidence.Schema, SandboxID: sb.spec.ID, Workload: sb.spec.Workload,
		LevelRequested: sb.spec.Level, LevelAdmitted: level, EnforcementMode: mode,
		Boundaries: b, Host: hostFacts(sb.p.layout),
		Provider:      evidence.Provider{Name: ProviderName, Version: ProviderVersion},
		CordonSHA256:  sb.p.opts.CordonSHA256,
		SeccompSHA256: sb.prog.SHA256,
		Lease:         evidence.LeaseFacts{UID: sb.rec.Lease.UID, GID: sb.rec.Lease.GID, Size: sb.rec.Lease.Size},
		TCB:           evidence.TCB, Assumptions: evidence.Assumptions, NonClaims: evidence.NonClaims,
		CreatedAt: sb.created.UTC(), CollectedAt: time.Now().UTC(),
	}
	if engineNet != "" {
		rec.NonClaims = append(slices.Clone(rec.NonClaims), engineNet)
	}
	return rec
}

// judgeInSitu judges the in-situ set from its traces and admits again:
// a boundary with a failed in-situ check is not verified. attemptUS is
// the init's own measure of the attempts (a timing, not evidence).
func (sb *linuxSandbox) judgeInSitu(rec *evidence.Record, ins *evidence.InSituHost, attemptUS int64) {
	s := ins.Judge(evidence.InSituInputs{
		Pid: sb.cmd.Process.Pid, ProbeDir: sbinit.ProbeDir, Write: sbinit.InSituWrite, Control: sbinit.InSituControl,
		Route: sbinit.InSituRoute, RoutePort: sbinit.InSituPort,
	})
	s.AttemptMicros = attemptUS
	rec.InSitu = s
	evidence.ApplyInSitu(rec.Boundaries, s)
	rec.LevelAdmitted, rec.EnforcementMode = evidence.Admit(rec.Boundaries)
}

func (sb *linuxSandbox) limitChecks() []evidence.Check {
	src := strings.Join(sb.cg.Dirs(), " ")
	f, err := sb.cg.ReadBack()
	if err != nil {
		return []evidence.Check{{Name: "cgroup_limits", Want: "readable", Got: "unreadable: " + err.Error(), Source: src}}
	}
	want := cgroup.Limits{MemoryBytes: sb.spec.Limits.MemoryBytes, Pids: sb.spec.Limits.Pids, CPUs: sb.spec.Limits.CPUs, TCPBytes: sb.tcpBytes}
	b, err := os.ReadFile("/proc/cmdline")
	return append(limitFacts(want, f, sb.cg.NoSwapAccounting(), src), kernelAccountingFact(string(b), err))
}

// kernelAccountingFact: the memory cgroup charges kernel objects (open
// files, pipe buffers, dentries, socket memory) only unless the host booted
// with cgroup.memory=nokmem or =nosocket; docs/host-pools.md relies on it.
func kernelAccountingFact(cmdline string, err error) evidence.Check {
	c := evidence.Check{Name: "kernel_memory_accounting", Want: "no cgroup.memory=nokmem or nosocket on the kernel command line", Source: "/proc/cmdline"}
	if err != nil {
		c.Got = "unreadable: " + err.Error()
		return c
	}
	c.Got, c.OK = "kernel and socket memory charged to the memory cgroup", true
	for _, f := range strings.Fields(cmdline) {
		if f == "--" {
			break // what follows is the init's, not the kernel's
		}
		if v, ok := strings.CutPrefix(f, "cgroup.memory="); ok {
			for _, o := range strings.Split(v, ",") {
				if o == "nokmem" || o == "nosocket" {
					c.Got, c.OK = f, false
				}
			}
		}
	}
	return c
}

func hostFacts(l cgroup.Layout) evidence.Host {
	h := evidence.Host{Cgroups: map[string]string{}}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.BootID = strings.TrimSpace(string(b))
	}
	for c, m := range l.Mounts {
		h.Cgroups[string(c)] = "v1"
		if m.Version == 2 {
			h.Cgroups[string(c)] = "v2"
		}
	}
	h.LandlockABI, _ = llsys.LandlockGetABIVersion()
	h.Seccomp = unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0) == nil
	return h
}

// limitFacts compares the limits read back from the cgroup files with the
// request. Swap: memory+swap must equal memory, unless the host has no
// swap at all (then there is nothing to escape to).
func limitFacts(want cgroup.Limits, f cgroup.Facts, noSwapAcct bool, src string) []evidence.Check {
	quota := int64(want.CPUs*float64(f.CPUPeriodUs) + 0.5)
	out := []evidence.Check{
		{Name: "memory_limit", Want: itoa(want.MemoryBytes), Got: itoa(f.MemoryBytes), OK: f.MemoryBytes == want.MemoryBytes, Source: f.Files["MemoryBytes"]},
		{Name: "pids_limit", Want: itoa(want.Pids), Got: itoa(f.Pids), OK: f.Pids == want.Pids, Source: f.Files["Pids"]},
		{Name: "cpu_quota", Want: itoa(quota) + "/" + itoa(f.CPUPeriodUs), Got: itoa(f.CPUQuotaUs) + "/" + itoa(f.CPUPeriodUs), OK: f.CPUPeriodUs > 0 && f.CPUQuotaUs == quota, Source: f.Files["CPUQuotaUs"]},
	}
	sw := evidence.Check{Name: "swap_bounded", Want: "memory+swap == memory (" + itoa(want.MemoryBytes) + ")", Got: itoa(f.MemswBytes), Source: f.Files["MemswBytes"]}
	switch {
	case f.MemswBytes == want.MemoryBytes:
		sw.OK = true
	case noSwapAcct || f.NoSwapAccounting:
		b, err := os.ReadFile("/proc/swaps")
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		sw.Got = "host does not account swap; /proc/swaps lists " + itoa(int64(len(lines)-1)) + " devices"
		sw.Source = "/proc/swaps"
		sw.OK = err == nil && len(lines) == 1
	}
	if sw.Source == "" {
		sw.Source = src
	}
	// TCP socket buffers: charged to the group and bounded (v1:
	// memory.kmem.tcp.limit_in_bytes, counted apart from the memory limit;
	// v2: memory.max itself).
	wantTCP := want.TCPBytes
	if wantTCP <= 0 || f.Versions[cgroup.Memory] == 2 {
		wantTCP = want.MemoryBytes
	}
	tcp := evidence.Check{Name: "tcp_memory_limit", Want: itoa(wantTCP), Got: itoa(f.TCPMemBytes), Source: f.Files["TCPMemBytes"],
		OK: wantTCP > 0 && f.TCPMemBytes == wantTCP}
	if tcp.Source == "" {
		tcp.Got, tcp.Source = "not charged: this kernel has no memory.kmem.tcp.limit_in_bytes", src
	}
	return append(out, sw, tcp)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
