package probes

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
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
		ID:      "tenant.state",
		Class:   record.CrossTenant,
		Clause:  "§2.5 cross-tenant: another workload's state is denied and indistinguishable from absent",
		Title:   "a read of another workload's state key through the state broker is recorded exactly like a read of a key nobody wrote; the owner reads it back",
		Timeout: 60 * time.Second,
		Run:     tenantState,
	})
	conformance.Register(conformance.Probe{
		ID:      "tenant.workspace",
		Class:   record.CrossTenant,
		Clause:  "§2.5 cross-tenant: another sandbox's workspace is denied",
		Title:   "a sandbox never opens a running sandbox's workspace file (by host path, through /proc/PID/root, or its own /workspace); the owner does",
		Timeout: 60 * time.Second,
		Run:     tenantWorkspace,
	})
	for _, what := range []string{"receipts", "approvals"} {
		conformance.Register(conformance.Probe{
			ID:     "tenant." + what,
			Class:  record.CrossTenant,
			Clause: "§2.5 cross-tenant: another tenant's " + what + " are denied and indistinguishable from absent",
			Title:  "a tenant cannot read another tenant's " + what,
			Run: func(context.Context, *conformance.Env) conformance.Outcome {
				return conformance.Outcome{NotEvidenced: "no per-tenant view of " + what + " exists to probe: they are read from the host's store only, " +
					"by root (cordon " + what + ", the approval console's operator token); neither a sandbox nor the daemon's socket serves them to a tenant"}
			},
		})
	}
}

// stateReceipt is the part of a state receipt the probe compares.
type stateReceipt struct {
	Identity struct {
		Workload string `json:"workload"`
	} `json:"identity"`
	Action   string `json:"action"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
	BytesOut int64  `json:"bytes_out"`
	Status   int    `json:"upstream_status"`
}

// answer is how the trusted side answered a read, as its receipt says.
func (r stateReceipt) answer() string {
	return fmt.Sprintf("decision=%s reason=%q rule=%q bytes_out=%d", r.Decision, r.Reason, r.Rule, r.BytesOut)
}

// tenantState: workload A writes a key; workload B (same tenant, other
// workload: the state broker's scope) reads A's key and a key nobody
// wrote; A reads its key back (the control). From the host's store: the
// receipt of B's foreign read answers exactly like the one of the absent
// key, and carried no byte; A's read was allowed and carried the value.
// The programs' own view of the responses is the hint.
func tenantState(ctx context.Context, e *conformance.Env) conformance.Outcome {
	st := e.StateDir()
	cfg := func(workload string) (string, error) {
		return probeFile(e, workload+".yaml", fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: conformance\npurpose: testing\n"+
			"state: {quota_bytes: 4096, quota_entries: 10, max_value_bytes: 1KiB}\n", workload), 0o600)
	}
	cfgA, err := cfg("conformance-tenant-a")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfgB, err := cfg("conformance-tenant-b")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	value := "tenant-a-" + randomHex(8)
	key, absent := "notes/"+randomHex(4), "notes/never-"+randomHex(4)
	get := func(k string) string {
		return conformance.ProbeBin + ` __probe request GET '$CORDON_STATE_URL/` + k + `'`
	}
	run := func(cfg, script string) (conformance.RunResult, error) {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg, "--ro", e.Bin + ":" + conformance.ProbeBin},
			Argv: []string{"/bin/sh", "-c", script}})
		if err == nil && r.Code != 0 {
			err = fmt.Errorf("run %q: exit %d: %s", script, r.Code, firstLineOf(r.Stderr))
		}
		return r, err
	}
	if _, err := run(cfgA, conformance.ProbeBin+` __probe request PUT '$CORDON_STATE_URL/`+key+`' `+value); err != nil {
		return conformance.Outcome{Err: err}
	}
	rb, err := run(cfgB, get(key)+"; "+get(absent))
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := run(cfgA, get(key)); err != nil {
		return conformance.Outcome{Err: err}
	}
	rcs, err := e.Cordon(ctx, st, "receipts", "--json", "--broker", "state")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	find := func(workload, target string) (stateReceipt, bool) {
		for _, l := range strings.Split(rcs.Stdout, "\n") {
			var r stateReceipt
			if json.Unmarshal([]byte(l), &r) == nil && r.Identity.Workload == workload && r.Target == target && r.Action == "get" {
				return r, true
			}
		}
		return stateReceipt{}, false
	}
	foreign, ok1 := find("conformance-tenant-b", key)
	never, ok2 := find("conformance-tenant-b", absent)
	own, ok3 := find("conformance-tenant-a", key)
	if !ok1 || !ok2 || !ok3 {
		return conformance.Outcome{Err: fmt.Errorf("the store lacks a read's receipt (foreign %v, absent %v, own %v):\n%s", ok1, ok2, ok3, rcs.Stdout)}
	}
	return conformance.Outcome{Hint: strings.TrimSpace(rb.Stdout), Facts: []record.Fact{
		{Name: "workload B's read of workload A's key, as recorded", Want: never.answer() + " (the never-written key's)", Got: foreign.answer(),
			OK: foreign.answer() == never.answer() && foreign.Decision == "deny", Source: "cordon receipts --json --broker state (the host's store)"},
		{Name: "bytes of A's value sent to workload B", Want: "0", Got: strconv.FormatInt(foreign.BytesOut, 10), OK: foreign.BytesOut == 0,
			Source: "cordon receipts --json --broker state (the host's store)"},
		{Name: "workload A's read of its own key, as recorded", Want: fmt.Sprintf("allow, %d bytes", len(value)), Got: fmt.Sprintf("%s, %d bytes", own.Decision, own.BytesOut),
			OK: own.Decision == "allow" && own.BytesOut == int64(len(value)), Source: "cordon receipts --json --broker state (the host's store)", Control: true},
	}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tenantWorkspace: sandbox A holds with its workspace; sandbox B tries
// A's file by its host path, through A's /proc/PID/root and at its own
// /workspace. The host watches the file with inotify: A's read opened it
// (the control); during B's run nothing did. The programs' reports are
// the hint.
func tenantWorkspace(ctx context.Context, e *conformance.Env) conformance.Outcome {
	wsA, err := ownedWorkspace(e, "ws-a")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	wsB, err := ownedWorkspace(e, "ws-b")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	secret := filepath.Join(wsA, "secret")
	if err := os.WriteFile(secret, []byte("sandbox-a-"+randomHex(8)), 0o600); err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := os.Chown(secret, workspaceOwner, workspaceOwner); err != nil {
		return conformance.Outcome{Err: err}
	}
	w, err := watchOpens(secret)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	defer w.close()
	st := e.StateDir()
	a, err := e.Start(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--workspace", wsA}, Op: []string{"hold", "reads", "/workspace/secret"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	_, progA, err := a.Pids()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	byA := w.opens()
	viaProc := fmt.Sprintf("/proc/%d/root/workspace/secret", progA)
	rb, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--workspace", wsB}, Op: []string{"reads", secret, viaProc, "/workspace/secret"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	byB := w.opens()
	aliveA := a.Op.OK
	if _, _, err := a.Pids(); err != nil {
		aliveA = false
	}
	if _, err := a.Finish(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: rb.Hint(), Facts: []record.Fact{
		{Name: "opens of sandbox A's workspace file while sandbox B tried it (host path, " + viaProc + ", /workspace)", Want: "0", Got: strconv.Itoa(byB), OK: byB == 0,
			Source: "inotify IN_OPEN on the file, on the host"},
		{Name: "sandbox B's run", Want: "exit 0 (it ran its attempts)", Got: fmt.Sprintf("exit %d", rb.Code), OK: rb.Code == 0, Source: "cordon run's exit status"},
		{Name: "opens of the file by sandbox A reading its own /workspace/secret", Want: "at least 1", Got: strconv.Itoa(byA), OK: byA >= 1 && aliveA,
			Source: "inotify IN_OPEN on the file, on the host", Control: true},
	}}
}

// workspaceOwner owns the probes' workspaces (cordon refuses a workspace
// root owns; any unprivileged uid does).
const workspaceOwner = 2345

func ownedWorkspace(e *conformance.Env, name string) (string, error) {
	d := filepath.Join(e.Dir, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", err
	}
	return d, os.Chown(d, workspaceOwner, workspaceOwner)
}

// openWatch counts the opens of one file, seen by inotify on the host.
type openWatch struct {
	fd    int
	count int
}

func watchOpens(path string) (*openWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", path, err)
	}
	return &openWatch{fd: fd}, nil
}

// opens drains the events queued so far and returns how many opens came
// since the last call.
func (w *openWatch) opens() int {
	time.Sleep(50 * time.Millisecond)
	buf := make([]byte, 4096)
	n0 := w.count
	for {
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, then name.
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := binary.NativeEndian.Uint32(buf[off+12:])
			if mask&unix.IN_OPEN != 0 {
				w.count++
			}
			off += unix.SizeofInotifyEvent + int(nameLen)
		}
	}
	return w.count - n0
}

func (w *openWatch) close() { unix.Close(w.fd) }
