package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
)

// HomesDir is where managed agent homes live for the state directory
// stateDir: beside it, never inside it (nothing under the state directory
// may be bound into a sandbox), e.g. /var/lib/cordon-agents for
// /var/lib/cordon.
func HomesDir(stateDir string) string {
	return filepath.Clean(stateDir) + "-agents"
}

// ManagedUID owns managed homes created for root (the daemon's volumes
// use the same unprivileged owner): the sandbox's idmapped bind maps the
// owner to the program's uid, and a root-owned writable bind is refused.
const ManagedUID = 65533

// Owner is the host uid a managed home belongs to: the user who ran sudo
// (SUDO_UID, when a regular user), else ManagedUID.
func Owner(getenv func(string) string) int {
	if u, err := strconv.Atoi(getenv("SUDO_UID")); err == nil && u >= 1000 && u < 1<<31 {
		return u
	}
	if u := os.Getuid(); u >= 1000 {
		return u
	}
	return ManagedUID
}

// ManagedHome returns the managed home of preset name for workload under
// homes (HomesDir), creating it (0700, owned by uid) and its parents
// (0711, root's) when absent. A symlink anywhere on the way is refused.
func ManagedHome(homes, workload, name string, uid int) (string, error) {
	if strings.ContainsAny(workload, "/\x00") || workload == "." || workload == ".." || workload == "" {
		return "", failure.Failf(failure.KindUsage, "agent", "workload %q cannot name a directory", workload)
	}
	if err := os.MkdirAll(homes, 0o711); err != nil {
		return "", failure.Failf(failure.KindProvision, "agent", "create %s: %v", homes, err)
	}
	fd, err := safefile.OpenDir(homes)
	if err != nil {
		return "", failure.Failf(failure.KindPolicyRejected, "agent", "%v", err)
	}
	defer unix.Close(fd)
	wfd, err := mkdirOpen(fd, workload, 0o711, 0, 0)
	if err != nil {
		return "", failure.Failf(failure.KindPolicyRejected, "agent", "%s/%s: %v", homes, workload, err)
	}
	defer unix.Close(wfd)
	hfd, err := mkdirOpen(wfd, name, 0o700, uid, uid)
	if err != nil {
		return "", failure.Failf(failure.KindPolicyRejected, "agent", "%s/%s/%s: %v", homes, workload, name, err)
	}
	unix.Close(hfd)
	return filepath.Join(homes, workload, name), nil
}

// mkdirOpen creates name in dfd when absent (mode, owned by uid:gid) and
// opens it without following a symlink.
func mkdirOpen(dfd int, name string, mode uint32, uid, gid int) (int, error) {
	created := false
	if err := unix.Mkdirat(dfd, name, mode); err == nil {
		created = true
	} else if !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s is not a directory (a symlink is refused)", name)
		}
		return -1, err
	}
	if created {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Seed writes p's seed files into home, each only when nothing is at its
// path: the agent owns home and may have left symlinks there, so the
// directory is opened without following symlinks, every component is
// opened O_NOFOLLOW, and a file is created O_EXCL, never replaced. New
// files and directories belong to home's owner (the idmapped bind shows
// them to the program as its own). It returns the paths it wrote.
func (p *Preset) Seed(home string) ([]string, error) {
	fd, err := safefile.OpenDir(home)
	if err != nil {
		return nil, failure.Failf(failure.KindPolicyRejected, "agent", "--agent-home: %v", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, failure.Failf(failure.KindProvision, "agent", "stat %s: %v", home, err)
	}
	var wrote []string
	for _, s := range p.Seeds {
		ok, err := seedOne(fd, s, int(st.Uid), int(st.Gid))
		if err != nil {
			return wrote, failure.Failf(failure.KindPolicyRejected, "agent", "seed %s in %s: %v", s.Path, home, err)
		}
		if ok {
			wrote = append(wrote, s.Path)
		}
	}
	return wrote, nil
}

// seedOne creates s under the directory dfd; false when something is
// already there.
func seedOne(dfd int, s SeedFile, uid, gid int) (bool, error) {
	parts := strings.Split(filepath.Clean(s.Path), "/")
	if filepath.IsAbs(s.Path) || parts[0] == ".." {
		return false, fmt.Errorf("seed path must be relative and inside the home")
	}
	cur := dfd
	for _, d := range parts[:len(parts)-1] {
		next, err := mkdirOpen(cur, d, 0o700, uid, gid)
		if cur != dfd {
			unix.Close(cur)
		}
		if err != nil {
			return false, err
		}
		cur = next
	}
	if cur != dfd {
		defer unix.Close(cur)
	}
	name := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(cur, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return false, nil // present (whatever it is): the agent's
	}
	data, err := s.Data()
	if err != nil {
		return false, err
	}
	f, err := unix.Openat(cur, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	file := os.NewFile(uintptr(f), name)
	defer file.Close()
	if err := file.Chown(uid, gid); err != nil {
		return false, err
	}
	if _, err := file.Write(data); err != nil {
		return false, err
	}
	return true, file.Sync()
}
