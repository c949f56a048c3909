package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// Issue 9 item 1: root writes the --evidence record, often into the
// workspace the program owned until a moment ago. Each case has the
// program aim that write at a host file or directory; the host side then
// checks that the host target is unchanged, that cordon said why it
// refused, and (control) that the same run without the attack writes the
// record where asked.
func TestEvidenceWriteNeverFollowsTheSandbox(t *testing.T) {
	testkit.RequireRoot(t)
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

// trapReport mirrors trapscan.Report in --json and the evidence record.
type trapReport struct {
	Root      string `json:"root"`
	Sandbox   string `json:"sandbox"`
	Traps     []trap `json:"traps"`
	Entries   int    `json:"entries_scanned"`
	Truncated string `json:"truncated"`
}

type trap struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Target string `json:"target"`
}

// Issue 9 item 8: what a program leaves in its workspace that can trap the
// host user is reported after the run, from the host side, exactly; the
// socket it left makes the next run refuse, saying which path to remove.
// Control: a clean workspace, and links that stay inside, report nothing.
func TestWorkspaceTrapsReported(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	run := func(t *testing.T, ws, script string) (result, []trapReport, []trapReport) {
		t.Helper()
		ev := filepath.Join(t.TempDir(), "ev.json")
		args := []string{"run", "--ro", probeDir + ":/probe", "--json", "--workspace", ws, "--evidence", ev, "--", "/bin/sh", "-c", script}
		r := runCordon(t, st, runOpts{}, args...)
		if r.Code != 0 {
			t.Fatalf("cordon run %q = %d, want 0\nstderr: %s", script, r.Code, r.Stderr)
		}
		var out struct {
			Traps []trapReport `json:"workspace_traps"`
		}
		if err := json.Unmarshal([]byte(r.OutcomeJSON), &out); err != nil {
			t.Fatalf("--json outcome (descriptor 3): %v\n%s", err, r.OutcomeJSON)
		}
		b, err := os.ReadFile(ev)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Traps []trapReport `json:"workspace_traps"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		return r, out.Traps, rec.Traps
	}

	t.Run("control: clean workspace", func(t *testing.T) {
		ws := filepath.Join(t.TempDir(), "ws")
		mustMkdirOwned(t, ws, 2345)
		r, js, ev := run(t, ws, `mkdir -p src && echo hi > src/a && ln -s src/a ok && mkdir d && ln -s ../src d/up && ln -s ../src/a d/b && ln -s missing dangling`)
		for name, reps := range map[string][]trapReport{"--json": js, "evidence": ev} {
			if len(reps) != 1 || reps[0].Root != ws || reps[0].Sandbox != "/workspace" || len(reps[0].Traps) != 0 || reps[0].Truncated != "" || reps[0].Entries < 6 {
				t.Errorf("%s workspace_traps = %+v, want one report of %s with no traps, not truncated", name, reps, ws)
			}
		}
		if strings.Contains(r.Stderr, "trap") {
			t.Errorf("stderr mentions traps for a clean workspace: %q", r.Stderr)
		}
	})

	t.Run("each kind of trap", func(t *testing.T) {
		ws := filepath.Join(t.TempDir(), "ws")
		mustMkdirOwned(t, ws, 2345)
		// A program cannot create device nodes (no CAP_MKNOD, nodev); these
		// stand for ones that are there after the run all the same.
		if err := unix.Mknod(filepath.Join(ws, "disk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(ws, "mem"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))); err != nil {
			t.Fatal(err)
		}
		evil := "evil\x1b]0;pwned\x07"
		script := `set -e
ln -s /root/.ssh/id_rsa README.md
mkdir -p docs/deep && ln -s ../../../../etc/shadow docs/deep/notes
ln -s /etc/passwd "$(printf 'evil\033]0;pwned\007')"
echo fine > docs/ok.txt && ln -s docs/ok.txt inside
mkfifo docs/pipe
/probe/probe mksock /workspace/agent.sock >/dev/null`
		r, js, ev := run(t, ws, script)
		want := []trap{
			{Path: "README.md", Kind: "symlink_out", Target: "/root/.ssh/id_rsa"},
			{Path: "agent.sock", Kind: "socket"},
			{Path: "disk", Kind: "block_device"},
			{Path: "docs/deep/notes", Kind: "symlink_out", Target: "../../../../etc/shadow"},
			{Path: "docs/pipe", Kind: "fifo"},
			{Path: evil, Kind: "symlink_out", Target: "/etc/passwd"},
			{Path: "mem", Kind: "char_device"},
		}
		slices.SortFunc(want, func(a, b trap) int { return strings.Compare(a.Path, b.Path) })
		for name, reps := range map[string][]trapReport{"--json": js, "evidence": ev} {
			if len(reps) != 1 {
				t.Fatalf("%s workspace_traps = %+v, want one report", name, reps)
			}
			got := slices.Clone(reps[0].Traps)
			slices.SortFunc(got, func(a, b trap) int { return strings.Compare(a.Path, b.Path) })
			if !slices.Equal(got, want) {
				t.Errorf("%s traps =\n  %q\nwant\n  %q", name, got, want)
			}
		}
		// stderr names each one, escaped: no raw escape reaches the terminal.
		for _, s := range []string{"README.md", "/root/.ssh/id_rsa", "docs/deep/notes", "docs/pipe", "agent.sock", "disk", "mem", `evil\u001b]0;pwned\u0007`} {
			if !strings.Contains(r.Stderr, s) {
				t.Errorf("stderr does not name %q:\n%s", s, r.Stderr)
			}
		}
		if strings.ContainsRune(r.Stderr, 0x1b) || strings.Contains(r.Stderr, "docs/ok.txt") {
			t.Errorf("stderr holds a raw escape or the inside link:\n%q", r.Stderr)
		}
		// The socket refuses the next run; the refusal says which path to
		// remove. Once removed, the run works.
		r2 := runCordon(t, st, runOpts{}, "run", "--json", "--workspace", ws, "--", "/bin/true")
		sock := filepath.Join(ws, "agent.sock")
		if r2.Code != 125 || !strings.Contains(r2.Stderr, sock) || !strings.Contains(r2.Stderr, "remove it") {
			t.Errorf("next run = %d, stderr %q; want 125 naming %s and saying to remove it", r2.Code, r2.Stderr, sock)
		}
		// The command the refusal ends with, run as printed, removes it.
		_, cmd, ok := strings.Cut(r2.Stderr, "and run again: ")
		cmd, _, _ = strings.Cut(cmd, "\n")
		if !ok {
			t.Fatalf("no command in the refusal %q", r2.Stderr)
		}
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("the refusal's command %q: %v %s", cmd, err, out)
		}
		if _, err := os.Lstat(sock); err == nil {
			t.Fatalf("the refusal's command %q left %s", cmd, sock)
		}
		if r3 := runCordon(t, st, runOpts{}, "run", "--workspace", ws, "--", "/bin/true"); r3.Code != 0 {
			t.Errorf("run after removing the socket = %d, want 0\nstderr: %s", r3.Code, r3.Stderr)
		}
	})
	requireNoResidue(t, st)
}

// Daemon sandboxes: the workspace is scanned when the sandbox stops; the
// stop reply lists the traps exactly (--json) and stderr names them.
// Control: a sandbox whose program leaves nothing reports none.
func TestDaemonWorkspaceTrapsAtStop(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	for _, tt := range []struct {
		name, script string
		want         []trap
	}{
		{"clean", "mkdir -p src && echo x > src/a && ln -s src/a ok; exec sleep 1000", nil},
		{"traps", "ln -s /root/.ssh/id_rsa README.md && mkfifo pipe; exec sleep 1000", []trap{
			{Path: "README.md", Kind: "symlink_out", Target: "/root/.ssh/id_rsa"},
			{Path: "pipe", Kind: "fifo"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := userWorkspace(t)
			if r := d.cli("sandbox", "create", tt.name, "--workspace", ws, "--", "/bin/sh", "-c", tt.script); r.Code != 0 {
				t.Fatalf("create: %d %s %s", r.Code, r.Stdout, r.Stderr)
			}
			if r := d.cli("sandbox", "start", tt.name); r.Code != 0 {
				t.Fatalf("start: %d %s", r.Code, r.Stderr)
			}
			waitFor(t, func() bool {
				_, err := os.Lstat(filepath.Join(ws, map[bool]string{true: "ok", false: "pipe"}[tt.want == nil]))
				return err == nil
			}, "the program's files")
			r := d.cli("sandbox", "stop", "--json", tt.name)
			if r.Code != 0 {
				t.Fatalf("stop: %d %s", r.Code, r.Stderr)
			}
			var info struct {
				Traps []trapReport `json:"workspace_traps"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &info); err != nil {
				t.Fatalf("stop --json: %v\n%s", err, r.Stdout)
			}
			if len(info.Traps) != 1 || info.Traps[0].Truncated != "" {
				t.Fatalf("stop --json workspace_traps = %+v, want one complete report", info.Traps)
			}
			got := info.Traps[0].Traps
			slices.SortFunc(got, func(a, b trap) int { return strings.Compare(a.Path, b.Path) })
			if len(got) != len(tt.want) || (len(got) > 0 && !slices.Equal(got, tt.want)) {
				t.Errorf("stop --json traps = %q, want %q", got, tt.want)
			}
			if r := d.cli("sandbox", "rm", tt.name); r.Code != 0 {
				t.Fatalf("rm: %d %s", r.Code, r.Stderr)
			}
		})
	}
}

// Attack review of item 8: the traps a daemon sandbox's program left are
// the program's bytes, and the daemon kept them all and put them in every
// reply about the sandbox. Replies are bounded (proto.MaxFrame, 256 KiB):
// 1,000 symlinks with 300-byte targets made the stop reply, the sandbox's
// status and every `sandbox ls` that includes it (root's lists every
// sandbox) fail as too large until it was removed. Observed from the host:
// after such a stop, ls (as root) and status answer and still list the
// other sandbox; stop reports the traps it could fit and says the list was
// cut. Control: the stop reply does list traps (the scan saw them).
func TestDaemonTrapReportFitsReplies(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	if r := d.cli("sandbox", "create", "bystander", "--", "/bin/sh", "-c", "exec sleep 1000"); r.Code != 0 {
		t.Fatalf("create bystander: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	ws := userWorkspace(t)
	script := `L=/$(printf '%0300d' 0); i=0; set --
while [ $i -lt 1000 ]; do set -- "$@" "$L/t$i"; i=$((i+1)); done
ln -s "$@" . && touch done; exec sleep 1000`
	d.createStart("hog", "--workspace", ws, "--", "/bin/sh", "-c", script)
	waitFor(t, func() bool { _, err := os.Lstat(filepath.Join(ws, "done")); return err == nil }, "the program's links")
	r := d.cli("sandbox", "stop", "--json", "hog")
	if r.Code != 0 {
		t.Fatalf("stop: %d %s", r.Code, r.Stderr)
	}
	var info struct {
		Traps []trapReport `json:"workspace_traps"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &info); err != nil {
		t.Fatalf("stop --json: %v\n%s", err, r.Stdout)
	}
	if len(info.Traps) != 1 || len(info.Traps[0].Traps) == 0 || info.Traps[0].Truncated == "" {
		t.Errorf("stop --json workspace_traps = %d reports; want one listing traps and saying it was cut", len(info.Traps))
	} else if tr := info.Traps[0].Traps[0]; tr.Kind != "symlink_out" || !strings.HasSuffix(tr.Target, "/t"+strings.TrimPrefix(tr.Path, "t")) {
		t.Errorf("stop --json first trap = %+v, want one of the program's links", tr)
	}
	if r := d.cli("sandbox", "ls", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"bystander"`) || !strings.Contains(r.Stdout, `"hog"`) {
		t.Errorf("sandbox ls after the stop = %d, stdout %.300q, stderr %q; want both sandboxes listed", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "status", "hog"); r.Code != 0 {
		t.Errorf("sandbox status hog after the stop = %d, stderr %q", r.Code, r.Stderr)
	}
	for _, n := range []string{"hog", "bystander"} {
		if r := d.cli("sandbox", "rm", n); r.Code != 0 {
			t.Errorf("rm %s: %d %s", n, r.Code, r.Stderr)
		}
	}
}

// Attack review of item 8: a tool server's writable bind is a host
// directory the agent writes through tool calls, and the tool server (a
// sandbox of its own) was still running when cordon run scanned for traps:
// its binds were never scanned, and what it did after the scan went
// unreported. The agent asks the tool server for two symlinks to host
// files in its writable bind, one at once and one two seconds later, and
// exits. Observed from the host after the run: every trap in the bind is in
// --json and the evidence record (the delayed one is either not there,
// because the server was stopped first, or reported). Control: the
// immediate link is on the host and reported (the tool server did act).
func TestToolServerBindTrapsReported(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	data := t.TempDir()
	if err := os.Chown(data, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}, {source: %s, target: /data, writable: true}]
    timeout: 5s
`, probeDir, data))
	ws := filepath.Join(t.TempDir(), "ws")
	mustMkdirOwned(t, ws, 2345)
	ev := filepath.Join(t.TempDir(), "ev.json")
	script := `/probe/mcpclient call t__symlink '{"path":"/data/now","target":"/root/.ssh/id_rsa","seconds":0}' &&
/probe/mcpclient call t__symlink '{"path":"/data/later","target":"/etc/shadow","seconds":2}'`
	r := runCordon(t, st, runOpts{}, "run", "--config", cfg, "--ro", probeDir+":/probe", "--json", "--workspace", ws, "--evidence", ev, "--", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("cordon run = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	time.Sleep(3 * time.Second) // past the delayed link, had the server lived on
	var out struct {
		Traps []trapReport `json:"workspace_traps"`
	}
	if err := json.Unmarshal([]byte(r.OutcomeJSON), &out); err != nil {
		t.Fatalf("--json outcome (descriptor 3): %v\n%s", err, r.OutcomeJSON)
	}
	b, err := os.ReadFile(ev)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Traps []trapReport `json:"workspace_traps"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(data, "now")); err != nil {
		t.Fatalf("control: the tool server did not create /data/now: %v", err)
	}
	for _, name := range []string{"now", "later"} {
		target, err := os.Readlink(filepath.Join(data, name))
		if err != nil {
			continue // not on the host: nothing to report
		}
		want := trap{Path: name, Kind: "symlink_out", Target: target}
		for src, reps := range map[string][]trapReport{"--json": out.Traps, "evidence": rec.Traps} {
			found := false
			for _, rep := range reps {
				if rep.Root == data && slices.Contains(rep.Traps, want) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: the tool server's link %s -> %s in its writable bind %s is not reported: %+v", src, name, target, data, reps)
			}
		}
	}
}

// Attack review of item 8: a daemon sandbox with a writable volume and no
// workspace was never scanned at stop (the scan was tied to the
// workspace), though a volume is a host directory its owner opens and
// other sandboxes bind. Observed from the host: the program's link to a
// host file in the volume is in the stop reply. Control: the link is on
// the host, in the volume's directory.
func TestDaemonVolumeTrapsAtStop(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	if r := d.cli("volume", "create", "vol"); r.Code != 0 {
		t.Fatalf("volume create: %d %s", r.Code, r.Stderr)
	}
	d.createStart("v", "--volume", "vol:/vol", "--", "/bin/sh", "-c", "ln -s /root/.ssh/id_rsa /vol/README.md && exec sleep 1000")
	link := filepath.Join(d.volumeDir, "vol", "README.md")
	waitFor(t, func() bool { _, err := os.Lstat(link); return err == nil }, "the program's link in the volume")
	r := d.cli("sandbox", "stop", "--json", "v")
	if r.Code != 0 {
		t.Fatalf("stop: %d %s", r.Code, r.Stderr)
	}
	var info struct {
		Traps []trapReport `json:"workspace_traps"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &info); err != nil {
		t.Fatalf("stop --json: %v\n%s", err, r.Stdout)
	}
	want := trap{Path: "README.md", Kind: "symlink_out", Target: "/root/.ssh/id_rsa"}
	if len(info.Traps) != 1 || info.Traps[0].Sandbox != "/vol" || !slices.Equal(info.Traps[0].Traps, []trap{want}) {
		t.Errorf("stop --json workspace_traps = %+v, want the volume's report with %+v", info.Traps, want)
	}
	for _, c := range [][]string{{"sandbox", "rm", "v"}, {"volume", "rm", "vol"}} {
		if r := d.cli(c...); r.Code != 0 {
			t.Errorf("%v: %d %s", c, r.Code, r.Stderr)
		}
	}
}
