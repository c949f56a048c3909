//go:build linux && (amd64 || arm64)

package filter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// Actions as the kernel reads them from the program's return value.
const (
	retAllow  = uint32(unix.SECCOMP_RET_ALLOW)
	retKill   = uint32(unix.SECCOMP_RET_KILL_PROCESS)
	retEPERM  = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	retENOSYS = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
)

// action names a seccomp return value for test messages.
type action uint32

func (a action) String() string {
	switch uint32(a) {
	case retAllow:
		return "ALLOW"
	case retKill:
		return "KILL_PROCESS"
	}
	if uint32(a)&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
		return fmt.Sprintf("ERRNO(%s)", unix.ErrnoName(unix.Errno(uint32(a)&unix.SECCOMP_RET_DATA)))
	}
	return fmt.Sprintf("%#x", uint32(a))
}

// compiled decodes the Raw bytes that Build returns (not gVisor's own
// instructions) into a program for gVisor's interpreter.
func compiled(tb testing.TB) bpf.Program {
	tb.Helper()
	p, err := Build()
	if err != nil {
		tb.Fatalf("Build() = %v", err)
	}
	filters, err := sockFilters(p)
	if err != nil {
		tb.Fatalf("sockFilters(Build()) = %v", err)
	}
	insns := make([]bpf.Instruction, len(filters))
	for i, f := range filters {
		insns[i] = bpf.Instruction{OpCode: f.Code, JumpIfTrue: f.Jt, JumpIfFalse: f.Jf, K: f.K}
	}
	prog, err := bpf.Compile(insns, false)
	if err != nil {
		tb.Fatalf("bpf.Compile(Build().Raw) = %v", err)
	}
	return prog
}

// eval runs the program on a synthetic seccomp_data.
func eval(tb testing.TB, prog bpf.Program, arch uint32, nr uintptr, args ...uint64) action {
	tb.Helper()
	d := linux.SeccompData{Nr: int32(nr), Arch: arch}
	copy(d.Args[:], args)
	buf := make([]byte, d.SizeBytes())
	ret, err := bpf.Exec[bpf.NativeEndian](prog, seccomp.DataAsBPFInput(&d, buf))
	if err != nil {
		tb.Fatalf("bpf.Exec(nr %d) = %v", nr, err)
	}
	return action(ret)
}

func TestFilter(t *testing.T) {
	prog := compiled(t)
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	const atFDCWD = uint64(0xffffff9c) // AT_FDCWD as the int it is
	for _, tc := range []struct {
		name    string
		syscall string
		arch    uint32 // 0: native
		x32     bool
		args    []uint64
		want    action
	}{
		{name: "read", syscall: "read", want: action(retAllow)},
		{name: "write", syscall: "write", args: []uint64{1, 0, 5}, want: action(retAllow)},
		{name: "openat(O_CREAT, 0644)", syscall: "openat", args: []uint64{atFDCWD, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, want: action(retAllow)},
		{name: "clone(SIGCHLD)", syscall: "clone", args: []uint64{uint64(unix.SIGCHLD)}, want: action(retAllow)},
		{name: "clone(thread)", syscall: "clone", args: []uint64{threadFlags}, want: action(retAllow)},
		{name: "clone(CLONE_VFORK|CLONE_VM|CLONE_PIDFD)", syscall: "clone", args: []uint64{unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD)}, want: action(retAllow)},
		{name: "ioctl(TCGETS)", syscall: "ioctl", args: []uint64{0, unix.TCGETS}, want: action(retAllow)},
		{name: "socket(AF_INET)", syscall: "socket", args: []uint64{unix.AF_INET, unix.SOCK_STREAM}, want: action(retAllow)},
		{name: "socket(AF_UNIX)", syscall: "socket", args: []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, want: action(retAllow)},
		{name: "personality(0)", syscall: "personality", args: []uint64{0}, want: action(retAllow)},
		{name: "personality(0xffffffff)", syscall: "personality", args: []uint64{0xffffffff}, want: action(retAllow)},
		{name: "fchmodat(0755)", syscall: "fchmodat", args: []uint64{atFDCWD, 0, 0o755}, want: action(retAllow)},
		{name: "chmod(0755)", syscall: "chmod", args: []uint64{0, 0o755}, want: action(retAllow)},
		{name: "mkdirat(01777)", syscall: "mkdirat", args: []uint64{atFDCWD, 0, 0o1777}, want: action(retAllow)},
		{name: "seccomp", syscall: "seccomp", want: action(retAllow)},
		{name: "landlock_restrict_self", syscall: "landlock_restrict_self", want: action(retAllow)},
		{name: "prctl", syscall: "prctl", args: []uint64{unix.PR_SET_NO_NEW_PRIVS, 1}, want: action(retAllow)},
		{name: "name_to_handle_at", syscall: "name_to_handle_at", want: action(retAllow)},

		{name: "mount", syscall: "mount", want: action(retEPERM)},
		{name: "ptrace", syscall: "ptrace", want: action(retEPERM)},
		{name: "bpf", syscall: "bpf", want: action(retEPERM)},
		{name: "keyctl", syscall: "keyctl", want: action(retEPERM)},
		{name: "io_uring_setup", syscall: "io_uring_setup", want: action(retEPERM)},
		{name: "unshare(CLONE_NEWUSER)", syscall: "unshare", args: []uint64{unix.CLONE_NEWUSER}, want: action(retEPERM)},
		{name: "setns", syscall: "setns", want: action(retEPERM)},
		{name: "userfaultfd", syscall: "userfaultfd", want: action(retEPERM)},
		{name: "perf_event_open", syscall: "perf_event_open", want: action(retEPERM)},
		{name: "open_by_handle_at", syscall: "open_by_handle_at", want: action(retEPERM)},
		{name: "adjtimex", syscall: "adjtimex", want: action(retEPERM)},
		{name: "clone(CLONE_NEWUSER)", syscall: "clone", args: []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, want: action(retEPERM)},
		{name: "clone3", syscall: "clone3", want: action(retENOSYS)},
		{name: "io_setup (host-wide aio-max-nr)", syscall: "io_setup", want: action(retENOSYS)},
		{name: "io_submit", syscall: "io_submit", want: action(retENOSYS)},
		{name: "openat2", syscall: "openat2", want: action(retENOSYS)},
		{name: "chmod(04755)", syscall: "chmod", args: []uint64{0, 0o4755}, want: action(retEPERM)},
		{name: "fchmodat(02755)", syscall: "fchmodat", args: []uint64{atFDCWD, 0, 0o2755}, want: action(retEPERM)},
		{name: "fchmodat2(06755)", syscall: "fchmodat2", args: []uint64{atFDCWD, 0, 0o6755}, want: action(retEPERM)},
		{name: "fchmod(04000)", syscall: "fchmod", args: []uint64{3, 0o4000}, want: action(retEPERM)},
		{name: "openat(O_CREAT, 04755)", syscall: "openat", args: []uint64{atFDCWD, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, want: action(retEPERM)},
		{name: "open(O_CREAT, 04755)", syscall: "open", args: []uint64{0, unix.O_CREAT, 0o4755}, want: action(retEPERM)},
		{name: "creat(02755)", syscall: "creat", args: []uint64{0, 0o2755}, want: action(retEPERM)},
		{name: "mkdir(02755)", syscall: "mkdir", args: []uint64{0, 0o2755}, want: action(retEPERM)},
		{name: "mkdirat(02755)", syscall: "mkdirat", args: []uint64{atFDCWD, 0, 0o2755}, want: action(retEPERM)},
		{name: "mknodat(S_IFREG|04755)", syscall: "mknodat", args: []uint64{atFDCWD, 0, unix.S_IFREG | 0o4755}, want: action(retEPERM)},
		{name: "ioctl(TIOCSTI)", syscall: "ioctl", args: []uint64{0, unix.TIOCSTI}, want: action(retEPERM)},
		{name: "ioctl(TIOCSTI, high bits set)", syscall: "ioctl", args: []uint64{0, 0xdead_0000_0000 | unix.TIOCSTI}, want: action(retEPERM)},
		{name: "ioctl(TIOCLINUX)", syscall: "ioctl", args: []uint64{0, unix.TIOCLINUX}, want: action(retEPERM)},
		{name: "ioctl(TIOCSETD)", syscall: "ioctl", args: []uint64{1, unix.TIOCSETD}, want: action(retEPERM)},
		{name: "ioctl(TIOCSETD, high bits set)", syscall: "ioctl", args: []uint64{1, 0xdead_0000_0000 | unix.TIOCSETD}, want: action(retEPERM)},
		{name: "ioctl(TIOCGETD)", syscall: "ioctl", args: []uint64{1, unix.TIOCGETD}, want: action(retAllow)},
		{name: "socket(AF_VSOCK)", syscall: "socket", args: []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, want: action(retEPERM)},
		{name: "socket(AF_INET, IPPROTO_MPTCP)", syscall: "socket", args: []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: action(retEPERM)},
		{name: "socket(AF_INET6, IPPROTO_MPTCP, high bits set)", syscall: "socket", args: []uint64{unix.AF_INET6, unix.SOCK_STREAM, 0xdead_0000_0000 | unix.IPPROTO_MPTCP}, want: action(retEPERM)},
		{name: "socket(AF_INET, IPPROTO_TCP)", syscall: "socket", args: []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}, want: action(retAllow)},
		{name: "personality(ADDR_NO_RANDOMIZE)", syscall: "personality", args: []uint64{0x0040000}, want: action(retEPERM)},

		{name: "read, wrong arch", syscall: "read", arch: unix.AUDIT_ARCH_I386, want: action(retKill)},
		{name: "mount, wrong arch", syscall: "mount", arch: unix.AUDIT_ARCH_ARM, want: action(retKill)},
		{name: "read, x32", syscall: "read", x32: true, want: action(retEPERM)},
		{name: "openat, x32", syscall: "openat", x32: true, args: []uint64{atFDCWD, 0, 0, 0o644}, want: action(retEPERM)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr, ok := sysnums[tc.syscall]
			if !ok {
				t.Skipf("%s has no %s", archName, tc.syscall)
			}
			arch := tc.arch
			if arch == 0 {
				arch = auditArch
			}
			if tc.x32 {
				nr |= x32SyscallBit
			}
			if got := eval(t, prog, arch, nr, tc.args...); got != tc.want {
				t.Errorf("f(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// allowedNames lists every syscall that some argument values may pass.
func allowedNames() []string {
	names := slices.Concat(allowedGroups...)
	for name := range modeArgSyscalls {
		names = append(names, name)
	}
	return append(names, "clone", "ioctl", "socket", "personality")
}

// TestTables checks the whole number space against the tables: every
// allowed name passes with zero arguments, every denied name is refused,
// every other number up to 1024 is refused with EPERM, and no number with
// the x32 bit is ever allowed.
func TestTables(t *testing.T) {
	prog := compiled(t)
	allowed := make(map[uintptr]bool)
	for _, name := range allowedNames() {
		allowed[sysnums[name]] = true
		if got := eval(t, prog, auditArch, sysnums[name]); got != action(retAllow) {
			t.Errorf("f(%q) = %v, want %v", name, got, action(retAllow))
		}
	}
	for _, name := range Denied() {
		want := action(retEPERM)
		if slices.Contains(enosysSyscalls, name) {
			want = action(retENOSYS)
		}
		for _, args := range [][]uint64{nil, {uint64(unix.SIGCHLD)}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}} {
			if got := eval(t, prog, auditArch, sysnums[name], args...); got != want {
				t.Errorf("f(%q%v) = %v, want %v", name, args, got, want)
			}
		}
	}
	enosys := make(map[uintptr]bool)
	for _, name := range enosysSyscalls {
		enosys[sysnums[name]] = true
	}
	for nr := range uintptr(1024) {
		if allowed[nr] || enosys[nr] {
			continue
		}
		if got := eval(t, prog, auditArch, nr); got != action(retEPERM) {
			t.Errorf("f(%q) = %v, want %v", fmt.Sprintf("nr %d", nr), got, action(retEPERM))
		}
	}
	for nr := range allowed {
		for _, args := range [][]uint64{nil, {uint64(unix.SIGCHLD)}, {0, 0, 0, 0o644}} {
			if got := eval(t, prog, auditArch, nr|x32SyscallBit, args...); got == action(retAllow) {
				t.Errorf("f(%q) = %v, want not %v", fmt.Sprintf("x32 nr %#x", nr|x32SyscallBit), got, action(retAllow))
			}
		}
	}
}

func TestCloneNamespaceFlags(t *testing.T) {
	prog := compiled(t)
	for _, tc := range []struct {
		name string
		flag uint64
	}{
		{"CLONE_NEWNS", unix.CLONE_NEWNS},
		{"CLONE_NEWUTS", unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", unix.CLONE_NEWPID},
		{"CLONE_NEWNET", unix.CLONE_NEWNET},
		{"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP},
	} {
		if got := eval(t, prog, auditArch, sysnums["clone"], tc.flag|uint64(unix.SIGCHLD)); got != action(retEPERM) {
			t.Errorf("f(%q) = %v, want %v", tc.name, got, action(retEPERM))
		}
	}
}

func TestModeBits(t *testing.T) {
	prog := compiled(t)
	for name, arg := range modeArgSyscalls {
		for _, tc := range []struct {
			mode uint64
			want action
		}{
			{0o644, action(retAllow)},
			{0o1777, action(retAllow)},
			{0o4000, action(retEPERM)},
			{0o2000, action(retEPERM)},
			{0o6755, action(retEPERM)},
			{unix.S_IFREG | 0o4755, action(retEPERM)},
		} {
			args := make([]uint64, 6)
			args[arg] = tc.mode
			if fa, ok := openFlagsArg[name]; ok {
				args[fa] = unix.O_CREAT | unix.O_WRONLY
			}
			if got := eval(t, prog, auditArch, sysnums[name], args...); got != tc.want {
				t.Errorf("f(%q) = %v, want %v", fmt.Sprintf("%s(mode %#o)", name, tc.mode), got, tc.want)
			}
		}
	}
}

// TestOpenModeOnlyWhenCreating: an open without O_CREAT or O_TMPFILE is
// allowed whatever its mode register holds (the kernel ignores it, and
// some libcs leave garbage there); with either, setuid and setgid bits are
// refused as for every mode-setting call.
func TestOpenModeOnlyWhenCreating(t *testing.T) {
	prog := compiled(t)
	for name, fa := range openFlagsArg {
		arg, ok := modeArgSyscalls[name]
		if !ok {
			continue // no such call on this architecture (open on arm64)
		}
		for _, tc := range []struct {
			flags, mode uint64
			want        action
		}{
			{unix.O_RDONLY, 0o6755, action(retAllow)},
			{unix.O_RDWR | unix.O_APPEND, 0xffffffffffffffff, action(retAllow)},
			{unix.O_RDONLY | unix.O_DIRECTORY, 0o4000, action(retAllow)},
			{unix.O_RDONLY | 0xffffffff00000000, 0o4000, action(retAllow)},
			{unix.O_CREAT | unix.O_WRONLY, 0o4755, action(retEPERM)},
			{unix.O_CREAT | unix.O_WRONLY, 0o644, action(retAllow)},
			{unix.O_TMPFILE | unix.O_RDWR, 0o2755, action(retEPERM)},
			{unix.O_TMPFILE | unix.O_RDWR, 0o600, action(retAllow)},
		} {
			args := make([]uint64, 6)
			args[fa], args[arg] = tc.flags, tc.mode
			if got := eval(t, prog, auditArch, sysnums[name], args...); got != tc.want {
				t.Errorf("f(%q) = %v, want %v", fmt.Sprintf("%s(flags %#x, mode %#o)", name, tc.flags, tc.mode), got, tc.want)
			}
		}
	}
}

func TestBuildDeterministic(t *testing.T) {
	a, err := Build()
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	b, err := Build()
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	if a.SHA256 != b.SHA256 {
		t.Errorf("f(%q) = %v, want %v", "Build().SHA256", b.SHA256, a.SHA256)
	}
	// The cache must not hide nondeterminism (map order) in compilation.
	for range 3 {
		c, err := build()
		if err != nil {
			t.Fatalf("build() = %v", err)
		}
		if diff := cmp.Diff(a, c); diff != "" {
			t.Errorf("build() differs from Build() (-cached +fresh):\n%s", diff)
		}
	}
	sum := sha256.Sum256(a.Raw)
	if got := hex.EncodeToString(sum[:]); got != a.SHA256 {
		t.Errorf("f(%q) = %v, want %v", "sha256(Raw)", got, a.SHA256)
	}
	if a.Arch != archName {
		t.Errorf("f(%q) = %v, want %v", "Arch", a.Arch, archName)
	}
	t.Logf("%s filter: %d instructions, sha256 %s", a.Arch, len(a.Raw)/instructionSize, a.SHA256)

	// Callers get copies: scribbling on one leaves the cache intact.
	clear(a.Raw)
	if c, _ := Build(); c.SHA256 != b.SHA256 || !slices.Equal(c.Raw, b.Raw) {
		t.Errorf("f(%q) changed after a caller cleared its copy", "Build()")
	}
}

func TestDenied(t *testing.T) {
	got := Denied()
	for _, name := range []string{"mount", "ptrace", "bpf", "keyctl", "io_uring_setup", "userfaultfd", "unshare", "setns", "clone3", "openat2"} {
		if !slices.Contains(got, name) {
			t.Errorf("f(%q) = false, want true", "Denied() contains "+name)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("f(%q) = false, want true", "Denied() is sorted")
	}
	if c := slices.Compact(slices.Clone(got)); len(c) != len(got) {
		t.Errorf("f(%q) = %d names after dedup, want %d", "Denied()", len(c), len(got))
	}
	for _, name := range allowedNames() {
		if slices.Contains(got, name) {
			t.Errorf("f(%q) = true, want false", "Denied() contains allowed "+name)
		}
	}
}

func BenchmarkBuild(b *testing.B) {
	for b.Loop() {
		if _, err := build(); err != nil {
			b.Fatal(err)
		}
	}
}
