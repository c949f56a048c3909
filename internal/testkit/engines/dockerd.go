package engines

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Docker is a dockerd of one test's own: its own data root, exec root,
// API socket, pid file and containerd, with no bridge and no iptables
// rules (it never touches the host's network), and the runtimes the test
// registered. The test drives it through its CLI (Run, Must).
type Docker struct {
	t        testing.TB
	Dir      string // everything the daemon owns is below it, but ExecRoot
	DataRoot string
	ExecRoot string // /run/cdXXXX
	Sock     string // the API socket (docker -H unix://Sock)
	PID      int    // dockerd's
	Containerd
	cli       string
	cliConfig string
}

// Containerd is the containerd a Docker runs its containers through,
// started by the helper rather than by dockerd: dockerd 20.10 would use a
// system containerd at /run/containerd/containerd.sock when one runs, and
// this one must never be shared.
type Containerd struct {
	ContainerdSock string
	ContainerdPID  int
	ContainerdRoot string // --root
	ContainerdStat string // --state
}

// Namespace is the containerd namespace dockerd keeps its containers in.
const Namespace = "moby"

// StorageDriver is the dockerd storage driver: overlay2, docker's
// default. The kernel cannot idmap an overlay mount; cordon makes an
// overlay of its own over idmapped clones of the engine's layers
// (internal/sandbox/linux overlay_linux.go). runc runs on it as well, so
// the two runtimes are compared on the same storage.
const StorageDriver = "overlay2"

// Dockerd starts a private dockerd with the runtimes given (name → path
// of a program taking the runc command line; `runc` is always there) and
// waits until it answers. The test's cleanup removes every container,
// stops dockerd and its containerd by PID, lazily unmounts what is left
// under the daemon's own directories and removes them. A missing dockerd,
// containerd or docker CLI is Unavailable (a failure under CI=true).
func Dockerd(t testing.TB, runtimes map[string]string) *Docker {
	t.Helper()
	rts := make(map[string]DockerRuntime, len(runtimes))
	for n, p := range runtimes {
		rts[n] = DockerRuntime{Path: p}
	}
	return DockerdWith(t, rts)
}

// DockerRuntime is a runtime registered with dockerd.
type DockerRuntime struct {
	Path string
	// VolumeRoot: the runtime is cordon's and gets, as its runtimeArgs,
	// `--volume-root DATA-ROOT/volumes` — what the host operator sets so
	// that docker's named volumes hold the image's ids (docs/oci.md).
	VolumeRoot bool
}

// DockerdWith is Dockerd with runtimes that take arguments.
func DockerdWith(t testing.TB, runtimes map[string]DockerRuntime) *Docker {
	t.Helper()
	testkit.RequireRoot(t)
	why := "the Docker tests need Debian's docker.io and containerd (scripts/test.sh installs them)"
	dockerd := testkit.RequireCommand(t, why, "dockerd")
	containerd := testkit.RequireCommand(t, why, "containerd")
	testkit.RequireCommand(t, why, "containerd-shim-runc-v2", "runc")
	dir, err := os.MkdirTemp("", "cdk-")
	if err != nil {
		t.Fatal(err)
	}
	execRoot, err := shortExecRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := &Docker{
		t: t, Dir: dir,
		DataRoot: filepath.Join(dir, "data"), ExecRoot: execRoot,
		Sock: filepath.Join(dir, "docker.sock"),
		cli:  dockerCLI(t, why), cliConfig: filepath.Join(dir, "cli"),
	}
	d.ContainerdRoot, d.ContainerdStat = filepath.Join(d.DataRoot, "containerd"), filepath.Join(d.ExecRoot, "containerd")
	d.ContainerdSock = filepath.Join(d.ContainerdStat, "containerd.sock")
	for _, p := range []string{d.DataRoot, d.ExecRoot, d.cliConfig, d.ContainerdRoot, d.ContainerdStat} {
		if err := os.MkdirAll(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(d.stop)
	d.ContainerdPID = d.startContainerd(containerd)
	d.PID = d.startDockerd(dockerd, runtimes)
	return d
}

// shortExecRoot makes the daemon's exec root, /run/cdXXXX: as short as
// docker's default /run/docker, so that paths below it (runtimes keep
// sockets in EXEC-ROOT/runtime-NAME/moby/<64 hex id>/, and a Unix socket
// path has at most 107 bytes) are no longer than in production.
func shortExecRoot() (string, error) {
	for range 100 {
		b := make([]byte, 2)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		p := fmt.Sprintf("/run/cd%x", b)
		if err := os.Mkdir(p, 0o711); err == nil || !errors.Is(err, fs.ErrExist) {
			return p, err
		}
	}
	return "", fmt.Errorf("no free /run/cdXXXX directory")
}

// dockerCLI prefers the docker.io package's client, which matches its
// daemon's API version, over any other docker on PATH.
func dockerCLI(t testing.TB, why string) string {
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	return testkit.RequireCommand(t, why, "docker")
}

// startContainerd starts containerd with a config of its own (no CRI
// plugin: dockerd does not use it, and the CRI tests run their own) and
// waits for its socket.
func (d *Docker) startContainerd(bin string) int {
	d.t.Helper()
	conf := filepath.Join(d.Dir, "containerd.toml")
	toml := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"+
		"[grpc]\n  address = %q\n[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
		d.ContainerdRoot, d.ContainerdStat, d.ContainerdSock)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		d.t.Fatal(err)
	}
	pid := d.spawn("containerd", bin, "--config", conf)
	d.waitFor("containerd", pid, func() error {
		c, err := net.Dial("unix", d.ContainerdSock)
		if err == nil {
			c.Close()
		}
		return err
	})
	return pid
}

// startDockerd starts dockerd on the private containerd and waits until
// its API answers /_ping.
func (d *Docker) startDockerd(bin string, runtimes map[string]DockerRuntime) int {
	d.t.Helper()
	type entry struct {
		Path        string   `json:"path"`
		RuntimeArgs []string `json:"runtimeArgs,omitempty"`
	}
	rts := map[string]entry{}
	for n, r := range runtimes {
		e := entry{Path: r.Path}
		if r.VolumeRoot {
			e.RuntimeArgs = []string{"--volume-root", filepath.Join(d.DataRoot, "volumes")}
		}
		rts[n] = e
	}
	b, err := json.Marshal(map[string]any{"runtimes": rts})
	if err != nil {
		d.t.Fatal(err)
	}
	conf := filepath.Join(d.Dir, "daemon.json")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		d.t.Fatal(err)
	}
	args := []string{
		"--config-file", conf, // never the host's /etc/docker/daemon.json
		"--data-root", d.DataRoot, "--exec-root", d.ExecRoot,
		"-H", "unix://" + d.Sock, "--pidfile", filepath.Join(d.Dir, "docker.pid"),
		"--containerd", d.ContainerdSock, "--containerd-namespace", Namespace,
		"--containerd-plugins-namespace", Namespace + "-plugins",
		"--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
		"--storage-driver", StorageDriver,
	}
	pid := d.spawn("dockerd", bin, args...)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.Sock)
	}}, Timeout: 2 * time.Second}
	d.waitFor("dockerd", pid, func() error {
		resp, err := client.Get("http://docker/_ping")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/_ping: %s", resp.Status)
		}
		return nil
	})
	return pid
}

// spawn starts a daemon in its own process group with its output in
// Dir/NAME.log, and reaps it in the background. The daemon gets SIGTERM if
// the test binary dies (a panic, a timeout) before its cleanup runs: it is
// started from a goroutine locked to its OS thread for the daemon's whole
// life, as Pdeathsig fires when the forking thread ends (golang/go#27505).
func (d *Docker) spawn(name, bin string, args ...string) int {
	d.t.Helper()
	log, err := os.Create(filepath.Join(d.Dir, name+".log"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR=", "DOCKER_CONFIG="+d.cliConfig)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		d.t.Fatalf("start %s: %v", name, err)
	}
	return cmd.Process.Pid
}

// waitFor polls ready until it succeeds, the daemon exits or 60 s pass.
func (d *Docker) waitFor(name string, pid int, ready func() error) {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ready()
		if err == nil {
			return
		}
		if !alive(pid) || time.Now().After(deadline) {
			d.t.Fatalf("%s (pid %d) not ready: %v\n%s", name, pid, err, d.Log(name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log is the end of a daemon's log ("dockerd" or "containerd"): its
// last 40 lines, without the gRPC client's chatter.
func (d *Docker) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, name+".log"))
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.Contains(l, "module=grpc") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-40):], "\n")
}

// Cmd is the docker CLI talking to this daemon only.
func (d *Docker) Cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(d.cli, append([]string{"-H", "unix://" + d.Sock}, args...)...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+d.cliConfig, "DOCKER_HOST=", "DOCKER_CONTEXT=")
	return cmd
}

// Result is what one docker command did.
type Result struct {
	Stdout, Stderr string
	Code           int // the CLI's exit status (125: the daemon refused)
}

// Run runs the docker CLI with args and returns its output and exit
// status; failing to start the CLI at all ends t (the calling test or
// subtest: never the test that started the daemon from a subtest).
func (d *Docker) Run(t testing.TB, args ...string) Result {
	t.Helper()
	cmd := d.Cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// Must runs the docker CLI and returns its stdout, trimmed; a non-zero
// status ends t with the output and the end of dockerd's log.
func (d *Docker) Must(t testing.TB, args ...string) string {
	t.Helper()
	r := d.Run(t, args...)
	if r.Code != 0 {
		t.Fatalf("docker %s: exit %d\nstdout: %s\nstderr: %s\ndockerd log:\n%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr, d.Log("dockerd"))
	}
	return strings.TrimSpace(r.Stdout)
}

// Import imports a root filesystem tarball (Image's) as the image ref.
func (d *Docker) Import(t testing.TB, tarball, ref string) {
	t.Helper()
	start := time.Now()
	d.Must(t, "import", tarball, ref)
	t.Logf("docker import %s as %s in %v", filepath.Base(tarball), ref, time.Since(start).Round(time.Millisecond))
}

// RuntimeRootOf is the --root dockerd's shim passed to the runtime of
// container id: the directory holding the runtime's state directory of
// that container (EXEC-ROOT/runtime-*/moby; Debian's dockerd 20.10 names
// it runtime-runc whatever the runtime), or "" when there is none.
func (d *Docker) RuntimeRootOf(id string) string {
	m, _ := filepath.Glob(filepath.Join(d.ExecRoot, "runtime-*", Namespace, id))
	if len(m) != 1 {
		return ""
	}
	return filepath.Dir(m[0])
}

// Bundle is the OCI bundle directory containerd made for a container
// (config.json, the shim's files).
func (d *Docker) Bundle(id string) string {
	return filepath.Join(d.ContainerdStat, "io.containerd.runtime.v2.task", Namespace, id)
}
