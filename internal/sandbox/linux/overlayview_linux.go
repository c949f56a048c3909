package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
)

// viewBudget bounds how many entries sameView compares: the first two
// levels of a Debian image are a few hundred.
const viewBudget = 4096

// sameView holds cordon's overlay to the engine's: the same root inode
// (the upper layer's, or the top lower's), the same filesystem id (read
// from the upper layer's uuid), and the same names, types, modes, inodes
// and sizes over the first two levels. overlayfs reports the layers' own
// inode numbers, so another layer shows as another inode.
func sameView(engine *hostPath, ours int) error {
	e, err := unix.Openat(engine.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", engine.path, err)
	}
	o, err := unix.Openat(ours, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(e)
		return fmt.Errorf("open cordon's overlay: %w", err)
	}
	var es, ocs unix.Statfs_t
	if err := errors.Join(unix.Fstatfs(e, &es), unix.Fstatfs(o, &ocs)); err != nil {
		unix.Close(e)
		unix.Close(o)
		return err
	}
	if es.Fsid != ocs.Fsid {
		unix.Close(e)
		unix.Close(o)
		return viewDiffers(engine.path, "/", "filesystem id %v, the engine's %v", ocs.Fsid, es.Fsid)
	}
	if err := sameEntry(e, o, "", engine.path, "/"); err != nil {
		unix.Close(e)
		unix.Close(o)
		return err
	}
	budget := viewBudget
	return sameDir(e, o, engine.path, "", 0, &budget)
}

func viewDiffers(engine, rel, format string, args ...any) error {
	return failure.Failf(failure.KindUnsupported, "overlay root", "cordon's overlay of the layers of %s does not show the engine's tree at %s: %s", engine, rel, fmt.Sprintf(format, args...))
}

// sameEntry compares name in the two directories (name "": the
// directories themselves).
func sameEntry(e, o int, name, engine, rel string) error {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var a, b unix.Stat_t
	if err := unix.Fstatat(e, name, &a, flags); err != nil {
		return fmt.Errorf("stat %s in %s: %w", rel, engine, err)
	}
	if err := unix.Fstatat(o, name, &b, flags); err != nil {
		return viewDiffers(engine, rel, "%v", err)
	}
	if a.Ino != b.Ino || a.Mode != b.Mode {
		return viewDiffers(engine, rel, "inode %d mode %o, the engine's inode %d mode %o", b.Ino, b.Mode, a.Ino, a.Mode)
	}
	if a.Mode&unix.S_IFMT == unix.S_IFREG && a.Size != b.Size {
		return viewDiffers(engine, rel, "size %d, the engine's %d", b.Size, a.Size)
	}
	return nil
}

// sameDir compares the entries of two open directories, descending one
// level; it closes both.
func sameDir(e, o int, engine, rel string, depth int, budget *int) error {
	ef, of := os.NewFile(uintptr(e), "engine"), os.NewFile(uintptr(o), "cordon")
	defer ef.Close()
	defer of.Close()
	en, eall, err := readNames(ef)
	if err != nil {
		return fmt.Errorf("read %s%s: %w", engine, rel, err)
	}
	on, oall, err := readNames(of)
	if err != nil {
		return viewDiffers(engine, rel+"/", "%v", err)
	}
	if eall != oall {
		return viewDiffers(engine, rel+"/", "more than %d entries on one side only", maxViewDir)
	}
	if !eall {
		// Too large to compare (what a container wrote can make a
		// directory of its root so): the comparison ends here, as when
		// the budget is spent; the root, its filesystem id and what
		// came before are compared.
		*budget = 0
		return nil
	}
	if !slices.Equal(en, on) {
		return viewDiffers(engine, rel+"/", "%d entries, the engine's %d", len(on), len(en))
	}
	for _, n := range en {
		if *budget--; *budget < 0 {
			return nil
		}
		if err := sameEntry(e, o, n, engine, rel+"/"+n); err != nil {
			return err
		}
		var st unix.Stat_t
		if depth >= 1 || unix.Fstatat(e, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub := func(d int) (int, error) {
			return unix.Openat(d, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		se, err := sub(e)
		if err != nil {
			return fmt.Errorf("open %s%s/%s: %w", engine, rel, n, err)
		}
		so, err := sub(o)
		if err != nil {
			unix.Close(se)
			return viewDiffers(engine, rel+"/"+n, "%v", err)
		}
		if err := sameDir(se, so, engine, rel+"/"+n, depth+1, budget); err != nil {
			return err
		}
	}
	return nil
}

// maxViewDir is the most entries sameView reads of one directory.
const maxViewDir = viewBudget * 4

// readNames lists a directory's names, sorted; all is false (and names
// nil) when it holds more than maxViewDir.
func readNames(f *os.File) (names []string, all bool, err error) {
	for {
		batch, err := f.Readdirnames(512)
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			slices.Sort(names)
			return names, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		if len(names) > maxViewDir {
			return nil, false, nil
		}
	}
}
