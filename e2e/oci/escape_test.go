package oci

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// probe is where the cordon binary is bound (read-only) inside a
// container: `/probe __probe OP ARGS` is one escape attempt.
const probe = "/probe"

// probeRun runs one probe op in a new container of runtime rt with the
// docker flags given and returns its report.
func probeRun(t *testing.T, d *engines.Docker, rt string, flags []string, op ...string) string {
	t.Helper()
	args := append([]string{"run", "--rm", "--runtime", rt, "-v", cordonBin + ":" + probe + ":ro"}, flags...)
	r := d.Run(t, append(append(args, image, probe, "__probe"), op...)...)
	if r.Code != 0 {
		t.Fatalf("docker %v: exit %d\n%s%s", args, r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// testEscapes runs escape attempts of the e2e suite inside containers
// Docker started through cordon. Each denial is observed from the host,
// and each has a positive control: the same attempt from a runc container
// that shares the host's namespace (or holds the capability) succeeds, so
// the probe and the observation work and cordon's boundary is what denies.
func testEscapes(t *testing.T, d *engines.Docker) {
	t.Run("host loopback and abstract socket", func(t *testing.T) { escapeNetwork(t, d) })
	t.Run("host process", func(t *testing.T) { escapeHostProcess(t, d) })
	t.Run("mount", func(t *testing.T) { escapeMount(t, d) })
	t.Run("write through a read-only bind", func(t *testing.T) { escapeReadOnlyBind(t, d) })
	t.Run("volume driver bind of a root-owned directory", func(t *testing.T) { escapeVolumeDriverBind(t, d) })
}

// escapeVolumeDriverBind: a local volume whose driver binds a host
// directory (`docker volume create -o type=none -o o=bind -o device=DIR`)
// is mounted by the engine below the volume root (volumes/NAME/_data),
// but holds the host's files, not the image's. The attack: the
// container's uid 0 writes into it, which with the volume's image ids
// would be a file of host root's in a root-owned host directory (standing
// for /etc). Read from the host: under cordon nothing lands and the run
// is refused naming the mount; under runc (the control that the volume
// reaches DIR) the write lands, as host root's.
func escapeVolumeDriverBind(t *testing.T, d *engines.Docker) {
	dir := t.TempDir() // root's, 0700
	for _, rt := range runtimes {
		vol := "drvbind-" + rt + "-" + randHex(4)
		d.Must(t, "volume", "create", "--driver", "local", "-o", "type=none", "-o", "o=bind", "-o", "device="+dir, vol)
		t.Cleanup(func() { d.Run(t, "volume", "rm", "-f", vol) })
		name := "f-" + rt
		r := d.Run(t, base(rt, "--rm", "-v", vol+":/data", image, "sh", "-c", "echo x > /data/"+name)...)
		_, err := os.Lstat(filepath.Join(dir, name))
		switch rt {
		case "cordon":
			if err == nil {
				t.Errorf("cordon: the container's uid 0 wrote %s into a root-owned host directory through a volume driver's bind", name)
			}
			if r.Code == 0 || !strings.Contains(r.Stderr, "mount of its own") {
				t.Errorf("cordon: docker run = %d, want the refusal naming the mount\nstderr: %s", r.Code, r.Stderr)
			}
		default:
			if err != nil || r.Code != 0 {
				t.Errorf("control (%s): the write through the volume did not land in %s: %v (run %d: %s)", rt, dir, err, r.Code, r.Stderr)
			}
		}
	}
}

// countingListener accepts on network/addr and counts the connections.
func countingListener(t *testing.T, network, addr string) (net.Listener, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	n := &atomic.Int32{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return l, n
}

// escapeNetwork: a host TCP listener on 127.0.0.1 and a host abstract
// socket accept nothing from a cordon container; a runc container in the
// host's network namespace reaches both (each counts one).
func escapeNetwork(t *testing.T, d *engines.Docker) {
	tcp, tcpN := countingListener(t, "tcp", "127.0.0.1:0")
	abstract := "@cordon-oci-test-" + randHex(6)
	_, absN := countingListener(t, "unix", abstract)
	targets := []string{"tcp:" + tcp.Addr().String(), "unix:" + abstract}

	got := attempts(t, probeResult(t, probeRun(t, d, "cordon", []string{"--network", "none"}, append([]string{"connects"}, targets...)...)))
	time.Sleep(200 * time.Millisecond)
	if tcpN.Load() != 0 || absN.Load() != 0 {
		t.Errorf("from a cordon container: the host's loopback listener accepted %d, its abstract socket %d; want 0 (probe said %v)", tcpN.Load(), absN.Load(), got)
	}
	for _, tg := range targets {
		if got[tg] == "ok" {
			t.Errorf("probe in a cordon container connected to %s", tg)
		}
	}

	// Positive control: from the host's network namespace the same probe
	// connects and the listeners count it.
	ctl := attempts(t, probeResult(t, probeRun(t, d, "runc", []string{"--network", "host"}, append([]string{"connects"}, targets...)...)))
	waitCount(tcpN, 1)
	waitCount(absN, 1)
	if tcpN.Load() != 1 || absN.Load() != 1 || ctl[targets[0]] != "ok" || ctl[targets[1]] != "ok" {
		t.Errorf("control (runc, --network host): probe %v, listeners counted %d and %d; want ok and 1 each", ctl, tcpN.Load(), absN.Load())
	}
}

func waitCount(n *atomic.Int32, want int32) {
	for deadline := time.Now().Add(5 * time.Second); n.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// hostSleeper starts a host process to attack and returns it and a
// channel closed when it has ended.
func hostSleeper(t *testing.T) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, done
}

// escapeHostProcess: a cordon container cannot signal (or see) a host
// process: it is alive afterwards. Control: a runc container in the
// host's pid namespace kills it with the same op.
func escapeHostProcess(t *testing.T, d *engines.Docker) {
	victim, done := hostSleeper(t)
	pid := strconv.Itoa(victim.Process.Pid)
	r := probeResult(t, probeRun(t, d, "cordon", []string{"--network", "none"}, "kill", pid, "9"))
	select {
	case <-done:
		t.Fatalf("a cordon container killed host process %s (probe %+v)", pid, r)
	case <-time.After(300 * time.Millisecond):
	}
	if r.OK {
		t.Errorf("probe kill %s in a cordon container reported success: %+v", pid, r)
	}

	ctl := probeResult(t, probeRun(t, d, "runc", []string{"--network", "none", "--pid", "host"}, "kill", pid, "9"))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("control (runc, --pid host): host process %s still alive after the probe's kill (%+v)", pid, ctl)
	}
}

// escapeMount: mount(2) inside a cordon container is refused — the host
// reads the probe's mount table (/proc/PID/mountinfo) and finds no tmpfs
// on /mnt. Control: a runc container with CAP_SYS_ADMIN and no seccomp
// profile mounts it, and the same read sees it.
func escapeMount(t *testing.T, d *engines.Docker) {
	for _, c := range []struct {
		rt    string
		flags []string
		want  bool
	}{
		{"cordon", nil, false},
		{"runc", []string{"--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"}, true},
	} {
		args := append([]string{"run", "-i", "--rm", "--runtime", c.rt, "--network", "none", "-v", cordonBin + ":" + probe + ":ro"}, c.flags...)
		name := "mount-" + randHex(4)
		args = append(args, "--name", name, image, probe, "__probe", "hold", "kobj", "mount", "/mnt")
		cmd := d.Cmd(args...)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatalf("%s: no probe report: %v", c.rt, err)
		}
		r := probeResult(t, line)
		pid := hostPid(t, d, name, "__probe")
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		stdin.Close()
		_ = cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		mounted := false
		for _, l := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == "/mnt" && strings.Contains(l, " - tmpfs ") {
				mounted = true
			}
		}
		if mounted != c.want {
			t.Errorf("%s container (%v): probe %+v; tmpfs on /mnt in its mount table = %v, want %v", c.rt, c.flags, r, mounted, c.want)
		}
	}
}

// escapeReadOnlyBind: a write through a read-only bind of a host
// directory leaves the host directory as it was. Control: the same bind
// read-write lets the same write land (seen on the host), in a runc
// container and in a cordon one.
func escapeReadOnlyBind(t *testing.T, d *engines.Docker) {
	// Owned by a user (cordon binds a directory writable only when a
	// user, uid and gid >= 1000, owns it) and writable by all (runc's
	// container root writes as host root).
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, rt := range runtimes {
		name := "escape-" + rt + "-" + randHex(4)
		got := attempts(t, probeResult(t, probeRun(t, d, rt, []string{"--network", "none", "-v", dir + ":/ro:ro"}, "writes", "/ro/"+name)))
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: a write through a read-only bind landed on the host (probe %v)", rt, got)
		}
		ctl := attempts(t, probeResult(t, probeRun(t, d, rt, []string{"--network", "none", "-v", dir + ":/rw"}, "writes", "/rw/"+name)))
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "probe" {
			t.Errorf("control (%s, read-write bind): host read %q, %v (probe %v); want the probe's write", rt, b, err, ctl)
		}
	}
}
