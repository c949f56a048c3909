//go:build linux && (amd64 || arm64)

package filter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// brokerSocketSyscalls are refused to a broker process (the unprivileged
// gateway processes that parse agent traffic): it holds only descriptors
// handed to it — its listener, its channel to the privileged side, and
// connected sockets the privileged side's checked dialer opened — and must
// create no socket of its own. An empty network namespace alone does not
// stop it: pathname Unix sockets (the D-Bus system bus, cordon's own daemon
// socket) are reached through the filesystem, not the network namespace.
//
// Nor may it point a socket it was handed somewhere else. The dialer's
// sockets live in the host's network namespace: connect(AF_UNSPEC)
// disconnects a connected TCP socket and a second connect(2) re-targets
// it (host loopback, anything the host routes to); bind and listen would
// make it a host listener. So connect, bind and listen are refused too
// (the process only accepts on its listener and reads and writes the
// sockets it holds); brokerFastOpen covers the one other way to connect.
var brokerSocketSyscalls = []string{"socket", "socketpair", "connect", "bind", "listen"}

// brokerFastOpen are the send calls whose flags argument (its index here)
// may carry MSG_FASTOPEN: a send with MSG_FASTOPEN and an address connects
// an unconnected TCP socket — and shutdown(SHUT_RD) makes a listener one —
// without connect(2). The broker filter refuses the flag.
var brokerFastOpen = map[string]int{"sendto": 3, "sendmsg": 2, "sendmmsg": 3}

var (
	brokerOnce  sync.Once
	brokerBuilt *Program
	errBroker   error
)

// BuildBroker compiles the broker processes' filter for runtime.GOARCH:
// everything the sandbox filter denies outright (deniedGroups: mounts,
// namespaces, cross-process access, kernel code, keyrings, …), plus every
// call that creates, connects, binds or listens on a socket, a send with
// MSG_FASTOPEN, the IPC calls and a signal to any process but the caller,
// fails with EPERM; anything else is allowed
// (the process is Go code cordon ships, not an agent). A call through a
// foreign ABI kills the process. Compiled once per process, for that
// process: it names the caller's pid (install it in the process that
// built it).
func BuildBroker() (*Program, error) {
	brokerOnce.Do(func() { brokerBuilt, errBroker = buildBroker() })
	if errBroker != nil {
		return nil, errBroker
	}
	return &Program{Arch: brokerBuilt.Arch, Raw: slices.Clone(brokerBuilt.Raw), SHA256: brokerBuilt.SHA256}, nil
}

// brokerIPCSyscalls (System V IPC and POSIX message queues) are refused
// to a broker process too: it shares the host's IPC namespace, where
// these objects are host-wide (a host-wide count of ids a process could
// exhaust) and outlive the process that made them — a later gateway with
// the same leased uid would find them. The process uses none.
var brokerIPCSyscalls = ipcSyscalls

// brokerSelfSignal are the calls that signal a process named by its first
// argument: a broker process may name only itself (the Go runtime signals
// its own threads with tgkill and raises with kill). brokerOtherSignal,
// which name a thread or process otherwise (tkill by thread id, pidfds),
// are refused whatever their arguments; the process uses neither.
var (
	brokerSelfSignal  = []string{"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"}
	brokerOtherSignal = []string{"tkill", "pidfd_open", "pidfd_send_signal"}
)

// BrokerDenied lists (sorted) the calls the broker filter refuses.
func BrokerDenied() []string {
	names := slices.Concat(append(slices.Clone(deniedGroups), brokerSocketSyscalls, brokerIPCSyscalls, brokerOtherSignal)...)
	slices.Sort(names)
	return slices.Compact(names)
}

func buildBroker() (*Program, error) {
	if runtime.GOARCH != archName {
		return nil, fmt.Errorf("broker seccomp filter for %s: tables are for %s", runtime.GOARCH, archName)
	}
	deny := seccomp.NewSyscallRules()
	for _, name := range BrokerDenied() {
		nr, ok := sysnums[name]
		if !ok {
			return nil, fmt.Errorf("broker seccomp policy: syscall %q unknown on %s", name, archName)
		}
		deny.Set(nr, seccomp.MatchAll{})
	}
	// Signals: only to itself (by its pid as the kernel knows it: the
	// process builds its own filter). Without this a compromised broker
	// process could stop or kill its siblings and the socket source,
	// which run as the same uid.
	self := seccomp.NotEqual(uintptr(os.Getpid()))
	for _, name := range brokerSelfSignal {
		deny.Set(sysnums[name], seccomp.PerArg{self})
	}
	for name, arg := range brokerFastOpen {
		var args seccomp.PerArg
		for i := range arg {
			args[i] = seccomp.AnyValue{}
		}
		args[arg] = seccomp.MaskedEqual(unix.MSG_FASTOPEN, unix.MSG_FASTOPEN)
		deny.Set(sysnums[name], args)
	}
	return compileDenylist("broker", []seccomp.RuleSet{{Rules: deny, Action: seccomp.ReturnError.Code(uint16(unix.EPERM))}})
}

// compileDenylist compiles rule sets over a default of Allow — the broker
// processes' and the socket source's filters, which list what they refuse
// — with a foreign ABI killing the process. A denylist matches syscall
// numbers exactly, so a number with the x32 bit (0x40000000 on amd64:
// the same calls through the x32 ABI, which a kernel built with
// CONFIG_X86_X32_ABI serves under the native audit arch) would match no
// rule and be allowed: socket(2) through x32 would create a socket. The
// program therefore starts by refusing every number at or above that bit
// (arm64 has no such numbers).
func compileDenylist(what string, sets []seccomp.RuleSet) (*Program, error) {
	prog := &seccomp.Program{
		RuleSets: sets,
		Options: seccomp.ProgramOptions{
			DefaultAction: seccomp.Allow,
			BadArchAction: seccomp.KillProcess,
		},
	}
	insns, _, err := prog.Build()
	if err != nil {
		return nil, fmt.Errorf("compile %s seccomp filter for %s: %w", what, archName, err)
	}
	// A = seccomp_data.nr; if A >= x32SyscallBit return ERRNO(EPERM);
	// then gVisor's program (its jumps are relative, so prefixing keeps
	// them).
	guard := []bpf.Instruction{
		{OpCode: bpf.Ld | bpf.Abs | bpf.W, K: 0},
		{OpCode: bpf.Jmp | bpf.Jge | bpf.K, JumpIfTrue: 0, JumpIfFalse: 1, K: x32SyscallBit},
		{OpCode: bpf.Ret | bpf.K, K: uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)},
	}
	insns = append(guard, insns...)
	if len(insns) > maxInstructions {
		return nil, fmt.Errorf("compile %s seccomp filter for %s: %d instructions, limit %d", what, archName, len(insns), maxInstructions)
	}
	raw := encode(insns)
	sum := sha256.Sum256(raw)
	return &Program{Arch: archName, Raw: raw, SHA256: hex.EncodeToString(sum[:])}, nil
}

// socketSourceDenied are refused to the socket source, the one helper
// process per sandbox that lives in the host's network namespace and the
// gateway's cgroups: it creates unconnected TCP sockets (so their memory
// is charged to the gateway's group, not to the privileged side) and
// hands them to the privileged side, which checks and connects them. It
// never connects, binds, listens or accepts itself.
var socketSourceDenied = []string{"socketpair", "connect", "bind", "listen", "accept", "accept4"}

var (
	sourceOnce  sync.Once
	sourceBuilt *Program
	errSource   error
)

// BuildSocketSource compiles the socket source's filter: the sandbox
// filter's outright denials, socketSourceDenied, and socket(2) for any
// domain but AF_INET and AF_INET6, fail with EPERM.
func BuildSocketSource() (*Program, error) {
	sourceOnce.Do(func() { sourceBuilt, errSource = buildSocketSource() })
	if errSource != nil {
		return nil, errSource
	}
	return &Program{Arch: sourceBuilt.Arch, Raw: slices.Clone(sourceBuilt.Raw), SHA256: sourceBuilt.SHA256}, nil
}

func buildSocketSource() (*Program, error) {
	if runtime.GOARCH != archName {
		return nil, fmt.Errorf("socket source seccomp filter for %s: tables are for %s", runtime.GOARCH, archName)
	}
	deny := seccomp.NewSyscallRules()
	names := slices.Concat(append(slices.Clone(deniedGroups), socketSourceDenied)...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		nr, ok := sysnums[name]
		if !ok {
			return nil, fmt.Errorf("socket source seccomp policy: syscall %q unknown on %s", name, archName)
		}
		deny.Set(nr, seccomp.MatchAll{})
	}
	// socket(2): only the IP families; anything else (AF_UNIX to a
	// pathname socket, AF_NETLINK, AF_PACKET …) is refused.
	deny.Set(sysnums["socket"], seccomp.MatchAll{})
	allowSocket := seccomp.NewSyscallRules()
	allowSocket.Set(sysnums["socket"], seccomp.Or{
		seccomp.PerArg{seccomp.MaskedEqual(low32, unix.AF_INET)},
		seccomp.PerArg{seccomp.MaskedEqual(low32, unix.AF_INET6)},
	})
	return compileDenylist("socket source", []seccomp.RuleSet{
		{Rules: allowSocket, Action: seccomp.Allow},
		{Rules: deny, Action: seccomp.ReturnError.Code(uint16(unix.EPERM))},
	})
}
