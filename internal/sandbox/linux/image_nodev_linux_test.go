package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// The image's device node: the character device 1:3 (the host's null
// device: harmless to open, yet a device node as a block device of the
// host's disk would be), mode 0666 so DAC alone lets any uid open it.
const imageNode = "/nodes/null"

// imageRootWithNode is imageRoot with a device node at imageNode.
func imageRootWithNode(t *testing.T) string {
	t.Helper()
	root := imageRoot(t, "")
	p := filepath.Join(root, imageNode)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	return root
}

// nodeScript opens the device node at node on fd 3 of a sleep (argv
// "sleep 600"); when the open is refused a sleep 601 runs instead.
func nodeScript(node string) string {
	return "if /bin/busybox true 3<" + node + "; then exec /bin/busybox sleep 600 3<" + node +
		"; else exec /bin/busybox sleep 601; fi"
}

// bindWithNode is a host directory holding the 1:3 device node "null"
// (mode 0666), owned by a user (so idmapped onto the program), bound
// read-only at /work.
func bindWithNode(t *testing.T) sandbox.Bind {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "null")} {
		if err := os.Chown(p, 1500, 1500); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(filepath.Join(dir, "null"), 0o666); err != nil {
		t.Fatal(err)
	}
	return sandbox.Bind{Source: dir, Target: "/work"}
}

// heldNode reads, from the host, whether the program's sleep holds the
// image's device node open: its argv and its /proc/PID/fd/3. It also
// checks the control that DAC alone allows the open: the node, seen
// through the program's root, is the 1:3 device with mode 0666.
func heldNode(t *testing.T, sb *linuxSandbox, node string) bool {
	t.Helper()
	pid := programPid(t, sb, "sleep")
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/root%s", pid, node), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) || st.Mode&0o666 != 0o666 {
		t.Fatalf("inside, %s is mode %o rdev %x; want the 1:3 character device, mode 0666 (the control: DAC allows the open)", node, st.Mode, st.Rdev)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	var fst unix.Stat_t
	fdErr := unix.Stat(fmt.Sprintf("/proc/%d/fd/3", pid), &fst)
	held := fdErr == nil && fst.Mode&unix.S_IFMT == unix.S_IFCHR && fst.Rdev == unix.Mkdev(1, 3)
	if held != (argv[len(argv)-1] == "600") {
		t.Fatalf("the program runs %q with fd 3 %v (%v): the shell and the host disagree", argv, held, fdErr)
	}
	return held
}

// TestImageDeviceNodeInert: a device node the image carries cannot be
// opened in the sandbox, read-only root or writable (nodev on the root;
// Landlock lets every file under / be read, so nodev is what denies), and
// the evidence reads nosuid,nodev on / from the host. The positive
// control, in a test build (image_nodev_hooks_linux_test.go), removes
// nodev and shows the open succeed and the root's fact fail.
func TestImageDeviceNodeInert(t *testing.T) {
	p := newImageProvider(t)
	for _, writable := range []bool{false, true} {
		t.Run(fmt.Sprint("writable=", writable), func(t *testing.T) {
			root := imageRootWithNode(t)
			sb, rec := startImageRecord(t, p, imageSpec(root, sandbox.Image{UID: 1234, GID: 1234, Writable: writable}, nodeScript(imageNode)))
			if heldNode(t, sb, imageNode) {
				t.Errorf("the program holds the image's device node %s open", imageNode)
			}
			want := map[bool]string{true: "root_writable_idmapped", false: "root_read_only"}[writable]
			var fact *evidence.Check
			for i, f := range rec.Boundaries[evidence.Filesystem].Facts {
				if f.Name == want {
					fact = &rec.Boundaries[evidence.Filesystem].Facts[i]
				}
			}
			if fact == nil || !fact.OK || !strings.Contains(fact.Want, "nosuid,nodev") {
				t.Errorf("the root's fact %s = %+v; want verified, nosuid,nodev", want, fact)
			}
		})
	}
	// A bind of a host tree holding a device node: the same, and the
	// mounts_nodev fact holds.
	t.Run("bind", func(t *testing.T) {
		spec := imageSpec(imageRoot(t, ""), sandbox.Image{UID: 1234, GID: 1234}, nodeScript("/work/null"))
		spec.Binds = []sandbox.Bind{bindWithNode(t)}
		sb, rec := startImageRecord(t, p, spec)
		if heldNode(t, sb, "/work/null") {
			t.Errorf("the program holds the bound device node /work/null open")
		}
		if !hasFact(rec, evidence.Filesystem, "mounts_nodev") {
			t.Errorf("no verified mounts_nodev fact: %v", failedFacts(rec))
		}
	})
}
