// Package filter owns the sandbox's seccomp policy: which system calls an
// agent may make, kept as data in package-level tables, and compiled with
// gvisor.dev/gvisor/pkg/seccomp into a classic-BPF program for the host
// architecture.
//
// Plane: root. Build runs on the trusted side, which hands the program's
// bytes to the sandbox init (package sbinit installs them itself, without
// importing this package); Install is for this package's tests.
//
// The policy is an allowlist modelled on Docker's default profile for a
// container with no capabilities. Anything not listed fails with EPERM
// (ERRNO rather than KILL, so runtimes that probe features such as io_uring
// fall back instead of dying). A system call made through another ABI
// (i386 via int 0x80 on amd64, arm32 compat on arm64) kills the process,
// since its numbers mean different calls; x32 calls on amd64 carry bit
// 0x40000000 in their number, which no rule matches, so they fail with EPERM
// too. clone3 and openat2 fail with ENOSYS, so that libc falls back to clone
// and openat, whose arguments the filter can see; so do the native AIO calls
// (io_setup and the rest), whose one host-wide pool (fs.aio-max-nr) nothing
// bounds per sandbox (docs/host-pools.md).
//
// The package must never:
//   - allow a path into a namespace, mount, ptrace, bpf, perf, keyring,
//     io_uring, userfaultfd or kernel-module call. Build refuses to compile
//     a policy in which a denied name also appears as allowed;
//   - allow setuid or setgid mode bits to be created, through chmod or
//     through file creation;
//   - compile a program for an architecture it has no tables for. Build
//     fails closed, with an error wrapping errors.ErrUnsupported, on anything
//     but linux/amd64 and linux/arm64.
//
// Install (linux only) sets no_new_privs and installs a Program on every
// thread of the calling process. It is irreversible; tests exercise it only
// in a re-executed child process.
//
// Seccomp is one layer of several: no capabilities, user namespaces and
// Landlock carry most of the weight, and several calls denied here
// (mount, kexec, module loading) would fail without this layer too. The
// tests show which denials this layer itself is responsible for.
package filter
