package trapscan

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Scan walks the directory open at root (any descriptor of it, O_PATH
// included) and reports its traps. name is the host path shown in the
// report. The caller keeps root open.
func Scan(root int, name string, lim Limits) Report {
	rep := Report{Root: name, Traps: []Trap{}}
	dir, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		rep.Truncated = fmt.Sprintf("open: %v", err)
		return rep
	}
	s := &scanner{root: root, lim: lim, rep: &rep}
	if lim.MaxTime > 0 {
		s.deadline = time.Now().Add(lim.MaxTime)
	}
	s.walk(dir, "", 0)
	return rep
}

type scanner struct {
	root     int
	lim      Limits
	rep      *Report
	deadline time.Time // zero: none
	bytes    int       // the listed traps' size as JSON
}

// stop records why the walk ends early; the first reason wins.
func (s *scanner) stop(why string) {
	if s.rep.Truncated == "" {
		s.rep.Truncated = why
	}
}

func (s *scanner) add(t Trap) {
	if len(s.rep.Traps) >= s.lim.MaxTraps {
		s.stop(fmt.Sprintf("more than %d traps; the rest are not listed", s.lim.MaxTraps))
		return
	}
	if !utf8.ValidString(t.Path) {
		t.PathBytes = []byte(t.Path)
	}
	if !utf8.ValidString(t.Target) {
		t.TargetBytes = []byte(t.Target)
	}
	if s.lim.MaxBytes > 0 {
		if s.bytes += t.Size(); s.bytes > s.lim.MaxBytes {
			s.stop(fmt.Sprintf("the traps' names and targets take more than %d bytes; the rest are not listed", s.lim.MaxBytes))
			return
		}
	}
	s.rep.Traps = append(s.rep.Traps, t)
}

// walk reads the directory open at dir (rel is its path under the root,
// "" for the root) and closes it.
func (s *scanner) walk(dir int, rel string, depth int) {
	f := os.NewFile(uintptr(dir), rel)
	defer f.Close()
	for s.rep.Truncated == "" {
		// Names only: the type of each entry comes from fstatat on this
		// directory descriptor, never from a path.
		names, err := f.Readdirnames(512)
		for _, n := range names {
			if s.rep.Truncated != "" {
				return
			}
			s.entry(dir, rel, n, depth)
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			s.stop(fmt.Sprintf("read %s: %v", join(rel, "."), err))
			return
		}
	}
}

func (s *scanner) entry(dir int, rel, name string, depth int) {
	s.rep.Entries++
	if s.rep.Entries > s.lim.MaxEntries {
		s.stop(fmt.Sprintf("more than %d entries", s.lim.MaxEntries))
		return
	}
	if !s.deadline.IsZero() && time.Now().After(s.deadline) {
		s.stop(fmt.Sprintf("took more than the time bound, %v", s.lim.MaxTime))
		return
	}
	p := join(rel, name)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		s.stop(fmt.Sprintf("stat %s: %v", p, err))
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if depth+1 > s.lim.MaxDepth {
			s.stop(fmt.Sprintf("directories nested more than %d deep", s.lim.MaxDepth))
			return
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			s.stop(fmt.Sprintf("open %s: %v", p, err))
			return
		}
		s.walk(sub, p, depth+1)
	case unix.S_IFLNK:
		target, err := readlinkat(dir, name)
		if err != nil {
			s.stop(fmt.Sprintf("readlink %s: %v", p, err))
			return
		}
		if s.leaves(rel, p, target) {
			s.add(Trap{Path: p, Kind: SymlinkOut, Target: target})
		}
	case unix.S_IFIFO:
		s.add(Trap{Path: p, Kind: FIFO})
	case unix.S_IFSOCK:
		s.add(Trap{Path: p, Kind: Socket})
	case unix.S_IFCHR:
		s.add(Trap{Path: p, Kind: CharDevice})
	case unix.S_IFBLK:
		s.add(Trap{Path: p, Kind: BlockDev})
	}
}

// leaves reports whether the symlink at p (in directory rel) with target
// can take a host user out of the tree: an absolute target; a relative one
// that climbs out as written; or one the kernel, resolving it from the
// root with RESOLVE_BENEATH (through the tree's other symlinks, as a host
// user's open would), finds leaving (EXDEV). A target that does not
// resolve at all (missing, a loop) is judged by the text alone. When in
// doubt (the path is too long to resolve) it counts as leaving.
func (s *scanner) leaves(rel, p, target string) bool {
	if target == "" {
		return false
	}
	if strings.HasPrefix(target, "/") {
		return true
	}
	if c := path.Clean(path.Join(rel, target)); c == ".." || strings.HasPrefix(c, "../") {
		return true
	}
	fd, err := unix.Openat2(s.root, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		unix.Close(fd)
		return false
	}
	return errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENAMETOOLONG)
}

func readlinkat(dir int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		l, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if l < n {
			return string(buf[:l]), nil
		}
		if n > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}
