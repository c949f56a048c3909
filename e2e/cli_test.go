package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// bashCompletion is bash-completion's main script, installed from the
// Debian package when missing (scripts/test.sh installs it too); still
// missing, the test is Unavailable (a failure under CI=true).
func bashCompletion(t *testing.T) string {
	t.Helper()
	const script = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(script); err != nil {
		out, err := exec.Command("apt-get", "install", "-y", "-q", "bash-completion").CombinedOutput()
		if err != nil {
			t.Logf("apt-get install bash-completion: %v\n%s", err, out)
		}
	}
	testkit.RequireFile(t, script, "the completion test runs bash with bash-completion (Debian package bash-completion)")
	return script
}

// A shell that has sourced `cordon completion bash` completes sandbox
// names from the daemon: root sees every sandbox's, a user only their
// own (the daemon scopes ls by the caller). With no daemon at the socket
// nothing is completed and nothing is printed into the shell. Observed
// on the terminal of a real bash in tmux.
func TestCompletionBashSandboxNames(t *testing.T) {
	testkit.RequireRoot(t)
	script := bashCompletion(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	ws := userWorkspace(t)
	os.Chmod(filepath.Dir(ws), 0o755)
	for _, n := range []string{"web-1", "db-2"} {
		if r := d.cli("sandbox", "create", n); r.Code != 0 {
			t.Fatalf("create %s: %d %s", n, r.Code, r.Stderr)
		}
	}
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "alice-box", "--workspace", ws); r.Code != 0 {
		t.Fatalf("alice create: %d %s", r.Code, r.Stderr)
	}
	env := []string{"PATH=" + filepath.Dir(cordonBin) + ":/usr/bin:/bin", "CORDON_SOCKET=" + d.socket, "HOME=/tmp"}
	// PATH again in the shell: tmux's own PATH wins over -e (and this
	// host may have another cordon on it).
	setup := "export PATH=" + filepath.Dir(cordonBin) + ":/usr/bin:/bin CORDON_SOCKET=" + d.socket + "; source " + script + "; source <(cordon completion bash); clear"
	shell := func(argv ...string) *testkit.Tmux {
		x := testkit.NewTmux(t, 160, 30, env, argv...)
		x.WaitFor(`[#$]`, 10*time.Second)
		x.Type(setup)
		time.Sleep(300 * time.Millisecond)
		return x
	}
	// root: every name, listed by <TAB><TAB>.
	root := shell("/bin/bash", "--norc", "--noprofile", "-i")
	root.Keys(true, "cordon sandbox stop ")
	root.Keys(false, "Tab", "Tab")
	s := root.WaitFor(`alice-box\s+db-2\s+web-1`, 20*time.Second)
	if strings.Contains(s, "rror") || strings.Contains(s, "daemon") {
		t.Errorf("completion printed into the shell:\n%s", s)
	}
	// No daemon at the socket: nothing completed, nothing printed; the
	// line is as typed (the marker shows the tabs were handled).
	root.Keys(false, "C-u")
	root.Type("export CORDON_SOCKET=" + filepath.Join(t.TempDir(), "absent.sock") + "; clear")
	time.Sleep(300 * time.Millisecond)
	root.Keys(true, "cordon sandbox stop ")
	root.Keys(false, "Tab", "Tab")
	root.Keys(true, "MARK")
	s = root.WaitFor(`stop MARK`, 20*time.Second)
	if strings.Contains(s, "web-1") || strings.Contains(s, "rror") || strings.Contains(s, "daemon") || strings.Contains(s, "socket") {
		t.Errorf("completion without a daemon showed something:\n%s", s)
	}
	// alice: only her own sandbox, completed at once (the only candidate).
	user := shell("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "/bin/bash", "--norc", "--noprofile", "-i")
	user.Keys(true, "cordon sandbox status ")
	user.Keys(false, "Tab")
	s = user.WaitFor(`status alice-box `, 20*time.Second)
	user.Keys(false, "Tab", "Tab")
	user.Keys(true, "MARK")
	s = user.WaitFor(`alice-box MARK`, 20*time.Second)
	if strings.Contains(s, "web-1") || strings.Contains(s, "db-2") {
		t.Errorf("a user's completion showed root's sandboxes:\n%s", s)
	}
	// The same from __complete itself, as each user.
	if r := cordonSocket(t, d.socket, st, alice, "__complete", "sandbox", "rm", ""); r.Stdout != "alice-box\n:4\n" {
		t.Errorf("alice __complete = %q, want her sandbox alone", r.Stdout)
	}
	if r := d.cli("__complete", "stop", "w"); r.Stdout != "web-1\n:4\n" {
		t.Errorf("root __complete stop w = %q, want web-1", r.Stdout)
	}
}

// ls --format prints each sandbox through the template, with the owner's
// user name (root; uid 1000 is "cloudsdk" on this host, read from the
// passwd file like the test's expectation) — for two sandboxes of two
// owners; --format json is one object a line; a user sees only their own
// row; a bad template is a usage error before anything is printed.
func TestLsFormatOwners(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	ws := userWorkspace(t)
	os.Chmod(filepath.Dir(ws), 0o755)
	if r := d.cli("sandbox", "create", "root-box"); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Stderr)
	}
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "alice-box", "--workspace", ws); r.Code != 0 {
		t.Fatalf("alice create: %d %s", r.Code, r.Stderr)
	}
	name1000 := userName(t, 1000)
	r := d.cli("sandbox", "ls", "--format", "{{.Name}} {{.Owner}} {{.OwnerUID}} {{.State}} {{.ID}}")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	sort.Strings(lines)
	idRE := `[0-9a-f]{16}`
	if r.Code != 0 || len(lines) != 2 ||
		!regexp.MustCompile(`^alice-box `+regexp.QuoteMeta(name1000)+` 1000 created `+idRE+`$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^root-box root 0 created `+idRE+`$`).MatchString(lines[1]) {
		t.Fatalf("ls --format = %d %q %s", r.Code, lines, r.Stderr)
	}
	r = d.cli("sandbox", "ls", "--format", "json")
	lines = strings.Split(strings.TrimSpace(r.Stdout), "\n")
	owners := map[string]string{}
	for _, l := range lines {
		var row struct {
			Name, Owner string
			OwnerUID    uint32 `json:"owner_uid"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("ls --format json line %q: %v", l, err)
		}
		owners[row.Name] = row.Owner
	}
	if len(lines) != 2 || owners["alice-box"] != name1000 || owners["root-box"] != "root" {
		t.Errorf("ls --format json = %q, want one object a line with owner names", lines)
	}
	// The table shows names too.
	if r := d.cli("sandbox", "ls"); !strings.Contains(r.Stdout, " "+name1000+" ") || !strings.Contains(r.Stdout, " root ") {
		t.Errorf("ls table without owner names:\n%s", r.Stdout)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "ls", "--format", "{{.Name}}"); r.Stdout != "alice-box\n" {
		t.Errorf("alice ls --format = %q, want her sandbox alone", r.Stdout)
	}
	for _, bad := range []string{"{{.Nope}}", "{{.Name"} {
		if r := d.cli("sandbox", "ls", "--format", bad); r.Code != 125 || r.Stdout != "" || !strings.Contains(r.Stderr, ".OwnerUID") {
			t.Errorf("ls --format %q = %d %q %q, want a usage error naming the fields", bad, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// userName is uid's name in /etc/passwd (the number when it has none).
func userName(t *testing.T, uid int) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == strconv.Itoa(uid) {
			return f[0]
		}
	}
	return strconv.Itoa(uid)
}

// logs --since reads the log from the daemon's time index: against a
// program that prints, sleeps and prints (the last piece without a
// newline), a time between the two gives only the later output; a
// duration far back gives all of it (control: the index is what cuts).
// The index is the daemon's own file beside the log: root's, 0600, whole
// 16-byte entries.
func TestLogsSince(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	d.createStart("talk", "--workspace", userWorkspace(t), "--", "/bin/sh", "-c", "echo early; sleep 4; printf late-no-newline")
	mid := time.Now().Add(2 * time.Second)
	if out, ended := d.logsFollow("talk", 60*time.Second); !ended || out != "early\nlate-no-newline" {
		t.Fatalf("logs -f = %v %q", ended, out)
	}
	since := mid.UTC().Format(time.RFC3339Nano)
	if r := d.cli("sandbox", "logs", "talk", "--since", since); r.Code != 0 || r.Stdout != "late-no-newline" {
		t.Errorf("logs --since %s = %d %q %s, want the later output alone", since, r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "logs", "talk", "--since", "1h"); r.Code != 0 || r.Stdout != "early\nlate-no-newline" {
		t.Errorf("logs --since 1h = %d %q %s, want everything", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "logs", "talk", "--since", "1h", "--tail", "1"); r.Stdout != "late-no-newline" {
		t.Errorf("logs --since 1h --tail 1 = %q, want the last line", r.Stdout)
	}
	if r := d.cli("sandbox", "logs", "talk", "--since", "yesterday"); r.Code != 125 || !strings.Contains(r.Stderr, "RFC 3339") {
		t.Errorf("logs --since yesterday = %d %s, want a usage error", r.Code, r.Stderr)
	}
	id := d.ls()["talk"].ID
	fi, err := os.Lstat(filepath.Join(st, "logs", id+".idx"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() == 0 || fi.Size()%16 != 0 ||
		fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("time index: %v %v, want root's 0600 file of 16-byte entries", fi, err)
	}
	if r := d.cli("sandbox", "rm", "talk"); r.Code != 0 {
		t.Fatalf("rm: %s", r.Stderr)
	}
	if _, err := os.Lstat(filepath.Join(st, "logs", id+".idx")); !os.IsNotExist(err) {
		t.Errorf("the time index outlived rm: %v", err)
	}
}

// sandbox status prints a readable summary with every field; --json is
// still the daemon's record on one line.
func TestStatusReadable(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	d.createStart("stat", "--workspace", userWorkspace(t), "--memory", "512M", "--config", cfg, "--", "/bin/sleep", "1000")
	r := d.cli("sandbox", "status", "stat")
	for _, want := range []string{"Name:", "stat", "ID:", "State:", "running", "Owner:", "root (uid 0)", "Profile:", "SAFE_GUIDED",
		"Level:", "DEDICATED_CONTAINER", "Created:", " ago)", "Started:", "Program:", `"/bin/sleep" "1000"`, "Workspace:", "/workspace",
		"Limits:", "memory 512MiB", "Gateway:", "ANTHROPIC_BASE_URL=http://127.0.0.1:", "HTTPS_PROXY=", "Evidence:", "boundaries verified",
		"Drift:", "none"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status lacks %q:\n%s%s", want, r.Stdout, r.Stderr)
		}
	}
	if strings.HasPrefix(r.Stdout, "{") {
		t.Errorf("status is JSON by default:\n%s", r.Stdout)
	}
	r = d.cli("sandbox", "status", "stat", "--json")
	var s struct {
		Name   string `json:"name"`
		Limits struct {
			MemoryBytes int64 `json:"memory_bytes"`
		} `json:"limits"`
		Evidence struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil || strings.Count(r.Stdout, "\n") != 1 || s.Name != "stat" ||
		s.Limits.MemoryBytes != 512<<20 || len(s.Evidence.SandboxID) != 16 {
		t.Errorf("status --json = %v %+v\n%s", err, s, r.Stdout)
	}
	if r := d.cli("sandbox", "status", "stat", "--json", "--pretty"); !strings.HasPrefix(r.Stdout, "{\n  \"") {
		t.Errorf("status --json --pretty not indented:\n%.200s", r.Stdout)
	}
}

// cordon run names its sandbox on a terminal (stderr is one), before the
// program's output; piped, stdout is the program's alone and stderr does
// not name it either (the id is in --json's outcome there).
func TestRunPrintsSandboxID(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	x := testkit.NewTmux(t, 120, 30, []string{"PATH=/usr/bin:/bin"}, cordonBin, "--state-dir", st, "run", "--", "/bin/echo", "program-says-hi")
	if code := x.WaitExit(60 * time.Second); code != 0 {
		t.Fatalf("run on a terminal: exit %d\n%s", code, x.Screen())
	}
	s := x.Screen()
	m := regexp.MustCompile(`cordon: sandbox ([0-9a-f]{16})\r?\n(?s:.*)program-says-hi`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no sandbox id line before the program's output on the terminal:\n%s", s)
	}
	jsonFile := filepath.Join(t.TempDir(), "outcome.json")
	r := cordon(t, cordonBin, st, "run", "--json-file", jsonFile, "--", "/bin/echo", "program-says-hi")
	if r.Code != 0 || r.Stdout != "program-says-hi\n" || strings.Contains(r.Stderr, "sandbox") {
		t.Errorf("piped run = %d stdout %q stderr %q; want the program's output alone", r.Code, r.Stdout, r.Stderr)
	}
	b, _ := os.ReadFile(jsonFile)
	var o struct {
		SandboxID string `json:"sandbox_id"`
	}
	if json.Unmarshal(b, &o) != nil || len(o.SandboxID) != 16 || o.SandboxID == m[1] || strings.Contains(r.Stderr, o.SandboxID) {
		t.Errorf("the piped run's outcome %s, want its own sandbox id (the terminal run's was %s)", b, m[1])
	}
}

// A daemon restarted while the main program runs adopts the sandbox and
// keeps its log's time index: output written after the restart is dated
// then, so --since a time after it prints nothing, and --since a time
// before it prints that output alone.
func TestLogsSinceAcrossRestart(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	d.createStart("talk", "--workspace", userWorkspace(t), "--", "/bin/sh", "-c", "echo early; sleep 6; printf late; exec sleep 1000")
	waitFor(t, func() bool { return d.cli("sandbox", "logs", "talk").Stdout == "early\n" }, "early in the log")
	time.Sleep(time.Second) // the first daemon's sample of it
	d.kill()
	d.start()
	mid := time.Now()
	waitFor(t, func() bool { return d.cli("sandbox", "logs", "talk").Stdout == "early\nlate" }, "late in the log")
	time.Sleep(time.Second) // the index's sample of it
	after := time.Now()
	if r := d.cli("sandbox", "logs", "talk", "--since", mid.UTC().Format(time.RFC3339Nano)); r.Stdout != "late" {
		t.Errorf("logs --since the restart = %q %s, want late", r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "logs", "talk", "--since", after.UTC().Format(time.RFC3339Nano)); r.Code != 0 || r.Stdout != "" {
		t.Errorf("logs --since after late = %d %q %s, want nothing (the adopted sandbox's index dated it)", r.Code, r.Stdout, r.Stderr)
	}
}
