package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Issue 9 item 1: root writes the --evidence record, often into the
// workspace the program owned until a moment ago. Each case has the
// program aim that write at a host file or directory; the host side then
// checks that the host target is unchanged, that cordon said why it
// refused, and (control) that the same run without the attack writes the
// record where asked.
func TestEvidenceWriteNeverFollowsTheSandbox(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	st := newStateDir(t)

	// The host targets: a root-only file and a root-only directory
	// outside the workspace.
	host := t.TempDir()
	victim := filepath.Join(host, "victim")
	const secret = "host file, not for the sandbox\n"
	if err := os.WriteFile(victim, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	hostDir := filepath.Join(host, "dir")
	if err := os.Mkdir(hostDir, 0o700); err != nil {
		t.Fatal(err)
	}
	hostUnchanged := func(t *testing.T) {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != secret {
			t.Errorf("host file %s = %q (%d bytes), %v after the run; want it unchanged", victim, b[:min(len(b), 60)], len(b), err)
		}
		if fi, _ := os.Stat(victim); fi == nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("host file %s mode changed: %v", victim, fi)
		}
		if ents, _ := os.ReadDir(hostDir); len(ents) != 0 {
			t.Errorf("host dir %s holds %v after the run; want it empty", hostDir, ents)
		}
	}

	tests := []struct {
		name     string
		evidence string // relative to the workspace
		script   string // the program, in the workspace; $V is the host file, $D the host dir
		refused  string // "" when the record must be written; else words stderr must hold
		check    func(t *testing.T, ws string)
	}{
		{
			name:     "control: no attack",
			evidence: "ev.json",
			script:   "true",
		},
		{
			// The reproduction from the issue: the old code opened
			// PATH.tmp, following the link. The record is written
			// correctly and the planted link is left alone.
			name:     "symlink planted at PATH.tmp",
			evidence: "ev.json",
			script:   `ln -s "$V" ev.json.tmp`,
			check: func(t *testing.T, ws string) {
				if l, err := os.Readlink(filepath.Join(ws, "ev.json.tmp")); err != nil || l != victim {
					t.Errorf("the program's link ev.json.tmp = %q, %v; want it to point at %s (the attack did not happen)", l, err, victim)
				}
			},
		},
		{
			name:     "symlink at the record's path",
			evidence: "ev.json",
			script:   `ln -s "$V" ev.json`,
			refused:  "symlink",
		},
		{
			name:     "dangling symlink at the record's path",
			evidence: "ev.json",
			script:   `ln -s "$D/new" ev.json`,
			refused:  "symlink",
		},
		{
			name:     "FIFO at the record's path",
			evidence: "ev.json",
			script:   `mkfifo ev.json`,
			refused:  "not a regular file",
		},
		{
			name:     "directory at the record's path",
			evidence: "ev.json",
			script:   `mkdir ev.json`,
			refused:  "not a regular file",
		},
		{
			// The parent directory swapped for a symlink to a host
			// directory during the run.
			name:     "parent directory swapped for a symlink",
			evidence: "sub/ev.json",
			script:   `mv sub sub2 && ln -s "$D" sub`,
			refused:  "symlink",
		},
		{
			name:     "grandparent swapped for a symlink",
			evidence: "a/b/ev.json",
			script:   `mv a a2 && ln -s "$D" a`,
			refused:  "symlink",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := filepath.Join(t.TempDir(), "ws")
			mustMkdirOwned(t, ws, 2345)
			for _, d := range []string{"sub", "a", "a/b"} {
				mustMkdirOwned(t, filepath.Join(ws, d), 2345)
			}
			ev := filepath.Join(ws, tt.evidence)
			r := runCordon(t, st, runOpts{}, "run", "--json", "--workspace", ws, "--evidence", ev,
				"--env", "V="+victim, "--env", "D="+hostDir, "--", "/bin/sh", "-c", tt.script)
			hostUnchanged(t)
			if tt.refused == "" {
				if r.Code != 0 {
					t.Fatalf("cordon run %q = %d, want 0\nstderr: %s", tt.script, r.Code, r.Stderr)
				}
				fi, err := os.Lstat(ev)
				if err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("--evidence %s after the run: %v, %v; want a regular file", ev, fi, err)
				}
				if rec := readEvidenceFile(t, ev); rec.SandboxID != r.Outcome.SandboxID || rec.Outcome == nil {
					t.Errorf("--evidence %s holds sandbox %q (outcome %v), want %q with its outcome", ev, rec.SandboxID, rec.Outcome, r.Outcome.SandboxID)
				}
			} else {
				if r.Code != 125 || r.Outcome.FailureKind != "policy_rejected" || !strings.Contains(r.Stderr, tt.refused) || !strings.Contains(r.Stderr, "evidence") {
					t.Errorf("cordon run %q = %d, failure_kind %q, stderr %q; want 125, policy_rejected, naming the evidence write and %q", tt.script, r.Code, r.Outcome.FailureKind, r.Stderr, tt.refused)
				}
				if r.Outcome.SandboxID == "" {
					t.Errorf("cordon run %q: no sandbox id; the program did not run, so the attack was not tried", tt.script)
				}
			}
			// No temporary file is left anywhere in the workspace.
			_ = filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), ".tmp-") {
					t.Errorf("temporary file %s left behind", p)
				}
				return nil
			})
			if tt.check != nil {
				tt.check(t, ws)
			}
		})
	}

	// A symlink already at the path, or in the path, is refused before
	// anything runs.
	t.Run("refused before the run", func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "ev.json")
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
		linkDir := filepath.Join(dir, "d")
		if err := os.Symlink(hostDir, linkDir); err != nil {
			t.Fatal(err)
		}
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, ev := range []string{link, filepath.Join(linkDir, "ev.json"), fifo} {
			r := runCordon(t, st, runOpts{}, "run", "--json", "--evidence", ev, "--", "/bin/true")
			if r.Code != 125 || r.Outcome.SandboxID != "" || !strings.Contains(r.Stderr, "evidence") {
				t.Errorf("cordon run --evidence %s = %d, sandbox %q, stderr %q; want 125 before any sandbox, naming --evidence", ev, r.Code, r.Outcome.SandboxID, r.Stderr)
			}
		}
		hostUnchanged(t)
	})
	requireNoResidue(t, st)
}
