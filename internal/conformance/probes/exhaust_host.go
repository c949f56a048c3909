package probes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
)

// Host-side observers shared by the stale-state, cross-tenant and
// exhaustion probes: they read only /proc, the cgroup tree and files the
// probe created.

// exitOutcome is the part of `cordon run --json`'s outcome the probes read.
type exitOutcome struct {
	SandboxID   string `json:"sandbox_id"`
	ExitCode    int    `json:"exit_code"`
	Signal      int    `json:"signal"`
	OOM         bool   `json:"oom"`
	FailureKind string `json:"failure_kind"`
}

// parseExitOutcome parses r's --json outcome; a run that wrote none is an error
// (cordon itself did not finish).
func parseExitOutcome(r conformance.RunResult) (exitOutcome, error) {
	var o exitOutcome
	if len(r.Outcome) == 0 {
		return o, fmt.Errorf("cordon run (exit %d) wrote no --json outcome: %s", r.Code, firstLineOf(r.Stderr))
	}
	if err := json.Unmarshal(r.Outcome, &o); err != nil {
		return o, fmt.Errorf("cordon run --json outcome: %v", err)
	}
	return o, nil
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// sandboxCgroups lists the cgroup directories of sandbox id on the host,
// in every hierarchy (v1 controllers, the unified tree, pure v2).
func sandboxCgroups(id string) []string {
	if id == "" {
		return nil
	}
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/cordon/" + id, "/sys/fs/cgroup/*/cordon/" + id} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// procStamp is a process as the host's /proc shows it: the pid and its
// start time (field 22 of stat), which tells a reused pid apart.
type procStamp struct {
	Pid   int
	Start string
}

// readProcStamp reads pid's start time and state from the host's /proc.
func readProcStamp(pid int) (p procStamp, state string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return p, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return p, "", false
	}
	return procStamp{Pid: pid, Start: f[19]}, f[0], true
}

// running reports whether p still runs (same pid and start, not a zombie).
func (p procStamp) running() bool {
	now, state, ok := readProcStamp(p.Pid)
	return ok && now.Start == p.Start && state != "Z"
}

// descendants lists the running processes below pid on the host (its
// children, theirs, ...), read from /proc.
func descendants(pid int) []procStamp {
	var out []procStamp
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range conformance.ChildPids(p) {
			if hp, state, ok := readProcStamp(c); ok && state != "Z" {
				out = append(out, hp)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// stillRunning lists the processes of ps that still run.
func stillRunning(ps []procStamp) []int {
	var out []int
	for _, p := range ps {
		if p.running() {
			out = append(out, p.Pid)
		}
	}
	return out
}

// startRefused is an error when cordon refused to start the run (exit
// 125: a configuration, provider or gateway failure): nothing the probe
// meant to observe happened.
func startRefused(r conformance.RunResult) error {
	if r.Code == 125 {
		return fmt.Errorf("cordon refused to start the run (exit 125): %s", firstLineOf(r.Stderr))
	}
	return nil
}
