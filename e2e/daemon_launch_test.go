package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Daemon sandboxes have the binds cordon run has: --ro and --rw, each a
// directory the caller opened and owns, sent as a descriptor. What the
// program reads and writes through them is observed on the host; the
// read-only bind refuses writes; a bind of a path the caller does not own
// is refused before anything exists on the host (no record, no cgroup),
// with the owner's own create of the same path as the positive control.
func TestDaemonBinds(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	bob := &syscall.Credential{Uid: 1001, Gid: 1000}
	roDir, rwDir := userWorkspace(t), userWorkspace(t)
	for _, p := range []string{roDir, rwDir} {
		os.Chmod(p, 0o755)
		os.Chmod(filepath.Dir(p), 0o755)
	}
	marker := fmt.Sprintf("read-only input %d", time.Now().UnixNano())
	os.WriteFile(filepath.Join(roDir, "in.txt"), []byte(marker), 0o644)
	os.Chown(filepath.Join(roDir, "in.txt"), 1000, 1000)

	// The negative case first: bob binds alice's directory.
	w := watchCgroups(t)
	if got := w.createdDuring(t, func() {
		for _, flag := range []string{"--ro", "--rw"} {
			r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "bob-bind", flag, roDir+":/x")
			if r.Code != 125 || !strings.Contains(r.Stderr, "owned by uid 1000") {
				t.Errorf("bob %s of alice's directory: %d %s; want refused as not his", flag, r.Code, r.Stderr)
			}
		}
	}); len(got) != 0 {
		t.Errorf("cgroups %v were created for a refused bind", got)
	}
	if _, ok := d.ls()["bob-bind"]; ok {
		t.Error("a record of bob's refused sandbox exists")
	}

	// Positive control: alice binds her own directories.
	r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "binds", "--ro", roDir+":/in", "--rw", rwDir+":/out",
		"--", "/bin/sh", "-c", `cat /in/in.txt > /out/copied && echo main-done; exec sleep 1000`)
	if r.Code != 0 {
		t.Fatalf("alice create with binds: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "start", "binds"); r.Code != 0 {
		t.Fatalf("start: %d %s", r.Code, r.Stderr)
	}
	waitFor(t, func() bool {
		return strings.Contains(cordonSocket(t, d.socket, st, alice, "sandbox", "logs", "binds").Stdout, "main-done")
	}, "the main program's copy")
	copied := filepath.Join(rwDir, "copied")
	if b, err := os.ReadFile(copied); err != nil || string(b) != marker {
		t.Fatalf("host %s = %q, %v; want %q copied through the binds", copied, b, err, marker)
	}
	if fi, err := os.Stat(copied); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("the copy is not alice's on the host: %v", err)
	}
	// The read-only bind refuses a write; the host directory is unchanged.
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "binds", "--", "/bin/sh", "-c", "echo x > /in/written"); r.Code == 0 {
		t.Errorf("a write to the --ro bind succeeded: %s", r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(roDir, "written")); err == nil {
		t.Error("the --ro bind was written on the host")
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "binds", "--", "/bin/sh", "-c", "echo y > /out/by-exec"); r.Code != 0 {
		t.Errorf("a write to the --rw bind failed: %d %s", r.Code, r.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(rwDir, "by-exec")); string(b) != "y\n" {
		t.Errorf("the --rw bind's write on the host = %q", b)
	}
	// A program not found says what the sandbox shows and how to bind
	// more (issue 11 §4), exit 127 as for run, and never a host path.
	r = cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "binds", "--", "/opt/tool/bin/tool")
	for _, want := range []string{"cordon: exec /opt/tool/bin/tool: no such file or directory; ", "its PATH is /", "a bind (ro) is at /in", "a bind (rw) is at /out", "binds are fixed at create", "--ro HOST:/opt/x"} {
		if r.Code != 127 || !strings.Contains(r.Stderr, want) {
			t.Errorf("exec of a missing program: %d %q; want 127 and %q", r.Code, r.Stderr, want)
		}
	}
	if strings.Contains(r.Stderr, roDir) || strings.Contains(r.Stderr, rwDir) {
		t.Errorf("the not-found answer names a host path: %s", r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "binds"); r.Code != 0 {
		t.Fatalf("rm: %d %s", r.Code, r.Stderr)
	}
}

// --rootfs through the daemon: the caller's own root directory, by
// descriptor, read-only; the host's /usr layout is absent. Another user's
// root is refused.
func TestDaemonRootfs(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, dir := range []string{"proc", "dev", "tmp", "bin", "home/agent"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(root)), 0o755)
	probe, err := os.ReadFile(filepath.Join(probeDir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "probe"), probe, 0o755)
	marker := fmt.Sprintf("daemon rootfs %d\n", time.Now().UnixNano())
	os.WriteFile(filepath.Join(root, "marker"), []byte(marker), 0o644)

	bob := &syscall.Credential{Uid: 1001, Gid: 1000}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "bob-root", "--rootfs", root); r.Code != 125 || !strings.Contains(r.Stderr, "owned by uid 0") {
		t.Errorf("bob's create on root's rootfs: %d %s; want refused", r.Code, r.Stderr)
	}
	d.createStart("rootfs", "--rootfs", root)
	if i := d.ls()["rootfs"]; i.Level != "DEDICATED_CONTAINER" {
		t.Errorf("admitted %q, want DEDICATED_CONTAINER", i.Level)
	}
	for _, tt := range []struct {
		argv   []string
		ok     bool
		data   string
		noExec bool
	}{
		{argv: []string{"/bin/probe", "read", "/marker"}, ok: true, data: marker},
		{argv: []string{"/bin/probe", "read", "/etc/passwd"}},
		{argv: []string{"/bin/probe", "write", "/marker"}},
		{argv: []string{"/bin/sh", "-c", "true"}, noExec: true},
	} {
		r := d.cli(append([]string{"sandbox", "exec", "rootfs", "--"}, tt.argv...)...)
		if tt.noExec {
			if r.Code != 127 {
				t.Errorf("exec %q = %d, want 127 (the host's /bin is not there)", tt.argv, r.Code)
			}
			continue
		}
		if r.Code != 0 || r.Probe.OK != tt.ok || r.Probe.Data != tt.data {
			t.Errorf("exec %q = %d probe %+v, want ok=%v data %q\n%s", tt.argv, r.Code, r.Probe, tt.ok, tt.data, r.Stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "marker")); string(b) != marker {
		t.Errorf("host marker = %q, want unchanged", b)
	}
	d.cli("sandbox", "rm", "rootfs")
}

// shMCPServer is an MCP tool server in POSIX sh (the tool server's own
// sandbox has only the host's base layout): one tool, whoami, answering
// with the uid it runs as.
const shMCPServer = `while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"initialize"'*) r='{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}';;
    *'"tools/list"'*) r='{"tools":[{"name":"whoami","description":"who the server runs as","inputSchema":{"type":"object"}}]}';;
    *'"tools/call"'*) r='{"content":[{"type":"text","text":"sh-tool uid '"$(id -u)"' in '"$(hostname)"'"}]}';;
    *) r='{}';;
  esac
  printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$r"
done`

// Daemon sandboxes get the config's tool servers, through the same
// lifecycle as cordon run: the server runs in its own sandbox and the
// agent reaches it only through its gateway's tool broker. After a daemon
// restart the adopted sandbox's gateway has new tool servers and the old
// ones are gone; all end with the daemon sandbox (no cgroup left).
func TestDaemonToolServers(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	var script strings.Builder
	for _, l := range strings.Split(shMCPServer, "\n") {
		script.WriteString("        " + l + "\n")
	}
	cfg := writeConfig(t, "tools:\n  - name: sh\n    command:\n      - /bin/sh\n      - -c\n      - |\n"+script.String())
	w := watchCgroups(t)
	w.created(t) // drain what came before
	d.createStart("tools", "--config", cfg, "--ro", probeDir+":/probe")
	made := w.created(t)
	i := d.ls()["tools"]
	r := d.cli("sandbox", "exec", "tools", "--", "/probe/mcpclient", "call", "sh__whoami", "{}")
	lines := toolLines(t, r)
	host, ok := strings.CutPrefix(lines[0].Text, "sh-tool uid 1000 in cordon-")
	if lines[0].IsError || !ok || strings.HasPrefix(i.ID, host) {
		t.Fatalf("tool call through the daemon sandbox's gateway: %+v (sandbox %s)", lines[0], i.ID)
	}
	// The tool server ran in a sandbox of its own (its hostname names
	// it), made while the daemon sandbox started.
	var tool string
	for _, id := range made {
		if strings.HasPrefix(id, host) {
			tool = id
		}
	}
	if tool == "" {
		t.Fatalf("no cgroup of the tool server's sandbox cordon-%s among %v", host, made)
	}
	// A daemon restart adopts the sandbox and reopens its gateway with new
	// tool servers; the old ones are released (their cgroups go).
	d.kill()
	d.start()
	r = d.cli("sandbox", "exec", "tools", "--", "/probe/mcpclient", "call", "sh__whoami", "{}")
	lines = toolLines(t, r)
	host2, ok := strings.CutPrefix(lines[0].Text, "sh-tool uid 1000 in cordon-")
	if lines[0].IsError || !ok || host2 == host {
		t.Fatalf("tool call after a daemon restart: %+v (first tool server cordon-%s)", lines[0], host)
	}
	for _, ctl := range []string{"pids", "memory"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, "cordon", tool)); err == nil {
			t.Errorf("the first tool server's cgroup %s/%s outlived the daemon restart", ctl, tool)
		}
	}
	// Reconciliation took the new tool servers for nobody's residue.
	if log := d.String(); strings.Contains(log, "release host resources") {
		t.Errorf("the restarted daemon tried to release a live sandbox:\n%s", log)
	}
	if r := d.cli("sandbox", "rm", "tools"); r.Code != 0 {
		t.Fatalf("rm: %d %s", r.Code, r.Stderr)
	}
	for _, n := range []string{tool, tool + "--gw", i.ID} {
		for _, ctl := range []string{"pids", "memory"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, "cordon", n)); err == nil {
				t.Errorf("cgroup %s/%s outlived the daemon sandbox", ctl, n)
			}
		}
	}
}

// A daemon sandbox's tool servers are sandboxes too, each on its own lease
// from the host's pool: they count against the caller's --max-per-user.
// Otherwise one create with a long tools list would hold any number of
// leases and cgroups. With a limit of 2, alice's create with three tool
// servers is refused before anything exists on the host (no cgroup, no
// record); the positive control, one tool server, makes exactly two
// sandboxes, and then a plain create is refused: she holds her limit.
func TestDaemonToolServersCountAgainstQuota(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000", "--max-per-user", "2")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	var script strings.Builder
	for _, l := range strings.Split(shMCPServer, "\n") {
		script.WriteString("        " + l + "\n")
	}
	config := func(n int) string {
		var b strings.Builder
		b.WriteString("version: cordon/v1\nworkload: u1000-tools\ntenant: u1000\npurpose: testing\ntools:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: t%d\n    command:\n      - /bin/sh\n      - -c\n      - |\n%s", i, script.String())
		}
		dir := t.TempDir()
		os.Chown(dir, 1000, 1000)
		os.Chmod(filepath.Dir(dir), 0o755)
		p := filepath.Join(dir, fmt.Sprintf("tools%d.yaml", n))
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(p, 1000, 1000)
		return p
	}
	w := watchCgroups(t)
	var r result
	if made := w.createdDuring(t, func() {
		r = cordonSocket(t, d.socket, st, alice, "sandbox", "create", "many", "--config", config(3))
		if r.Code == 0 {
			cordonSocket(t, d.socket, st, alice, "sandbox", "start", "many")
			cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "many")
		}
	}); r.Code == 0 || !strings.Contains(r.Stderr, "limit per user") || len(made) != 0 {
		t.Errorf("create with 3 tool servers under a limit of 2: %d %s; cgroups made %v; want refused, none made", r.Code, r.Stderr, made)
	}
	if _, ok := d.ls()["many"]; ok {
		t.Error("a record of the refused sandbox exists")
	}

	// Positive control: one tool server fits (the sandbox and its server),
	// and then she holds her limit.
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "one", "--config", config(1)); r.Code != 0 {
		t.Fatalf("create with 1 tool server: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "start", "one"); r.Code != 0 {
		t.Fatalf("start: %d %s\n%s", r.Code, r.Stderr, d)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "plain"); r.Code == 0 || !strings.Contains(r.Stderr, "limit per user") {
		t.Errorf("a plain create at the limit (a sandbox and its tool server): %d %s; want refused", r.Code, r.Stderr)
	}
	cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "one")
}

// A bind maps its directory's owner AND group to the program (idmapped),
// so owning the directory is not enough: bob's directory in a setgid
// shared directory carries a group he is not in (2000 here), and a file
// of that group inside it (0640, another user's) is one bob cannot read.
// His sandbox must not read it either: a descriptor whose group the
// caller is not in is refused. Positive control: the same bind from a
// directory of bob's own group is admitted and reads bob's own file.
func TestDaemonBindForeignGroup(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	bob := &syscall.Credential{Uid: 1001, Gid: 1000}
	top := t.TempDir()
	os.Chmod(top, 0o755)
	os.Chmod(filepath.Dir(top), 0o755)
	shared := filepath.Join(top, "shared")
	os.Mkdir(shared, 0o777)
	os.Chown(shared, 0, 2000)
	os.Chmod(shared, os.ModeSetgid|0o777)
	// bob's directory: created as bob, so it inherits group 2000.
	bobDir := filepath.Join(shared, "bob")
	if r := runAs(t, bob, "/bin/mkdir", "-m", "2775", bobDir); r != nil {
		t.Fatalf("mkdir as bob: %v", r)
	}
	var st0 syscall.Stat_t
	if err := syscall.Stat(bobDir, &st0); err != nil || st0.Uid != 1001 || st0.Gid != 2000 {
		t.Fatalf("bob's directory: %+v %v; want 1001:2000", st0, err)
	}
	secret := fmt.Sprintf("group-only %d", time.Now().UnixNano())
	os.WriteFile(filepath.Join(bobDir, "secret"), []byte(secret), 0o640)
	os.Chown(filepath.Join(bobDir, "secret"), 1002, 2000)
	if r := runAs(t, bob, "/bin/cat", filepath.Join(bobDir, "secret")); r == nil {
		t.Fatal("bob can read the group's file himself; the test proves nothing")
	}
	r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "grp", "--ro", bobDir+":/in")
	if r.Code == 0 {
		if r := cordonSocket(t, d.socket, st, bob, "sandbox", "start", "grp"); r.Code != 0 {
			t.Fatalf("start: %d %s", r.Code, r.Stderr)
		}
		if r := cordonSocket(t, d.socket, st, bob, "sandbox", "exec", "grp", "--", "/bin/cat", "/in/secret"); strings.Contains(r.Stdout, secret) {
			t.Errorf("bob's sandbox read a file of a group bob is not in: %q", r.Stdout)
		}
		cordonSocket(t, d.socket, st, bob, "sandbox", "rm", "grp")
		t.Fatalf("the bind of a directory of a group bob is not in was admitted")
	}
	if !strings.Contains(r.Stderr, "group") {
		t.Errorf("refusal: %d %s; want it to name the group", r.Code, r.Stderr)
	}

	// Positive control: bob's own group.
	own := filepath.Join(top, "own")
	os.Mkdir(own, 0o755)
	os.Chown(own, 1001, 1000)
	os.WriteFile(filepath.Join(own, "mine"), []byte(secret), 0o640)
	os.Chown(filepath.Join(own, "mine"), 1001, 1000)
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "own", "--ro", own+":/in"); r.Code != 0 {
		t.Fatalf("bob's bind of his own group's directory: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "start", "own"); r.Code != 0 {
		t.Fatalf("start: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "exec", "own", "--", "/bin/cat", "/in/mine"); r.Code != 0 || r.Stdout != secret {
		t.Errorf("bob's sandbox reading his own file: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	cordonSocket(t, d.socket, st, bob, "sandbox", "rm", "own")
}

// runAs runs argv as cred and returns its error (nil: exit 0).
func runAs(t *testing.T, cred *syscall.Credential, argv ...string) error {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd.Run()
}

// A descriptor of a mount in another mount namespace (alice's own user
// and mount namespace, a tmpfs she mounted there: she owns everything in
// it, and the path the daemon reads back for it looks like a host path)
// is never bound: the workspace, --ro, --rw and --rootfs are each refused
// and leave nothing behind (no record, no host record, no cgroup). The
// positive control is TestDaemonBinds: the same binds from the host's
// mount namespace are admitted.
func TestDaemonForeignMountDescriptors(t *testing.T) {
	testkit.RequireRoot(t)
	if _, err := os.Stat("/usr/bin/unshare"); err != nil {
		t.Fatalf("unshare(1) is needed: %v", err)
	}
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	dir := userWorkspace(t)
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Mkdir(filepath.Join(dir, "m"), 0o755)
	os.Chown(filepath.Join(dir, "m"), 1000, 1000)
	// In alice's namespaces: a tmpfs over m, a directory and a root in it.
	const script = `mount -t tmpfs x "$0"/m && mkdir -p "$0"/m/d "$0"/m/r/proc "$0"/m/r/dev "$0"/m/r/tmp && echo secret > "$0"/m/d/f && exec "$@"`
	before := cordonCgroups(t)
	for _, args := range [][]string{
		{"--ro", dir + "/m/d:/in"},
		{"--rw", dir + "/m/d:/in"},
		{"--workspace", dir + "/m/d"},
		{"--rootfs", dir + "/m/r"},
	} {
		argv := append([]string{"-Urm", "sh", "-c", script, dir, cordonBin, "--state-dir", st, "sandbox", "create", "ns"}, args...)
		cmd := exec.Command("/usr/bin/unshare", argv...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "CORDON_SOCKET=" + d.socket}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "open_tree") {
			t.Errorf("create %v from alice's own mount namespace: %v %s; want refused (open_tree)", args, err, out)
			d.cli("sandbox", "rm", "ns")
		}
		if _, ok := d.ls()["ns"]; ok {
			t.Errorf("create %v: a record of the refused sandbox is left", args)
		}
	}
	for _, id := range cordonCgroups(t) {
		if !slices.Contains(before, id) && d.ids.seen()[id] {
			t.Errorf("cgroup %s of a refused sandbox is left", id)
		}
	}
	out, _ := exec.Command(cordonBin, "--state-dir", st, "gc", "--json").Output()
	var g struct {
		Live []string `json:"live"`
	}
	_ = json.Unmarshal(out, &g)
	if len(g.Live) != 0 {
		t.Errorf("host records (leases) left by the refused creates: %v", g.Live)
	}
	// Nor a log file: a refused create has no record, and nothing would
	// ever remove it (a caller looping on refusals would fill the state
	// directory).
	if logs, _ := os.ReadDir(filepath.Join(st, "logs")); len(logs) != 0 {
		var names []string
		for _, l := range logs {
			names = append(names, l.Name())
		}
		t.Errorf("log files left by the refused creates: %v", names)
	}
}

// cordonCgroups lists the sandbox cgroups under the pids hierarchy now.
func cordonCgroups(t *testing.T) []string {
	t.Helper()
	es, _ := os.ReadDir("/sys/fs/cgroup/pids/cordon")
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// A start that fails on a tool server (the second one's program does not
// exist) leaves nothing of the tool servers that did start: no running
// sandbox, no host record (lease), no exec socket, no cgroup. Each such
// start otherwise leaked a live sandbox that no record, quota or rm
// reaches. The positive control is TestDaemonToolServers (the good server
// alone starts and answers); here the first server's cgroup is seen
// created during the start.
func TestDaemonToolServerStartFailureLeavesNothing(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	var script strings.Builder
	for _, l := range strings.Split(shMCPServer, "\n") {
		script.WriteString("        " + l + "\n")
	}
	cfg := writeConfig(t, "tools:\n  - name: sh\n    command:\n      - /bin/sh\n      - -c\n      - |\n"+script.String()+
		"  - name: bad\n    command: [/nonexistent/server]\n")
	if r := d.cli("sandbox", "create", "tools", "--config", cfg); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Stderr)
	}
	w := watchCgroups(t)
	w.created(t) // drain what came before
	if r := d.cli("sandbox", "start", "tools"); r.Code == 0 || !strings.Contains(r.Stderr, "tool server bad") {
		t.Fatalf("start with a tool server that cannot exec: %d %s; want refused naming it", r.Code, r.Stderr)
	}
	made := w.created(t)
	if len(made) == 0 {
		t.Fatal("no tool server sandbox was made during the start; the test proves nothing")
	}
	// This daemon's exec sockets and lease locks: none may be left.
	runDir := filepath.Join(st, "run")
	if es, _ := os.ReadDir(runDir); len(es) != 0 {
		for _, e := range es {
			id := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".sock"), ".lock")
			procs, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids/cordon", id, "cgroup.procs"))
			t.Errorf("left in %s: %s (cgroup processes %q)", runDir, e.Name(), procs)
		}
	}
	out, _ := exec.Command(cordonBin, "--state-dir", st, "gc", "--json").Output()
	var g struct {
		Live []string `json:"live"`
	}
	_ = json.Unmarshal(out, &g)
	if len(g.Live) != 0 {
		t.Errorf("host records (leases) left by the failed start: %v", g.Live)
	}
	if i := d.ls()["tools"]; i.State != "stopped" {
		t.Errorf("after the failed start the sandbox is %s, want stopped", i.State)
	}
}

// The daemon refuses, as cordon run does, a sandbox that would hand one of
// its configuration's secrets to the program: the secret's file inside a
// --ro bind (the agent would read the credential the broker exists to
// keep from it), or its value in --env. Nothing is created. Positive
// control: the same configuration with a bind that does not hold the
// file is admitted.
func TestDaemonRefusesSecretLeaks(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	home, other := userWorkspace(t), userWorkspace(t)
	for _, p := range []string{home, other} {
		os.Chmod(p, 0o755)
		os.Chmod(filepath.Dir(p), 0o755)
	}
	key := filepath.Join(home, "key")
	value := fmt.Sprintf("sk-ant-e2e-%d", time.Now().UnixNano())
	os.WriteFile(key, []byte(value), 0o600)
	os.Chown(key, 1000, 1000)
	cfg := filepath.Join(home, "cordon.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`version: cordon/v1
workload: u1000-leak
tenant: u1000
purpose: testing
secrets:
  k: {file: %s}
models:
  - name: claude
    api: anthropic
    upstream: http://127.0.0.1:9
    credential: k
    models: ["claude-*"]
`, key)), 0o600)
	os.Chown(cfg, 1000, 1000)
	w := watchCgroups(t)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"the file in a --ro bind", []string{"--ro", home + ":/in"}},
		{"the value in --env", []string{"--env", "LEAK=" + value}},
	} {
		var r result
		if made := w.createdDuring(t, func() {
			r = cordonSocket(t, d.socket, st, alice, append([]string{"sandbox", "create", "leak", "--config", cfg}, tt.args...)...)
			if r.Code == 0 {
				cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "leak")
			}
		}); r.Code == 0 || !strings.Contains(r.Stderr, "secret k") || len(made) != 0 {
			t.Errorf("%s: %d %s; cgroups %v; want refused naming secret k, nothing made", tt.name, r.Code, r.Stderr, made)
		}
		if _, ok := d.ls()["leak"]; ok {
			t.Errorf("%s: a record of the refused sandbox is left", tt.name)
		}
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "clean", "--config", cfg, "--ro", other+":/in"); r.Code != 0 {
		t.Fatalf("the same configuration with a bind that holds no secret: %d %s", r.Code, r.Stderr)
	}
	// exec --env is the same door: the value is refused there too, and
	// the program never runs (it would write the marker); an exec with a
	// harmless variable runs (positive control).
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "start", "clean"); r.Code != 0 {
		t.Fatalf("start: %d %s", r.Code, r.Stderr)
	}
	r := cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "clean", "--env", "LEAK="+value, "--", "/bin/sh", "-c", `echo "ran $LEAK"`)
	if r.Code == 0 || strings.Contains(r.Stdout, value) || !strings.Contains(r.Stderr, "secret k") {
		t.Errorf("exec --env with the secret's value: %d %q %s; want refused naming secret k", r.Code, r.Stdout, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "clean", "--env", "OK=fine", "--", "/bin/sh", "-c", `echo "ran $OK"`); r.Code != 0 || !strings.Contains(r.Stdout, "ran fine") {
		t.Errorf("exec --env OK=fine: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "clean")
}

// A Unix socket in a --rootfs is refused as it is in a bind: it would be
// a path from the sandbox to a host service outside its network
// namespace. Here a host listener's socket (mode 0777) sits in alice's
// root; the create is refused, nothing is made, and the listener is
// never reached. Positive control: the same directory as a --ro bind is
// refused for the socket too (the check the rootfs lacked), and TestDaemonRootfs
// admits a root without one.
func TestDaemonRootfsRefusesSockets(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	root := filepath.Join(userWorkspace(t), "rootfs")
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(root)), 0o755)
	for _, dir := range []string{"proc", "dev", "tmp", "bin", "home/agent", "run"} {
		os.MkdirAll(filepath.Join(root, dir), 0o755)
	}
	probe, err := os.ReadFile(filepath.Join(probeDir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "probe"), probe, 0o755)
	sock := filepath.Join(root, "run", "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777)
	reached := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 64)
			n, _ := c.Read(b)
			reached <- string(b[:n])
			c.Close()
		}
	}()
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { os.Lchown(p, 1000, 1000); return nil })

	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "ro", "--ro", root+":/r"); r.Code == 0 || !strings.Contains(r.Stderr, "socket") {
		t.Errorf("the directory as a --ro bind: %d %s; want refused for its socket", r.Code, r.Stderr)
		cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "ro")
	}
	r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "rs", "--rootfs", root)
	if r.Code == 0 {
		if r := cordonSocket(t, d.socket, st, alice, "sandbox", "start", "rs"); r.Code == 0 {
			cordonSocket(t, d.socket, st, alice, "sandbox", "exec", "rs", "--", "/bin/probe", "connects", "unix:/run/host.sock")
		}
		cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "rs")
		t.Errorf("a --rootfs holding a host socket was admitted")
	} else if !strings.Contains(r.Stderr, "socket") {
		t.Errorf("--rootfs with a socket: %d %s; want refused naming the socket", r.Code, r.Stderr)
	}
	// cordon run --rootfs is the same provider check.
	if r := runCordon(t, st, runOpts{}, "run", "--rootfs", root, "--", "/bin/probe", "connects", "unix:/run/host.sock"); r.Code != 125 || !strings.Contains(r.Stderr, "socket") {
		t.Errorf("cordon run --rootfs with a socket: %d %s; want 125 naming the socket", r.Code, r.Stderr)
	}
	select {
	case m := <-reached:
		t.Errorf("the host listener was reached from the sandbox: %q", m)
	default:
	}
}
