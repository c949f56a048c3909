package probes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/hostmgr"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "tenant.sandboxes",
		Class:   record.CrossTenant,
		Clause:  "§2.5 cross-tenant, §3 foreign access denied indistinguishably: another user's sandboxes answer as absent",
		Title:   "through the daemon, a user's status, exec, stop and rm of another user's sandbox answer exactly like a nonexistent name and change nothing; the owner sees it",
		Daemon:  true,
		Timeout: 90 * time.Second,
		Run:     tenantSandboxes,
	})
}

// The probe's two throwaway users: uids no account is likely to have,
// one group the daemon's socket admits (--group).
const (
	ownerUID, otherUID, usersGID = 61000, 61001, 61000
)

// asUser runs a cordon client command against d as uid (group usersGID).
func asUser(ctx context.Context, e *conformance.Env, d *conformance.Daemon, uid uint32, args ...string) (conformance.RunResult, error) {
	g := []string{"--state-dir", d.StateDir}
	if e.Provider != "" {
		g = append(g, "--provider", e.Provider)
	}
	cmd := exec.CommandContext(ctx, e.Bin, append(g, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CORDON_SOCKET=" + d.Socket}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: usersGID}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return conformance.RunResult{}, ctx.Err()
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return conformance.RunResult{}, err
	}
	return conformance.RunResult{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}, nil
}

// tenantSandboxes: a daemon whose socket admits a group; user A creates
// and starts a sandbox. User B's status, exec, stop and rm of it get the
// same exit status and message (the name swapped) as for a name nobody
// created, and B's listing does not show it. From the host: after B's
// attempts A's sandbox's init still runs and the daemon still lists it as
// running. Control: A's status of it succeeds.
func tenantSandboxes(ctx context.Context, e *conformance.Env) conformance.Outcome {
	d, err := e.DaemonWith(ctx, "--group", strconv.Itoa(usersGID))
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	// The users must reach the socket (the group's, 0660): its directory
	// becomes traversable; the ones above it (the probe's Dir, a temp
	// dir) already are.
	if err := os.Chmod(filepath.Dir(d.Socket), 0o711); err != nil {
		return conformance.Outcome{Err: err}
	}
	const box, nobody = "tenant-box", "tenant-nobox"
	create := []string{"sandbox", "create", box}
	if e.Profile != "" {
		create = append(create, "--profile", e.Profile)
		if e.Profile == string(hostmgr.FullControlLab) {
			create = append(create, "--accept", hostmgr.AcceptPhrase(box))
		}
	}
	if e.Level != "" {
		create = append(create, "--level", e.Level)
	}
	for _, args := range [][]string{append(create, "--", "/bin/sleep", "1000"), {"sandbox", "start", box}} {
		r, err := asUser(ctx, e, d, ownerUID, args...)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		if r.Code != 0 {
			return conformance.Outcome{Err: fmt.Errorf("user %d: %v: exit %d: %s", ownerUID, args, r.Code, firstLineOf(r.Stderr))}
		}
	}
	var facts []record.Fact
	var hint []string
	for _, op := range [][]string{{"status"}, {"exec", "--", "/bin/true"}, {"stop"}, {"rm"}} {
		answer := func(name string) (string, error) {
			args := append([]string{"sandbox", op[0], name}, op[1:]...)
			r, err := asUser(ctx, e, d, otherUID, args...)
			return fmt.Sprintf("exit %d: %s", r.Code, strings.ReplaceAll(strings.TrimSpace(r.Stderr+r.Stdout), name, "NAME")), err
		}
		foreign, err := answer(box)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		absent, err := answer(nobody)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		hint = append(hint, op[0]+": "+foreign)
		facts = append(facts, record.Fact{Name: "another user's sandbox " + op[0] + " of it", Want: absent + " (a nonexistent name's answer)", Got: foreign,
			OK: foreign == absent, Source: "the daemon's answers to a client running as uid " + strconv.Itoa(otherUID)})
	}
	ls, err := asUser(ctx, e, d, otherUID, "sandbox", "ls", "--json")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	facts = append(facts, record.Fact{Name: "another user's sandbox ls", Want: "does not list " + box, Got: strings.TrimSpace(ls.Stdout),
		OK: ls.Code == 0 && !strings.Contains(ls.Stdout, box), Source: "the daemon's answer to a client running as uid " + strconv.Itoa(otherUID)})
	all, err := lsSandboxes(ctx, d)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	s := all[box]
	running := false
	if p, _, ok := readProcStamp(s.InitPid); ok && s.InitPid > 0 {
		running = p.running()
	}
	facts = append(facts, record.Fact{Name: "the owner's sandbox after the other user's stop and rm", Want: "running, init alive",
		Got: fmt.Sprintf("%s, init %d alive=%v", s.State, s.InitPid, running), OK: s.State == "running" && running, Source: "root's sandbox ls --json and the host's /proc"})
	own, err := asUser(ctx, e, d, ownerUID, "sandbox", "status", box)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	facts = append(facts, record.Fact{Name: "the owner's sandbox status of it", Want: "exit 0", Got: fmt.Sprintf("exit %d: %s", own.Code, firstLineOf(own.Stderr)),
		OK: own.Code == 0, Source: "the daemon's answer to a client running as uid " + strconv.Itoa(ownerUID), Control: true})
	return conformance.Outcome{Hint: strings.Join(hint, "\n"), Facts: facts}
}
