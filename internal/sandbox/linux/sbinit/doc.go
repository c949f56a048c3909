// Package sbinit is the sandbox init: the small program that runs as PID 1
// inside a new sandbox, builds the boundary from the inside (mounts,
// pivot_root, hostname, loopback, /proc masks, rlimits, capabilities, securebits,
// no_new_privs, Landlock, seccomp), makes the in-situ attempts whose
// traces the trusted side judges (insitu_linux.go: each fails with an
// errno under the filter, never blocks, and is released before the program
// starts; when the program is its namespace's root, also the /proc/1/mem
// probe of memprobe_linux.go), waits until the trusted side has read
// its evidence, then starts the program in its own session (with
// Config.Tty, on a pty of the sandbox's own devpts as its controlling
// terminal, whose master it hands to the trusted side and closes:
// tty_linux.go), reaps children and forwards signals. In daemon mode (Config.Daemon) it outlives its
// spawner and the program, and starts further programs that the host's
// root asks for on the exec channel — always from its main thread, the
// one the hardening was applied to, on a pty of the sandbox's own when
// the exec asks for one (its master sent back and closed, as for the
// main program) (daemon_linux.go). With Config.Execs a standalone init
// serves the same exec channel, keeps its parent-death signal and still
// ends with its program; with Config.TtyAtStart it hands out the
// program's pty master before it reports ready (init_linux.go).
// In image mode (Config.Image) it mounts
// on an OCI image's root, resolving every mount point under the root's
// descriptor without following a symlink (image_linux.go).
//
// Plane: sandbox. It is the one package whose code runs inside the
// boundary (as PID 1 of the sandbox, before and after hardening); the
// userns holder (HoldArgv0) it also dispatches runs for the trusted side.
//
// It is the same binary as cordon, re-executed with argv[0] == Argv0. Its
// init function dispatches before heavy packages (the SQLite driver, the
// seccomp compiler) are initialised: Go initialises packages in import-path
// order once their imports are ready, and this package imports only the
// standard library, golang.org/x/sys and go-landlock, whose paths sort first.
//
// It must never run the program half-hardened: every step is fatal on
// failure, and the result is asserted before the program is started. It
// must never treat anything it reports as evidence: the trusted side reads
// the live process itself; these reports are hints.
package sbinit
