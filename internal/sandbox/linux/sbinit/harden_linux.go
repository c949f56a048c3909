package sbinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// lockedSecurebits: root gets no implicit capabilities on exec, and none of
// the bits can be changed again. The setuid fixup stays enabled (and is
// locked) so that the switch to the program's uid clears every capability.
const lockedSecurebits = 1<<0 | 1<<1 | // SECBIT_NOROOT, _LOCKED
	1<<3 | // SECBIT_NO_SETUID_FIXUP_LOCKED
	1<<5 | // SECBIT_KEEP_CAPS_LOCKED
	1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE, _LOCKED

// configureNamespaces finishes the namespaces while the init still holds
// capabilities in its own user namespace.
func configureNamespaces(cfg *Config) error {
	// Nested user namespaces: the limit is per user namespace, so this
	// leaves the host value alone. Seccomp is the second layer.
	// Every /proc/sys write goes here: maskProc, the next step, makes
	// /proc/sys read-only.
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		return fmt.Errorf("limit user namespaces: %w", err)
	}
	// The per-user counters of this namespace (the kernel charges them to
	// the lease, its owner, in the host's namespace as well): each uid
	// inside gets at most these.
	names := make([]string, 0, len(cfg.UserLimits))
	for n := range cfg.UserLimits {
		names = append(names, n)
	}
	sort.Strings(names)
	if skip(cfg, "userns-limits") {
		names = nil
	}
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "/\x00") || n[0] == '.' {
			return fmt.Errorf("user limit %q: not a file name", n)
		}
		if err := os.WriteFile("/proc/sys/user/"+n, []byte(strconv.FormatUint(cfg.UserLimits[n], 10)), 0); err != nil {
			return fmt.Errorf("set user limit %s: %w", n, err)
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if cfg.EngineNet {
		return nil // the engine's namespace: its interfaces are the engine's
	}
	return loopbackUp()
}

// loopbackUp brings lo up; the namespace has no other interface and no route.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

func skip(cfg *Config, layer string) bool {
	if !testHooks {
		return false
	}
	for _, s := range cfg.TestSkip {
		if s == layer {
			return true
		}
	}
	return false
}

// harden drops every privilege the process holds, in an order where each
// step still has what it needs: rlimits; bounding and ambient sets and
// securebits (need CAP_SETPCAP); the uid/gid switch (clears the remaining
// capabilities); dumpable 0; no_new_privs; Landlock; seccomp last, so the
// filter need not allow any of the calls above. It returns the Landlock ABI.
func harden(cfg *Config, tm *timings) (int, error) {
	if err := setRlimits(cfg); err != nil {
		return 0, err
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return 0, fmt.Errorf("drop bounding cap %d: %w", c, err)
		}
	}
	tm.mark("rlimits_bounding")
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return 0, fmt.Errorf("clear ambient caps: %w", err)
	}
	if err := allThreadsPrctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0); err != nil {
		return 0, fmt.Errorf("lock securebits: %w", err)
	}
	// syscall.Setgroups/Setresgid/Setresuid apply to every thread. With
	// an image's uid 0 the uid does not change, so the setuid fixup clears
	// nothing: dropAllCaps below empties the sets, the bounding set is
	// already empty and SECBIT_NOROOT (locked) keeps exec from granting
	// root anything again; assertNoCaps checks the result.
	groups := cfg.Groups
	if groups == nil {
		groups = []int{}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return 0, fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(cfg.GID, cfg.GID, cfg.GID); err != nil {
		return 0, fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(cfg.UID, cfg.UID, cfg.UID); err != nil {
		return 0, fmt.Errorf("setresuid: %w", err)
	}
	// The uid/gid switch cleared the parent-death signal the trusted side
	// set at spawn (the kernel drops it on any euid/egid change): arm it
	// again, or a SIGKILLed cordon leaves the sandbox running. Had cordon
	// died before this point, the control channel is closed and the init
	// exits at its next read, before the program starts. A daemon-owned
	// sandbox outlives its spawner by design: it was spawned without one
	// and none is armed (it still never starts anything unless the spawner
	// lived to say "go").
	if !cfg.Daemon {
		if err := allThreadsPrctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0); err != nil {
			return 0, fmt.Errorf("parent-death signal: %w", err)
		}
	}
	if err := dropAllCaps(); err != nil {
		return 0, err
	}
	if err := assertNoCaps(); err != nil {
		return 0, err
	}
	// Non-dumpable: a same-uid process must not open /proc/1/mem.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("set non-dumpable: %w", err)
	}
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	tm.mark("creds_nnp")
	abi, _ := llsys.LandlockGetABIVersion()
	{
		// Positive control for the Landlock probe: this write must succeed.
		if err := os.WriteFile(filepath.Join(ProbeDir, ProbeControl), []byte("ok"), 0o600); err != nil {
			return 0, fmt.Errorf("landlock probe control: %w", err)
		}
	}
	if !skip(cfg, "landlock") && abi > 0 {
		if err := restrictLandlock(cfg, abi); err != nil {
			return 0, fmt.Errorf("landlock: %w", err)
		}
	}
	{
		// Outcome observed by the trusted side; the error here is expected.
		_ = os.WriteFile(filepath.Join(ProbeDir, ProbeDenied), []byte("escaped"), 0o600)
	}
	tm.mark("landlock")
	if !skip(cfg, "seccomp") {
		if err := installSeccomp(cfg.Seccomp); err != nil {
			return 0, fmt.Errorf("seccomp: %w", err)
		}
	}
	tm.mark("seccomp")
	return abi, nil
}

// setRlimits sets the provider's limits, then the image's (already
// clamped by the trusted side: they only lower), which win.
func setRlimits(cfg *Config) error {
	lims := []Rlimit{
		{unix.RLIMIT_CORE, 0, 0},
		{unix.RLIMIT_NOFILE, cfg.NoFile, cfg.NoFile},
		{unix.RLIMIT_FSIZE, cfg.FSize, cfg.FSize},
	}
	for _, l := range append(lims, cfg.Rlimits...) {
		if err := unix.Setrlimit(l.Type, &unix.Rlimit{Cur: l.Soft, Max: l.Hard}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.Type, err)
		}
	}
	return nil
}

func allThreadsPrctl(op, a2, a3 uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, op, a2, a3, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// dropAllCaps empties the permitted, effective and inheritable sets of
// every thread (the uid switch already emptied permitted and effective).
func dropAllCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

// assertNoCaps reads this thread's capability sets back: all must be
// empty, whatever the uid (an image's uid 0 included).
func assertNoCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities left after the drop: %+v", data)
		}
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if r, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && r != 0 {
			return fmt.Errorf("capability %d left in the bounding set", c)
		}
	}
	return nil
}

// restrictLandlock allows writes only under the writable paths and the
// few device nodes a program needs; everything else is read-only. It also
// scopes signals and abstract Unix sockets to the sandbox's own domain.
//
// The writable paths also get "refer" (ABI 2+): without it a ruleset that
// handles refer refuses every hard link and rename between two
// directories with EXDEV, even inside one writable tree, and programs
// that publish files by linking from a staging directory (OpenClaw's
// workspace bootstrap) cannot run. Refer never lets a file gain rights: a
// link or rename is allowed only when the destination grants no more
// than the source, and every writable path grants the same. Below ABI 2
// the library would drop Landlock entirely for a rule asking for refer,
// so the rule asks only where the kernel knows the right.
func restrictLandlock(cfg *Config, abi int) error {
	c := landlock.V6.BestEffort()
	c = landlock.Config{HandledAccessFS: c.HandledAccessFS, Scoped: c.Scoped}.BestEffort()
	dirs, files := splitWritable(cfg.WritablePaths)
	writable := landlock.RWDirs(dirs...)
	if abi >= 2 {
		writable = writable.WithRefer()
	}
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		writable.IgnoreIfMissing(),
		// A writable file bind: the kernel refuses directory rights on
		// a file (EINVAL for the whole ruleset).
		landlock.RWFiles(files...).IgnoreIfMissing(),
		landlock.RWDirs("/dev/shm", "/dev/pts").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty").WithIoctlDev().IgnoreIfMissing(),
	}
	return c.Restrict(rules...)
}

// splitWritable sorts the writable paths into directories and the rest
// (a file bound writable), as mounted now, before the program runs. A
// path that cannot be read stays with the directories (the rule ignores
// it if missing).
func splitWritable(paths []string) (dirs, files []string) {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			files = append(files, p)
			continue
		}
		dirs = append(dirs, p)
	}
	return dirs, files
}

// installSeccomp installs the trusted side's compiled filter on every
// thread (TSYNC). no_new_privs is already set.
func installSeccomp(raw []byte) error {
	if len(raw) == 0 || len(raw)%8 != 0 {
		return fmt.Errorf("no valid filter (%d bytes)", len(raw))
	}
	prog := unix.SockFprog{Len: uint16(len(raw) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&raw[0]))}
	tid, _, e := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return e
	}
	if tid != 0 {
		return fmt.Errorf("thread %d could not be synchronised", tid)
	}
	return nil
}
