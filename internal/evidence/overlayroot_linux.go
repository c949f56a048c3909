package evidence

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// overlayRootCheck judges an image root that is cordon's overlay of an
// engine's layers: the sandbox's / is an overlay mount, nosuid and nodev,
// read-write or read-only as declared, and what the host sees through
// /proc/PID/root — the root and every top-level entry on the root's own
// filesystem — is owned by the lease's ids: the layers are idmapped. An
// overlay over layers that are not would show the image's ids (root's 0).
func overlayRootCheck(proc string, in Inputs, ms []mountEntry) Check {
	mode := "ro"
	if in.RootWritable {
		mode = "rw"
	}
	c := Check{Name: "root_read_only", Source: proc + "/mountinfo, " + proc + "/root",
		Want: fmt.Sprintf("/ mounted %s,nosuid,nodev: an overlay of the image's layers, its root and top-level entries owned by host ids %d..%d", mode, in.LeaseUID, in.LeaseUID+in.LeaseSize-1)}
	if in.RootWritable {
		c.Name = "root_writable_idmapped"
	}
	var mountOK bool
	for _, m := range ms {
		if m.target == "/" {
			mountOK = m.fstype == "overlay" && hasOpt(m.opts, mode) && hasOpt(m.opts, "nosuid") && hasOpt(m.opts, "nodev")
			c.Got = m.fstype + " " + m.opts
		}
	}
	owners, ok := leasedOwners(proc+"/root", in)
	c.Got += "; " + owners
	c.OK = mountOK && ok
	return c
}

// leasedOwners checks the owner and group of the directory at root and of
// its entries on the same filesystem against the lease.
func leasedOwners(root string, in Inputs) (string, bool) {
	f, err := os.Open(root)
	if err != nil {
		return fmt.Sprint("unreadable: ", err), false
	}
	defer f.Close()
	dir := int(f.Fd())
	leased := func(st *unix.Stat_t) bool {
		return st.Uid >= in.LeaseUID && st.Uid-in.LeaseUID < in.LeaseSize && st.Gid >= in.LeaseGID && st.Gid-in.LeaseGID < in.LeaseSize
	}
	var rst unix.Stat_t
	if err := unix.Fstat(dir, &rst); err != nil {
		return fmt.Sprint("unreadable: ", err), false
	}
	if !leased(&rst) {
		return fmt.Sprintf("/ owned by host %d:%d", rst.Uid, rst.Gid), false
	}
	n := 0
	for {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Dev != rst.Dev {
				continue // gone, or a mount point (cordon's /proc, /dev, /tmp)
			}
			if !leased(&st) {
				return fmt.Sprintf("/%s owned by host %d:%d", name, st.Uid, st.Gid), false
			}
			n++
		}
		if errors.Is(err, io.EOF) {
			return fmt.Sprintf("/ and %d top-level entries owned by host %d:%d and above", n, rst.Uid, rst.Gid), true
		}
		if err != nil {
			return fmt.Sprint("unreadable: ", err), false
		}
	}
}
