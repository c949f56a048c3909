package probeops

// Host facts in /proc: what the program reads at each masked path, and
// its attempts to take the masks off.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func init() {
	register("readpaths", func(a []string) (string, error) {
		out := map[string]PathView{}
		for _, p := range a {
			out[p] = viewPath(p)
		}
		b, err := json.Marshal(out)
		return string(b), err
	})
	register("unmask", unmask)
}

// PathView is what the program got at one path.
type PathView struct {
	Type    string   `json:"type"` // file, dir, char, other; empty when lstat failed
	Len     int      `json:"len"`
	SHA256  string   `json:"sha256,omitempty"`
	Entries []string `json:"entries,omitempty"`
	RO      bool     `json:"ro"` // statfs says read-only
	Err     string   `json:"err,omitempty"`
}

func viewPath(p string) PathView {
	var v PathView
	fi, err := os.Lstat(p)
	if err != nil {
		v.Err = outcome("", err)
		return v
	}
	var st unix.Statfs_t
	if unix.Statfs(p, &st) == nil {
		v.RO = st.Flags&unix.ST_RDONLY != 0
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		v.Type = "dir"
		es, err := os.ReadDir(p)
		for _, e := range es {
			v.Entries = append(v.Entries, e.Name())
		}
		if err != nil {
			v.Err = outcome("", err)
		}
		return v
	case m.IsRegular():
		v.Type = "file"
	case m&os.ModeCharDevice != 0:
		v.Type = "char"
	default:
		v.Type = "other"
		return v
	}
	f, err := os.Open(p)
	if err != nil {
		v.Err = outcome("", err)
		return v
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, 1<<20))
	v.Len, v.SHA256 = int(n), hex.EncodeToString(h.Sum(nil))
	if err != nil {
		v.Err = outcome("", err)
	}
	return v
}

// unmask tries to take each mask off (umount2, lazily too), to remount
// /proc/sys read-write, to mount a fresh proc over /proc and to bind a
// path over a mask, then reads every path again.
func unmask(a []string) (string, error) {
	out := map[string]any{}
	for _, p := range a {
		out["umount "+p] = outcome("", unix.Unmount(p, 0))
		out["umount -l "+p] = outcome("", unix.Unmount(p, unix.MNT_DETACH))
	}
	out["remount rw /proc/sys"] = outcome("", unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	out["mount proc /proc"] = outcome("", unix.Mount("proc", "/proc", "proc", 0, ""))
	out["bind /proc/version /proc/cmdline"] = outcome("", unix.Mount("/proc/version", "/proc/cmdline", "", unix.MS_BIND, ""))
	after := map[string]PathView{}
	for _, p := range a {
		after[p] = viewPath(p)
	}
	out["after"] = after
	b, err := json.Marshal(out)
	return string(b), err
}
