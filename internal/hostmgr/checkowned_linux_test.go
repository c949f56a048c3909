package hostmgr

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// A descriptor that is not a directory (nor, for a bind, a regular file)
// is refused whoever sends it, root included: a FIFO, a socket, a device,
// an O_PATH descriptor of a symlink. Positive control: an O_PATH
// descriptor of a directory passes (the CLI sends those).
func TestCheckOwnedRefusesOtherTypes(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	opath := func(p string, flags int) *os.File {
		fd, err := syscall.Open(p, unix.O_PATH|syscall.O_CLOEXEC|flags, 0)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		t.Cleanup(func() { f.Close() })
		return f
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(fds[0]), "socket")
	defer sock.Close()
	syscall.Close(fds[1])
	root := proto.Peer{UID: 0}
	for _, tt := range []struct {
		name string
		f    *os.File
	}{
		{"a FIFO", opath(fifo, 0)},
		{"a socket", sock},
		{"a device", opath("/dev/null", 0)},
		{"a symlink (O_PATH|O_NOFOLLOW)", opath(link, syscall.O_NOFOLLOW)},
	} {
		for _, dirOnly := range []bool{false, true} {
			if err := checkOwned(tt.f, root, "bind /x", dirOnly); proto.KindOf(err) != proto.KindBadRequest {
				t.Errorf("%s (dirOnly %v): checkOwned = %v, want bad_request", tt.name, dirOnly, err)
			}
		}
	}
	if err := checkOwned(opath(dir, syscall.O_DIRECTORY), root, "rootfs", true); err != nil {
		t.Errorf("an O_PATH directory: %v", err)
	}
}
