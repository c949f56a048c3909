package engines

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// ContainerdCRI is a containerd of one test's own: its own root, state,
// socket, config, CNI configuration and runtime roots under one temporary
// directory, running in a network namespace of its own (so that the CNI
// plugin's host ends of the pods' veths stay there: nothing it sets up is
// reachable from, or routes to, the host's network).
type ContainerdCRI struct {
	Dir       string // everything of this containerd is below it
	Socket    string // its gRPC address (CRI and containerd's own API)
	Namespace string // the CRI plugin's containerd namespace: "k8s.io"
	// Image is the reference of the test image (a Debian root whose
	// command is sleep infinity), imported before NewContainerd returns; it
	// is also the CRI plugin's sandbox_image.
	Image string
	// CgroupParent is the cgroup (cgroupfs driver) the tests' pods go
	// under: CRI's LinuxPodSandboxConfig.CgroupParent.
	CgroupParent string
	// RuntimeRoots maps each runtime handler to the --root its runtime
	// binary is given (runc's state, or cordon oci's <root>/<id>).
	RuntimeRoots map[string]string

	pid   int
	rtDir string // parent of the runtime roots (short: see NewContainerd)
}

// ImageRef is the name the test image is imported under. A name with a
// dotted domain is used as it is by the CRI plugin's normalization.
const ImageRef = "cordon.test/debian:minbase"

// CordonHandler is the CRI runtime handler name cordon is registered
// under (the RuntimeClass's handler in deploy/kubernetes).
const CordonHandler = "cordon"

// Runtime is one CRI runtime handler of the private containerd: the name
// a RunPodSandboxRequest's RuntimeHandler (a RuntimeClass's handler)
// selects, and the runtime binary the runc v2 shim runs for it.
type Runtime struct {
	Name   string // "runc", "cordon"
	Binary string // BinaryName: /usr/sbin/runc, or the cordon-oci path
}

// StartContainerd starts a private containerd (NewContainerd) that
// t.Cleanup closes.
func StartContainerd(t testing.TB, runtimes ...Runtime) *ContainerdCRI {
	t.Helper()
	return StartContainerdWith(t, "", runtimes...)
}

// StartContainerdWith is StartContainerd with the root filesystem tarball
// rootfs as the test image instead of Image(t) (its command is then
// "sleep 2147483647": busybox's sleep takes no "infinity").
func StartContainerdWith(t testing.TB, rootfs string, runtimes ...Runtime) *ContainerdCRI {
	t.Helper()
	c := newContainerd(t, rootfs, runtimes...)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// NewContainerd starts a private containerd with its CRI plugin and the
// runtime handlers given (each runs under io.containerd.runc.v2 with its
// own BinaryName and Root), imports the test image built from Image(t),
// and waits until the CRI answers. The caller must Close it (t is used
// only while NewContainerd runs: a package's tests may share one engine
// that TestMain closes). If it fails it cleans up and ends t.
func NewContainerd(t testing.TB, runtimes ...Runtime) *ContainerdCRI {
	t.Helper()
	return newContainerd(t, "", runtimes...)
}

func newContainerd(t testing.TB, rootfs string, runtimes ...Runtime) *ContainerdCRI {
	t.Helper()
	testkit.RequireRoot(t)
	bin := testkit.RequireCommand(t, "the CRI tests run a private containerd (scripts/test.sh installs it)", "containerd")
	testkit.RequireCommand(t, "the test image is imported with ctr (package containerd)", "ctr")
	testkit.RequireCommand(t, "containerd's runc v2 shim (package containerd)", "containerd-shim-runc-v2")
	testkit.RequireCommand(t, "containerd's network namespace gets its loopback up with ip (iproute2)", "ip")
	testkit.RequireFile(t, filepath.Join(CNIBinDir, "ptp"), "the CRI plugin needs a CNI plugin to create a pod sandbox (package containernetworking-plugins)")
	cmd := []string{"sleep", "2147483647"}
	if rootfs == "" {
		rootfs, cmd = Image(t), []string{"sleep", "infinity"}
	}

	// A short path: the socket's name must fit in sun_path.
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &ContainerdCRI{
		Dir:          dir,
		Socket:       filepath.Join(dir, "containerd.sock"),
		Namespace:    "k8s.io",
		Image:        ImageRef,
		CgroupParent: "/cordon-test-" + filepath.Base(dir),
		RuntimeRoots: map[string]string{},
	}
	// The runtime roots get a short directory of their own: a runtime may
	// keep Unix sockets at <root>/<namespace>/<64-hex id>/NAME, and a
	// socket's path must fit in sun_path (107 bytes). (cordon's keeper.sock
	// was bound by path when this was written; it is now reached through
	// its directory's descriptor, but a short root costs nothing.)
	rt, err := os.MkdirTemp("/run", "crt")
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	c.rtDir = rt
	for i, r := range runtimes {
		c.RuntimeRoots[r.Name] = filepath.Join(rt, strconv.Itoa(i))
	}
	if err := c.boot(bin, rootfs, cmd, runtimes); err != nil {
		if cerr := c.Close(); cerr != nil {
			t.Error(cerr)
		}
		t.Fatal(err)
	}
	return c
}

// boot writes the configuration, starts containerd and imports the image.
func (c *ContainerdCRI) boot(bin, rootfs string, cmd []string, runtimes []Runtime) error {
	if err := os.Chmod(c.Dir, 0o711); err != nil {
		return err
	}
	if err := c.writeConfig(runtimes); err != nil {
		return err
	}
	if err := c.start(bin); err != nil {
		return err
	}
	archive := filepath.Join(c.Dir, "image.tar")
	if err := WriteOCIArchive(archive, rootfs, ImageRef, cmd); err != nil {
		return err
	}
	defer os.Remove(archive)
	if out, err := exec.Command("ctr", "-a", c.Socket, "-n", c.Namespace, "images", "import", "--snapshotter", Snapshotter, archive).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %v\n%s\n%s", err, out, c.Log())
	}
	return nil
}

// Snapshotter is the containerd snapshotter the CRI tests use:
// overlayfs, containerd's default. cordon runs each container on an
// overlay of its own over idmapped clones of the snapshot's layers
// (internal/sandbox/linux overlay_linux.go).
const Snapshotter = "overlayfs"

// CNIBinDir is where Debian's containernetworking-plugins puts the CNI
// plugins.
const CNIBinDir = "/usr/lib/cni"

// writeConfig writes containerd's config.toml and the CNI network
// configuration: one ptp network whose host side lives in containerd's own
// network namespace, with no masquerade and no route anywhere else.
func (c *ContainerdCRI) writeConfig(runtimes []Runtime) error {
	for _, d := range []string{"root", "state", "cni", "cni-ipam"} {
		if err := os.Mkdir(filepath.Join(c.Dir, d), 0o700); err != nil {
			return err
		}
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "cordon-test",
  "plugins": [{
    "type": "ptp",
    "ipMasq": false,
    "ipam": {"type": "host-local", "subnet": "10.254.0.0/24", "dataDir": %q}
  }]
}
`, filepath.Join(c.Dir, "cni-ipam"))
	if err := os.WriteFile(filepath.Join(c.Dir, "cni", "10-cordon-test.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "config.toml"), []byte(c.config(runtimes)), 0o600)
}

// config is containerd's config.toml: everything below c.Dir, plugins a
// test does not need (and that would touch host paths) disabled, the CRI
// plugin with the test image as its sandbox image, Snapshotter, the CNI
// configuration above and one runc v2 runtime per handler.
func (c *ContainerdCRI) config(runtimes []Runtime) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  disable_apparmor = true
  # Never ask for an oom_score_adj below containerd's own: the hosts
  # these tests run on may not grant CAP_SYS_RESOURCE (checked: writing
  # -998, the pod sandbox's default, fails with EACCES without it).
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = %q
    default_runtime_name = %q
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Socket, c.Socket+".ttrpc",
		c.Image, CNIBinDir, filepath.Join(c.Dir, "cni"), Snapshotter, defaultRuntime(runtimes))
	for _, r := range runtimes {
		b.WriteString("\n" + RuntimeTable(r.Name, r.Binary, c.RuntimeRoots[r.Name]))
	}
	return b.String()
}

// RuntimeTable is the containerd (config version 2) table of one CRI
// runtime handler run by the runc v2 shim with binary as its runtime and
// root as that runtime's --root (the shim appends the namespace). The
// node snippet in deploy/kubernetes/containerd-cordon.toml is this table
// for cordon; a test checks that it still is.
func RuntimeTable(name, binary, root string) string {
	return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s.options]
    BinaryName = %q
    Root = %q
`, name, name, binary, root)
}

func defaultRuntime(runtimes []Runtime) string {
	for _, r := range runtimes {
		if r.Name == "runc" {
			return "runc"
		}
	}
	if len(runtimes) > 0 {
		return runtimes[0].Name
	}
	return "runc"
}

// start runs containerd in a new network namespace (loopback up, nothing
// else) and waits until its socket answers.
func (c *ContainerdCRI) start(bin string) error {
	logf, err := os.Create(filepath.Join(c.Dir, "containerd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("/bin/sh", "-c", `ip link set lo up && exec "$0" --config "$1"`,
		bin, filepath.Join(c.Dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	c.pid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			c.pid = 0
			return fmt.Errorf("containerd exited at start: %v\n%s", err, c.Log())
		case <-time.After(100 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cri, err := DialCRI(ctx, c.Socket)
		if err == nil {
			_, err = cri.Version(ctx)
			cri.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("containerd did not answer on %s within a minute\n%s", c.Socket, c.Log())
}

// Log is what containerd has written so far (its last 64 KiB).
func (c *ContainerdCRI) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	return string(b)
}

// PID is containerd's process id (0 once stopped).
func (c *ContainerdCRI) PID() int { return c.pid }

// Close removes the pods this containerd still has (through the CRI, so
// each runtime deletes its containers), stops containerd by its PID, kills
// any shim of its socket left running, unmounts what is mounted below
// c.Dir, removes the cgroups under c.CgroupParent and c.Dir itself.
func (c *ContainerdCRI) Close() error {
	if c.pid != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if cri, err := DialCRI(ctx, c.Socket); err == nil {
			cri.RemoveAllPods(ctx)
			cri.Close()
		}
		cancel()
		terminate(c.pid, 15*time.Second)
		c.pid = 0
	}
	for _, pid := range c.ShimPIDs() {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	killCgroups(c.CgroupParent)
	removeCgroups(c.CgroupParent)
	for _, d := range []string{c.Dir, c.rtDir} {
		if d == "" {
			continue
		}
		if err := UnmountBelow(d); err != nil {
			return fmt.Errorf("unmount below %s: %w", d, err)
		}
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove %s: %w", d, err)
		}
	}
	return nil
}

// ShimPIDs are the runc v2 shims serving this containerd: the processes
// whose command line names its socket as their -address (a path under
// this test's own temporary directory, so never another engine's shim).
func (c *ContainerdCRI) ShimPIDs() []int { return c.shims("") }

// ShimOf is the pid of this containerd's shim for the task id (a pod
// sandbox's id: the CRI plugin runs a pod's containers in its sandbox's
// shim), or 0.
func (c *ContainerdCRI) ShimOf(id string) int {
	if p := c.shims(id); len(p) == 1 {
		return p[0]
	}
	return 0
}

// shims lists the shims of this containerd's socket, only those started
// for task id if it is not empty.
func (c *ContainerdCRI) shims(id string) []int { return shimsOf(c.Socket, id) }

// shimsOf lists the live shims whose command line names socket as their
// -address and, when id is not empty, id as their -id.
func shimsOf(socket, id string) []int {
	var pids []int
	for _, p := range Processes() {
		args := cmdline(p)
		if flagValue(args, "-address") == socket && (id == "" || flagValue(args, "-id") == id) && alive(p) {
			pids = append(pids, p)
		}
	}
	return pids
}

// flagValue is the argument after name in args ("" if none).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// UnmountBelow lazily unmounts every mount point strictly below dir,
// deepest first. It never touches a mount outside dir.
func UnmountBelow(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	prefix := filepath.Clean(dir) + "/"
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMountinfo(f[4])
		if strings.HasPrefix(p, prefix) {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var first error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT && first == nil {
			first = fmt.Errorf("umount %s: %w", p, err)
		}
	}
	return first
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// killCgroups SIGKILLs every process in parent (a cgroupfs path only
// this containerd's pods use) and below it, in each mounted hierarchy:
// what a runtime left running after its shim was gone.
func killCgroups(parent string) {
	if parent == "" || parent == "/" {
		return
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		_ = filepath.WalkDir(filepath.Join(h, parent), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroups removes parent (a cgroupfs path such as /cordon-test-X)
// and every cgroup below it, deepest first, in each mounted hierarchy.
// Only empty cgroups can be removed; a live process keeps its own.
func removeCgroups(parent string) {
	if parent == "" || parent == "/" {
		return
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		root := filepath.Join(h, parent)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
