package probes

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.secret.custodied-key",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: custodied credentials",
		Title:  "the custodied model key is in neither the program's nor its init's environment, nor anything the program can read or print",
		Run:    custodiedKeyBypass,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.proc.host-facts",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: host facts through /proc",
		Title:  "host facts in /proc (kernel command line, interrupts, block devices, memory map, swaps, locks, timers) read empty in the sandbox's /proc",
		Run:    hostFacts,
	})
}

// custodiedKeyBypass: with a model route whose key the config custodies, the
// program reads its own environ and the key file's host path, and holds
// (not /proc/1/environ: under a provider that isolates nothing that is
// the host init's, and the hint would carry it into the record); the host reads the program's
// and the init's /proc/PID/environ and everything the run printed: no key.
// Controls: the same environ reading sees the gateway's placeholder (the
// reading works), and the same read op on the host gets the key from the
// key file.
func custodiedKeyBypass(ctx context.Context, e *conformance.Env) conformance.Outcome {
	up := fixture.NewModelUpstream(custodiedKey, "x")
	e.Cleanup(up.Close)
	cfg, err := gatewayConfig(e, up.URL(), "")
	if err != nil {
		return broke(err)
	}
	keyFile := e.Dir + "/upstream-key"
	// With a gateway cordon has more children than the init: the program
	// is found by a unique word in its arguments, the init as its parent.
	mark := "/cordon-conformance-mark-" + randToken(8)
	h, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--config", cfg},
		Op: []string{"hold", "reads", "/proc/self/environ", keyFile, mark}})
	if err != nil {
		return broke(err)
	}
	prog := pidWithArgs(mark)
	initPid, err := parentPid(prog)
	if err != nil {
		return broke(fmt.Errorf("the held program (pid %d): %w", prog, err))
	}
	progEnv, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", prog))
	if err != nil {
		return broke(err)
	}
	initEnv, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", initPid))
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	printed := r.Stdout + r.Stderr + string(r.Outcome)
	hr, err := e.HostOp(ctx, "reads", keyFile)
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the custodied key in the program's environment", "absent", seenOrNot(string(progEnv), custodiedKey), !strings.Contains(string(progEnv), custodiedKey), fmt.Sprintf("/proc/%d/environ on the host", prog)),
		fact("the custodied key in the sandbox init's environment", "absent", seenOrNot(string(initEnv), custodiedKey), !strings.Contains(string(initEnv), custodiedKey), fmt.Sprintf("/proc/%d/environ on the host", initPid)),
		fact("the custodied key in what the run printed (its environ, the key file's host path)", "absent", seenOrNot(printed, custodiedKey), !strings.Contains(printed, custodiedKey), "cordon run's stdout, stderr and outcome"),
		control("the gateway's placeholder key in the program's environment, by the same reading", "present", seenOrNot(string(progEnv), "ANTHROPIC_API_KEY=sk-ant-api03-cordon-placeholder"), strings.Contains(string(progEnv), "ANTHROPIC_API_KEY=sk-ant-api03-cordon-placeholder"), fmt.Sprintf("/proc/%d/environ on the host", prog)),
		control("the custodied key read from the key file by the same op on the host", "present", seenOrNot(hr.Data, custodiedKey), strings.Contains(hr.Data, custodiedKey), "the host op's output"),
	}}
}

// hostFactPaths are /proc files that carry host facts and must read
// empty in a sandbox.
var hostFactPaths = []string{"/proc/cmdline", "/proc/interrupts", "/proc/diskstats", "/proc/partitions", "/proc/iomem",
	"/proc/swaps", "/proc/locks", "/proc/timer_list", "/proc/sched_debug", "/proc/softirqs", "/proc/zoneinfo", "/proc/vmallocinfo"}

// head reads at most 4 KiB of p: how many bytes, or the error.
func head(p string) (int, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return n, err
}

// hostFacts: the program holds; the host reads
// each through the program's root (/proc/PID/root/proc/...), that is, the
// sandbox's own /proc with its masks: zero bytes. Control: the host's own
// copy of each has content (the reading would see a leak).
func hostFacts(ctx context.Context, e *conformance.Env) conformance.Outcome {
	// The program only holds: what it would read of these files is a
	// hint, and under a provider that isolates nothing it would carry
	// host facts into the record.
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "ids"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	var leaked, empty, hostFull, hostEmpty []string
	for _, p := range hostFactPaths {
		hn, herr := head(p)
		if herr != nil || hn == 0 {
			hostEmpty = append(hostEmpty, p)
			continue // nothing on this host to leak
		}
		hostFull = append(hostFull, p)
		n, err := head(fmt.Sprintf("/proc/%d/root%s", prog, p))
		if err == nil && n == 0 {
			empty = append(empty, p)
		} else {
			leaked = append(leaked, fmt.Sprintf("%s (%d bytes, %v)", p, n, err))
		}
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("host-fact files with content in the sandbox's /proc", "none", strings.Join(leaked, ", "), len(leaked) == 0 && len(empty) > 0, fmt.Sprintf("reads of /proc/%d/root/proc/... on the host (%d read empty)", prog, len(empty))),
		control("the same files on the host", "content", fmt.Sprintf("%d with content, %d empty or absent here", len(hostFull), len(hostEmpty)), len(hostFull) > 0, "reads of /proc on the host"),
	}}
}
