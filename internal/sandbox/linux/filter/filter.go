//go:build linux && (amd64 || arm64)

package filter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// The allowlist. Each group is allowed whatever its arguments; together with
// the arch file's archAllowedSyscalls they are every call that Docker's
// default profile allows unconditionally to a container without
// capabilities, less the ones this policy denies or checks (below). Names
// that exist on only one architecture live in that architecture's file.
var (
	// fileIOSyscalls move data through descriptors the agent already holds.
	// Which files it can open is decided by the mount namespace and Landlock,
	// not here.
	fileIOSyscalls = []string{
		"read", "write", "readv", "writev", "pread64", "pwrite64",
		"preadv", "preadv2", "pwritev", "pwritev2", "lseek",
		"close", "close_range", "dup", "dup3", "fcntl", "flock",
		"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
		"fallocate", "ftruncate", "truncate", "readahead", "fadvise64",
		"copy_file_range", "sendfile", "splice", "tee", "vmsplice",
	}

	// pathSyscalls look up, link, rename and stat paths, and read or set
	// extended attributes. Landlock and read-only mounts bound where they
	// apply; security.* and trusted.* attributes need capabilities the agent
	// lacks. fanotify_mark is harmless without fanotify_init, which is denied.
	pathSyscalls = []string{
		"chdir", "fchdir", "getcwd", "faccessat", "faccessat2",
		"newfstatat", "fstat", "statx", "statfs", "fstatfs", "getdents64",
		"readlinkat", "linkat", "symlinkat", "unlinkat", "renameat",
		"renameat2", "fchown", "fchownat", "utimensat", "umask",
		"name_to_handle_at",
		"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
		"flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
		"lremovexattr", "fremovexattr",
		"inotify_init1", "inotify_add_watch", "inotify_rm_watch",
		"fanotify_mark",
	}

	// memorySyscalls manage the agent's own address space. Locking is bounded
	// by RLIMIT_MEMLOCK; memfd_secret and protection keys only hide memory
	// from the agent's own other mappings.
	memorySyscalls = []string{
		"brk", "mmap", "munmap", "mprotect", "mremap", "madvise",
		"mincore", "msync", "mlock", "mlock2", "mlockall", "munlock",
		"munlockall", "membarrier", "memfd_create", "memfd_secret",
		"remap_file_pages", "pkey_alloc", "pkey_free", "pkey_mprotect",
	}

	// processSyscalls run, wait for, schedule and signal processes. Signals
	// and pidfds reach only processes in the agent's PID namespace that it
	// could signal anyway; prctl and capset can only drop what the agent
	// has (it has no capabilities to raise).
	processSyscalls = []string{
		"execve", "execveat", "exit", "exit_group", "wait4", "waitid",
		"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal",
		"process_mrelease", "getpid", "getppid", "gettid", "getpgid",
		"setpgid", "getsid", "setsid", "getpriority", "setpriority",
		"getrlimit", "setrlimit", "prlimit64", "getrusage",
		"set_tid_address", "set_robust_list", "get_robust_list", "rseq",
		"futex", "futex_waitv", "restart_syscall", "prctl",
		"capget", "capset", "getcpu", "ioprio_get", "ioprio_set",
		"sched_getaffinity", "sched_setaffinity", "sched_getattr",
		"sched_setattr", "sched_getparam", "sched_setparam",
		"sched_getscheduler", "sched_setscheduler",
		"sched_get_priority_max", "sched_get_priority_min",
		"sched_rr_get_interval", "sched_yield",
	}

	// credentialSyscalls read and switch ids. Without CAP_SETUID/CAP_SETGID
	// a process can only move among the ids it already holds.
	credentialSyscalls = []string{
		"getuid", "geteuid", "getgid", "getegid", "getresuid",
		"getresgid", "getgroups", "setuid", "setgid", "setreuid",
		"setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
		"setgroups",
	}

	// signalSyscalls handle signals delivered to the agent itself.
	signalSyscalls = []string{
		"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
		"rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo",
		"rt_tgsigqueueinfo", "sigaltstack", "signalfd4",
	}

	// timeSyscalls read clocks and arm timers; none of them sets a clock.
	timeSyscalls = []string{
		"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
		"gettimeofday", "getitimer", "setitimer", "times",
		"timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_settime", "timerfd_create",
		"timerfd_gettime", "timerfd_settime",
	}

	// eventSyscalls wait on descriptors.
	eventSyscalls = []string{
		"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
		"eventfd2", "ppoll", "pselect6", "pipe2",
	}

	// networkSyscalls use sockets. The network namespace decides what a
	// socket can reach; creating one is checked below (socket).
	networkSyscalls = []string{
		"socketpair", "bind", "connect", "listen", "accept", "accept4",
		"getsockname", "getpeername", "getsockopt", "setsockopt",
		"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
		"recvmmsg", "shutdown",
	}

	// ipcSyscalls are System V IPC and POSIX message queues, both confined to
	// the agent's IPC namespace.
	ipcSyscalls = []string{
		"msgget", "msgctl", "msgsnd", "msgrcv", "semget", "semctl",
		"semop", "semtimedop", "shmget", "shmctl", "shmat", "shmdt",
		"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
		"mq_notify", "mq_getsetattr",
	}

	// infoSyscalls report facts about the system that the UTS namespace and
	// the kernel already expose to any process.
	infoSyscalls = []string{"uname", "sysinfo", "getrandom"}

	// restrictSyscalls can only take privileges away: a stacked seccomp
	// filter or a Landlock domain restricts further, never less.
	restrictSyscalls = []string{
		"seccomp", "landlock_create_ruleset", "landlock_add_rule",
		"landlock_restrict_self",
	}
)

// allowedGroups are the groups allowed without argument checks.
var allowedGroups = [][]string{
	fileIOSyscalls, pathSyscalls, memorySyscalls, processSyscalls,
	credentialSyscalls, signalSyscalls, timeSyscalls, eventSyscalls,
	networkSyscalls, ipcSyscalls, infoSyscalls, restrictSyscalls,
	archAllowedSyscalls,
}

// The denylist: refused with EPERM whatever their arguments. They need no
// rule of their own, since the default action refuses them; build checks
// that none of them is allowed by any rule, so a later edit to the allowlist
// cannot let one through.
var (
	// mountSyscalls change the mount tree: an agent that can remount, bind
	// or pivot can undo the filesystem view the sandbox built for it.
	mountSyscalls = []string{
		"mount", "umount2", "pivot_root", "chroot", "move_mount",
		"open_tree", "open_tree_attr", "fsopen", "fsmount", "fsconfig",
		"fspick", "mount_setattr",
	}

	// namespaceSyscalls create or enter namespaces. A new user namespace
	// grants a full capability set inside it, and with it the kernel's
	// namespaced attack surface (netfilter, mounts of fuse and overlayfs).
	namespaceSyscalls = []string{"unshare", "setns"}

	// crossProcessSyscalls read or steer another process's memory, registers
	// or descriptors.
	crossProcessSyscalls = []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
		"pidfd_getfd", "process_madvise",
	}

	// kernelCodeSyscalls load code into the kernel or replace it.
	kernelCodeSyscalls = []string{
		"bpf", "perf_event_open", "init_module", "finit_module",
		"delete_module", "kexec_load", "kexec_file_load",
	}

	// keyringSyscalls reach the kernel keyrings, which are not namespaced.
	keyringSyscalls = []string{"keyctl", "add_key", "request_key"}

	// exploitSyscalls are frequent building blocks of kernel exploits.
	// io_uring also performs opens, and so mode changes, that this filter
	// never sees. EPERM, not KILL: libuv and Bun probe io_uring and fall
	// back.
	exploitSyscalls = []string{
		"userfaultfd", "io_uring_setup", "io_uring_enter",
		"io_uring_register",
	}

	// hostAdminSyscalls administer the host: accounting, quotas, swap,
	// reboot, the kernel log, the terminal and the host's names.
	hostAdminSyscalls = []string{
		"acct", "quotactl", "quotactl_fd", "swapon", "swapoff", "reboot",
		"syslog", "vhangup", "sethostname", "setdomainname",
		"nfsservctl", "lookup_dcookie", "fanotify_init",
	}

	// clockSyscalls set or tune the system clocks, which are not namespaced.
	// adjtimex and clock_adjtime are denied whole: their modes are behind a
	// pointer.
	clockSyscalls = []string{
		"settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
	}

	// handleSyscalls: open_by_handle_at opens any inode on a filesystem by
	// its handle, bypassing the mount view (the "shocker" escape).
	handleSyscalls = []string{"open_by_handle_at"}

	// numaSyscalls move or pin memory across NUMA nodes; Docker gates them on
	// CAP_SYS_NICE.
	numaSyscalls = []string{
		"get_mempolicy", "set_mempolicy", "set_mempolicy_home_node",
		"mbind", "move_pages", "migrate_pages",
	}

	// lsmSyscalls set the agent's own LSM attributes.
	lsmSyscalls = []string{"lsm_set_self_attr"}
)

// deniedGroups are the groups refused outright with EPERM.
var deniedGroups = [][]string{
	mountSyscalls, namespaceSyscalls, crossProcessSyscalls,
	kernelCodeSyscalls, keyringSyscalls, exploitSyscalls,
	hostAdminSyscalls, clockSyscalls, handleSyscalls, numaSyscalls,
	lsmSyscalls, archDeniedSyscalls,
}

// enosysSyscalls fail with ENOSYS, as on a kernel that lacks them, so that
// libc falls back to the older call: clone3's flags and openat2's mode are
// behind a pointer that seccomp cannot read, while clone's and openat's are
// plain arguments checked below.
var enosysSyscalls = slices.Concat([]string{"clone3", "openat2"}, aioSyscalls)

// aioSyscalls are Linux native AIO. io_setup reserves from fs.aio-max-nr,
// one pool for the whole host that no cgroup or namespace bounds: one
// sandbox exhausted it for everyone. ENOSYS, as on a kernel built without
// CONFIG_AIO, which callers (libaio users, databases) already handle with
// a thread-pool fallback; libuv and Node do not use it.
var aioSyscalls = []string{
	"io_setup", "io_destroy", "io_submit", "io_cancel",
	"io_getevents", "io_pgetevents",
}

// modeArgSyscalls set or create file modes; the value is the index of the
// mode argument. They are allowed only without setuid and setgid bits: on
// an idmapped workspace an agent without capabilities could otherwise leave
// a setuid file owned by the workspace owner on the host.
var modeArgSyscalls = mergeArgs(map[string]int{
	"fchmod": 1, "fchmodat": 2, "fchmodat2": 2,
	"openat": 3, "mkdirat": 2, "mknodat": 2,
}, archModeArgSyscalls)

// setIDBits are S_ISUID|S_ISGID.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// openFlagsArg are the open calls among modeArgSyscalls, with the index
// of their flags argument. The kernel reads an open's mode only with
// O_CREAT or O_TMPFILE (createFlags); without them the mode register may
// hold anything, and some libcs leave garbage there: an OCI image's
// busybox sh could not open /dev/null for a redirect (EPERM) until such
// an open was allowed whatever its mode.
var openFlagsArg = map[string]int{"open": 1, "openat": 2}

// createFlags make an open use its mode: O_CREAT, and O_TMPFILE's own bit
// (O_TMPFILE includes O_DIRECTORY, which alone creates nothing).
const createFlags = unix.O_CREAT | (unix.O_TMPFILE &^ unix.O_DIRECTORY)

// cloneNamespaceFlags are the clone flags that create namespaces (Docker's
// mask 0x7E020000). clone is allowed only without them; clone's flags are
// its first argument on amd64 and arm64 alike (s390 swaps them).
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// deniedIoctls are refused: TIOCSTI pushes keystrokes into a terminal's
// input, TIOCLINUX can read a virtual console's screen, TIOCSETD changes
// a terminal's line discipline without privilege (N_NULL makes a user's
// terminal swallow all its input and output, and stays after the program
// ends). The request is an unsigned int to the kernel, so only its low 32
// bits are compared.
var deniedIoctls = []uintptr{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCSETD}

// deniedSocketDomains are refused: AF_VSOCK talks to the hypervisor or host
// outside the network namespace.
var deniedSocketDomains = []uintptr{unix.AF_VSOCK}

// deniedSocketProtocols are refused in any domain: Multipath TCP keeps a
// connection's bytes in its own socket, which /proc/net/tcp does not show
// (its TCP subflows there queue nothing), so the trusted side's watch of
// the TCP memory not yet charged to any cgroup (connections waiting to be
// accepted) cannot see them: 20 unaccepted MPTCP connections held 77 MiB
// with 0 bytes in the table. Programs fall back to TCP (Go does on any
// error).
var deniedSocketProtocols = []uintptr{unix.IPPROTO_MPTCP}

// allowedPersonalities are Docker's: PER_LINUX, PER_LINUX32, UNAME26, both,
// and 0xffffffff to query. Others, such as ADDR_NO_RANDOMIZE or
// READ_IMPLIES_EXEC, weaken the agent's own exploit mitigations.
var allowedPersonalities = []uintptr{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// low32 masks a value to the 32 bits that an int argument carries.
const low32 = 0xffffffff

var (
	buildOnce sync.Once
	built     *Program
	errBuild  error
)

// Build compiles the sandbox filter for runtime.GOARCH; any other arch (or an
// unknown one) is an error (fail closed). The program is compiled once per
// process; each call returns its own copy.
func Build() (*Program, error) {
	buildOnce.Do(func() { built, errBuild = build() })
	if errBuild != nil {
		return nil, errBuild
	}
	return &Program{Arch: built.Arch, Raw: slices.Clone(built.Raw), SHA256: built.SHA256}, nil
}

// Denied lists, for documentation and evidence, the syscall names that the
// filter refuses outright (sorted): with EPERM, or with ENOSYS for clone3,
// openat2 and the native AIO calls.
func Denied() []string {
	names := slices.Concat(append(slices.Clone(deniedGroups), enosysSyscalls)...)
	slices.Sort(names)
	return slices.Compact(names)
}

// build compiles the policy without the cache.
func build() (*Program, error) {
	if runtime.GOARCH != archName {
		return nil, fmt.Errorf("seccomp filter for %s: tables are for %s: %w", runtime.GOARCH, archName, errors.ErrUnsupported)
	}
	sets, err := ruleSets()
	if err != nil {
		return nil, err
	}
	prog := &seccomp.Program{
		RuleSets: sets,
		Options: seccomp.ProgramOptions{
			DefaultAction: seccomp.ReturnError.Code(uint16(unix.EPERM)),
			BadArchAction: seccomp.KillProcess,
		},
	}
	insns, _, err := prog.Build()
	if err != nil {
		return nil, fmt.Errorf("compile seccomp filter for %s: %w", archName, err)
	}
	if len(insns) == 0 || len(insns) > maxInstructions {
		return nil, fmt.Errorf("compile seccomp filter for %s: %d instructions, limit %d", archName, len(insns), maxInstructions)
	}
	raw := encode(insns)
	sum := sha256.Sum256(raw)
	return &Program{Arch: archName, Raw: raw, SHA256: hex.EncodeToString(sum[:])}, nil
}

// encode lays instructions out as struct sock_filter in native byte order.
func encode(insns []bpf.Instruction) []byte {
	raw := make([]byte, 0, len(insns)*instructionSize)
	for _, in := range insns {
		raw = binary.NativeEndian.AppendUint16(raw, in.OpCode)
		raw = append(raw, in.JumpIfTrue, in.JumpIfFalse)
		raw = binary.NativeEndian.AppendUint32(raw, in.K)
	}
	return raw
}

// ruleSets turns the tables into gVisor rule sets, in the order they are
// tried: argument-level denials, ENOSYS, then the allowlist. It fails if a
// name is unknown on this architecture or appears in two tables.
func ruleSets() ([]seccomp.RuleSet, error) {
	owner := make(map[string]string)
	claim := func(table string, names ...string) error {
		for _, name := range names {
			if _, ok := sysnums[name]; !ok {
				return fmt.Errorf("seccomp policy: %s: syscall %q unknown on %s", table, name, archName)
			}
			if prev, ok := owner[name]; ok {
				return fmt.Errorf("seccomp policy: syscall %q is in both %s and %s", name, prev, table)
			}
			owner[name] = table
		}
		return nil
	}
	for _, g := range deniedGroups {
		if err := claim("denied", g...); err != nil {
			return nil, err
		}
	}
	if err := claim("enosys", enosysSyscalls...); err != nil {
		return nil, err
	}
	for _, g := range allowedGroups {
		if err := claim("allowed", g...); err != nil {
			return nil, err
		}
	}
	for name := range modeArgSyscalls {
		if err := claim("mode-checked", name); err != nil {
			return nil, err
		}
	}
	if err := claim("argument-checked", "clone", "ioctl", "socket", "personality"); err != nil {
		return nil, err
	}

	deny := seccomp.NewSyscallRules()
	var ioctls seccomp.Or
	for _, req := range deniedIoctls {
		ioctls = append(ioctls, seccomp.PerArg{seccomp.AnyValue{}, seccomp.MaskedEqual(low32, req)})
	}
	deny.Set(sysnums["ioctl"], ioctls)
	var domains seccomp.Or
	for _, d := range deniedSocketDomains {
		domains = append(domains, seccomp.PerArg{seccomp.MaskedEqual(low32, d)})
	}
	for _, p := range deniedSocketProtocols {
		domains = append(domains, seccomp.PerArg{seccomp.AnyValue{}, seccomp.AnyValue{}, seccomp.MaskedEqual(low32, p)})
	}
	deny.Set(sysnums["socket"], domains)

	enosys := seccomp.NewSyscallRules()
	for _, name := range enosysSyscalls {
		enosys.Set(sysnums[name], seccomp.MatchAll{})
	}

	allow := seccomp.NewSyscallRules()
	for _, g := range allowedGroups {
		for _, name := range g {
			allow.Set(sysnums[name], seccomp.MatchAll{})
		}
	}
	for name, arg := range modeArgSyscalls {
		var pa seccomp.PerArg
		for i := range pa {
			pa[i] = seccomp.AnyValue{}
		}
		pa[arg] = seccomp.MaskedEqual(setIDBits, 0)
		if fa, ok := openFlagsArg[name]; ok {
			var noCreate seccomp.PerArg
			for i := range noCreate {
				noCreate[i] = seccomp.AnyValue{}
			}
			noCreate[fa] = seccomp.MaskedEqual(createFlags, 0)
			allow.Set(sysnums[name], seccomp.Or{pa, noCreate})
			continue
		}
		allow.Set(sysnums[name], pa)
	}
	allow.Set(sysnums["clone"], seccomp.PerArg{seccomp.MaskedEqual(cloneNamespaceFlags, 0)})
	allow.Set(sysnums["ioctl"], seccomp.MatchAll{})
	allow.Set(sysnums["socket"], seccomp.MatchAll{})
	var personas seccomp.Or
	for _, p := range allowedPersonalities {
		personas = append(personas, seccomp.PerArg{seccomp.MaskedEqual(low32, p)})
	}
	allow.Set(sysnums["personality"], personas)

	return []seccomp.RuleSet{
		{Rules: deny, Action: seccomp.ReturnError.Code(uint16(unix.EPERM))},
		{Rules: enosys, Action: seccomp.ReturnError.Code(uint16(unix.ENOSYS))},
		{Rules: allow, Action: seccomp.Allow},
	}, nil
}

// mergeArgs returns the union of two name-to-argument tables.
func mergeArgs(a, b map[string]int) map[string]int {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}
