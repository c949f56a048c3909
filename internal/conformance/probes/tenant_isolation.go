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
		Clause:  "§2.5 cross-tenant, §3 foreign access denied indistinguishably: another tenant's (and another workload's) state reads as absent",
		Title:   "a read of another workload's or another tenant's state key through the state broker is recorded exactly like a read of a key nobody wrote; the owner reads it back",
		Timeout: 60 * time.Second,
		Run:     tenantState,
	})
	conformance.Register(conformance.Probe{
		ID:      "tenant.workspace",
		Class:   record.CrossTenant,
		Clause:  "§2.5 cross-tenant, §2.3 tenant limits are boundary-enforced: another sandbox's workspace is denied",
		Title:   "a sandbox never opens a running sandbox's workspace file (by host path, through /proc/PID/root, or its own /workspace); the owner does",
		Timeout: 60 * time.Second,
		Run:     tenantWorkspace,
	})
}

// stateReceipt is the part of a state receipt the probe compares.
type stateReceipt struct {
	Identity struct {
		Tenant   string `json:"tenant"`
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

// tenantState: workload A of tenant T writes a key. Two readers read it
// and a key nobody wrote: workload B of the same tenant, and a workload
// of another tenant with A's very name and purpose (the state broker's
// scope is tenant, workload and purpose). A reads its key back (the
// control). From the host's store: the receipt of each foreign read
// answers exactly like the one of the absent key and carried no byte;
// A's read was allowed and carried the value. The programs' own view of
// the responses is the hint.
func tenantState(ctx context.Context, e *conformance.Env) conformance.Outcome {
	st := e.StateDir()
	type scope struct{ tenant, workload string }
	owner := scope{"conformance", "conformance-tenant-a"}
	readers := []scope{{"conformance", "conformance-tenant-b"}, {"conformance-other", "conformance-tenant-a"}}
	cfgs := map[scope]string{}
	for i, sc := range append([]scope{owner}, readers...) {
		p, err := probeFile(e, fmt.Sprintf("state%d.yaml", i), fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: %s\npurpose: testing\n"+
			"state: {quota_bytes: 4096, quota_entries: 10, max_value_bytes: 1KiB}\n", sc.workload, sc.tenant), 0o600)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		cfgs[sc] = p
	}
	value := "tenant-a-" + randomHex(8)
	key, absent := "notes/"+randomHex(4), "notes/never-"+randomHex(4)
	get := func(k string) string {
		return conformance.ProbeBin + ` __probe request GET '$CORDON_STATE_URL/` + k + `'`
	}
	var hint []string
	run := func(sc scope, script string) error {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfgs[sc], "--ro", e.Bin + ":" + conformance.ProbeBin},
			Argv: []string{"/bin/sh", "-c", script}})
		if err == nil && r.Code != 0 {
			err = fmt.Errorf("run %q: exit %d: %s", script, r.Code, firstLineOf(r.Stderr))
		}
		hint = append(hint, strings.TrimSpace(r.Stdout))
		return err
	}
	if err := run(owner, conformance.ProbeBin+` __probe request PUT '$CORDON_STATE_URL/`+key+`' `+value); err != nil {
		return conformance.Outcome{Err: err}
	}
	for _, sc := range readers {
		if err := run(sc, get(key)+"; "+get(absent)); err != nil {
			return conformance.Outcome{Err: err}
		}
	}
	if err := run(owner, get(key)); err != nil {
		return conformance.Outcome{Err: err}
	}
	rcs, err := e.Cordon(ctx, st, "receipts", "--json", "--broker", "state")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	find := func(sc scope, target string) (stateReceipt, error) {
		for _, l := range strings.Split(rcs.Stdout, "\n") {
			var r stateReceipt
			if json.Unmarshal([]byte(l), &r) == nil && r.Identity.Tenant == sc.tenant && r.Identity.Workload == sc.workload && r.Target == target && r.Action == "get" {
				return r, nil
			}
		}
		return stateReceipt{}, fmt.Errorf("the store has no receipt of %s/%s's read of %s:\n%s", sc.tenant, sc.workload, target, rcs.Stdout)
	}
	const src = "cordon receipts --json --broker state (the host's store)"
	var facts []record.Fact
	for _, sc := range readers {
		foreign, err := find(sc, key)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		never, err := find(sc, absent)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		who := fmt.Sprintf("tenant %s workload %s", sc.tenant, sc.workload)
		facts = append(facts,
			record.Fact{Name: who + " reading the owner's key, as recorded", Want: never.answer() + " (the never-written key's)", Got: foreign.answer(),
				OK: foreign.answer() == never.answer() && foreign.Decision == "deny", Source: src},
			record.Fact{Name: "bytes of the owner's value sent to " + who, Want: "0", Got: strconv.FormatInt(foreign.BytesOut, 10), OK: foreign.BytesOut == 0, Source: src})
	}
	own, err := find(owner, key)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	facts = append(facts, record.Fact{Name: "the owner's read of its own key, as recorded", Want: fmt.Sprintf("allow, %d bytes", len(value)),
		Got: fmt.Sprintf("%s, %d bytes", own.Decision, own.BytesOut), OK: own.Decision == "allow" && own.BytesOut == int64(len(value)), Source: src, Control: true})
	return conformance.Outcome{Hint: strings.Join(hint, "\n"), Facts: facts}
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
