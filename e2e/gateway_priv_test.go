package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// The process that parses agent traffic holds no privilege: observed from
// the host, the gateway runs as a non-root uid of its own with no
// capabilities, no_new_privs, and is not dumpable.
func TestGatewayProcessUnprivileged(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), "")
	cmd := exec.Command(cordonBin, "--state-dir", st, "run", "--config", cfg, "--", "/bin/sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// End it as a user would (SIGTERM): a SIGKILL would leave residue
		// for gc, which this test is not about.
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var gw int
	for deadline := time.Now().Add(5 * time.Second); gw == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		gw = childNamed(cmd.Process.Pid, "cordon-gateway")
	}
	if gw == 0 {
		t.Fatal("no cordon-gateway child of cordon found")
	}
	// The program runs only once every gateway process is placed and
	// ready: read the gateway's state from then on (a process just
	// forked is still in cordon's own groups until it is placed, before
	// it reads its configuration or any agent byte).
	for deadline := time.Now().Add(10 * time.Second); descendantRunning(cmd.Process.Pid, "/bin/sleep") == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the program did not start within 10s")
		}
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(gw), "status"))
	if err != nil {
		t.Fatal(err)
	}
	st2 := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			st2[k] = strings.TrimSpace(v)
		}
	}
	uids := strings.Fields(st2["Uid"])
	if len(uids) != 4 || uids[0] == "0" || uids[1] == "0" || uids[0] == "65534" {
		t.Errorf("gateway Uid = %q, want a non-root uid of its own", st2["Uid"])
	}
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if strings.Trim(st2[f], "0") != "" {
			t.Errorf("gateway %s = %s, want 0", f, st2[f])
		}
	}
	if st2["NoNewPrivs"] != "1" || st2["Groups"] != "" {
		t.Errorf("gateway NoNewPrivs = %q Groups = %q, want 1 and none", st2["NoNewPrivs"], st2["Groups"])
	}
	// It is in the sandbox's memory and pids groups: the agent cannot make
	// it exhaust the host.
	cg, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(gw), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ctl := range []string{"memory", "pids"} {
		found := false
		for _, l := range strings.Split(string(cg), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[1] == ctl && strings.HasPrefix(parts[2], "/cordon/") {
				found = true
			}
		}
		if !found {
			t.Errorf("gateway %s cgroup not the sandbox's:\n%s", ctl, cg)
		}
	}
	// Non-dumpable: its /proc files belong to root, not to its uid.
	var sst syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/proc", strconv.Itoa(gw), "mem"), &sst); err != nil {
		t.Fatal(err)
	}
	if strconv.Itoa(int(sst.Uid)) == uids[0] {
		t.Errorf("gateway /proc/PID/mem owned by its own uid %d: dumpable", sst.Uid)
	}
}

// childNamed returns the pid of a child of parent whose argv[0] is name
// (the lowest, when several are: the first /proc lists), or 0.
func childNamed(parent int, name string) int {
	first := 0
	for pid := range childrenNamed(parent, name) {
		if first == 0 || pid < first {
			first = pid
		}
	}
	return first
}
