package sbinit

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	if len(os.Args) == 0 {
		return
	}
	if os.Args[0] == HoldArgv0 {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}
	if os.Args[0] != Argv0 {
		return
	}
	// Second layer behind cordon's own: every descriptor above the control
	// socket and the mount trees (moved and closed while the root is
	// built) is close-on-exec, so the program gets exactly 0, 1 and 2.
	if err := unix.CloseRange(ControlFD, ^uint(0), closeRangeCloexec); err != nil {
		os.Exit(125)
	}
	// Capabilities, securebits and Landlock are per thread, and the program
	// is started from this thread. The runtime keeps the main goroutine
	// locked to the main thread while package initialisers run, and Main
	// never returns to it, so the lock holds for good. An explicit
	// LockOSThread would also start the runtime's template thread: one more
	// thread for every all-threads hardening call to stop and signal.
	os.Exit(Main())
}

// closeRangeCloexec is CLOSE_RANGE_CLOEXEC (linux/close_range.h).
const closeRangeCloexec = 1 << 2

// ctl is the control channel to the trusted side.
type ctl struct{ fd int }

func (c ctl) send(m Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = unix.Write(c.fd, b)
	return err
}

func (c ctl) recv(v any) error {
	buf := make([]byte, MaxMessage)
	for {
		n, err := unix.Read(c.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("control channel closed")
		}
		return json.Unmarshal(buf[:n], v)
	}
}

// fail reports a failed step and exits. The trusted side kills the sandbox
// on any error message; exiting also ends every process in the namespace.
func (c ctl) fail(step string, err error) int {
	m := Message{Type: "error", Step: step, Error: err.Error()}
	if e, ok := err.(syscall.Errno); ok {
		m.Errno = int(e)
	}
	_ = c.send(m)
	return 125
}

type timings struct {
	last time.Time
	m    map[string]int64
}

func (t *timings) mark(name string) {
	now := time.Now()
	t.m[name] = now.Sub(t.last).Microseconds()
	t.last = now
}

// Main runs the init. It returns only on failure or after the program ended.
func Main() int {
	c := ctl{fd: ControlFD}
	// The program's crash signals sent with kill(2) from inside would make
	// the Go runtime dump and exit: take them, and drop them. (Signals the
	// runtime raises itself for its own faults stay fatal.)
	ignored := make(chan os.Signal, 8)
	signal.Notify(ignored, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGABRT,
		syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGPIPE, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGSTKFLT, syscall.SIGPWR)
	go func() {
		for range ignored {
		}
	}()
	var cfg Config
	if err := c.recv(&cfg); err != nil {
		return c.fail("read config", err)
	}
	if err := checkModes(&cfg); err != nil {
		return c.fail("read config", err)
	}
	tm := timings{last: time.Now(), m: map[string]int64{}}
	if err := buildRoot(&cfg); err != nil {
		return c.fail("build root", err)
	}
	tm.mark("root")
	if err := configureNamespaces(&cfg); err != nil {
		return c.fail("configure namespaces", err)
	}
	tm.mark("namespaces")
	// After configureNamespaces: its /proc/sys writes must be done before
	// /proc/sys is read-only. Before harden: mounting needs capabilities.
	if err := maskProc(&cfg); err != nil {
		return c.fail("mask /proc", err)
	}
	tm.mark("masks")
	abi, err := harden(&cfg, &tm)
	if err != nil {
		return c.fail("harden", err)
	}
	// After harden: the attempts must meet every layer, seccomp included.
	// Before ready: the trusted side judges their traces with the rest of
	// the evidence, and "go" comes only after.
	traces := attemptInSitu(&cfg)
	var probes []int
	if cfg.MemProbe {
		if probes, err = memProbes(); err != nil {
			endProbes(probes)
			return c.fail("mem probe", err)
		}
	}
	tm.mark("insitu")
	// After harden, as the program itself could open it; before ready, so
	// the trusted side holds the console before the program starts.
	console, err := consoleAtStart(c, &cfg)
	if err != nil {
		return c.fail("pty", err)
	}
	if err := c.send(Message{Type: "ready", LandlockABI: abi, Timings: tm.m}); err != nil {
		return 125
	}
	var m Message
	if err := c.recv(&m); err != nil || m.Type != "go" {
		// The trusted side refused admission or went away: never start.
		return 125
	}
	traces.release()
	endProbes(probes)
	if cfg.Daemon || cfg.Execs {
		return superviseDaemon(c, &cfg, console)
	}
	return supervise(c, &cfg, console)
}

// checkModes refuses a configuration whose modes contradict each other.
func checkModes(cfg *Config) error {
	switch {
	case cfg.Daemon && cfg.Tty != nil:
		return fmt.Errorf("a pseudo-terminal is for the main program of a standalone sandbox only")
	case cfg.Daemon && cfg.Execs:
		return fmt.Errorf("a daemon-mode sandbox serves execs already; Execs is for a standalone one")
	case cfg.Execs && cfg.ExecFD <= 2:
		return fmt.Errorf("a standalone sandbox serving execs needs its exec socket")
	case cfg.TtyAtStart && cfg.Tty == nil:
		return fmt.Errorf("a console at start without a pseudo-terminal")
	case cfg.Execs && len(cfg.Argv) == 0:
		return fmt.Errorf("a standalone sandbox ends with its main program: none was given")
	}
	return nil
}

// consoleAtStart opens the program's pseudo-terminal now (Config.TtyAtStart)
// and sends its master in a "console" message, then closes the master: it
// never stays in the sandbox, and it is gone before "ready" is sent. The
// returned pty holds only the slave (close-on-exec), for the program.
// Without TtyAtStart it returns nil.
func consoleAtStart(c ctl, cfg *Config) (*pty, error) {
	if !cfg.TtyAtStart {
		return nil, nil
	}
	p, err := openPty(cfg.Tty)
	if err != nil {
		return nil, err
	}
	err = c.sendFD(Message{Type: "console", Tty: true}, p.master)
	unix.Close(p.master)
	p.master = -1
	if err != nil {
		unix.Close(p.slave)
		return nil, fmt.Errorf("send the console: %w", err)
	}
	return p, nil
}
