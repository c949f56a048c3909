package hostmgr

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The service manager's notify protocol (sd_notify(3)), spoken directly:
// one datagram of newline-separated KEY=VALUE assignments to the
// unixgram socket named by $NOTIFY_SOCKET (a path, or "@name" for the
// abstract namespace). No cgo and no libsystemd: the protocol is one
// sendto. A missing, broken or full socket never holds the daemon up: a
// send has a short deadline, and its failure is logged once at WARN.

// NotifyEnv is the variable the service manager names its socket in.
const NotifyEnv = "NOTIFY_SOCKET"

// notifyTimeout bounds one send: a service manager that does not read
// must not stall start, reload or stop.
const notifyTimeout = time.Second

// Notifier sends service-manager notifications. The zero value and a nil
// *Notifier send nothing.
type Notifier struct {
	addr   string
	log    *slog.Logger
	mu     sync.Mutex
	warned bool
}

// NotifierFromEnv reads $NOTIFY_SOCKET and removes it from the process
// environment at once, so that no child the daemon starts (sandbox,
// gateway, broker, tool server) inherits it: only the daemon may speak
// for the service. It returns nil when the variable is unset or empty.
func NotifierFromEnv(log *slog.Logger) *Notifier {
	addr := os.Getenv(NotifyEnv)
	os.Unsetenv(NotifyEnv)
	if addr == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notifier{addr: addr, log: log}
}

// Send sends the assignments (e.g. "READY=1", "STATUS=serving") as one
// datagram. It never blocks longer than notifyTimeout; a failure is
// logged once at WARN and returned.
func (n *Notifier) Send(assignments ...string) error {
	if n == nil || n.addr == "" {
		return nil
	}
	err := n.send(strings.Join(assignments, "\n") + "\n")
	if err != nil {
		n.mu.Lock()
		first := !n.warned
		n.warned = true
		n.mu.Unlock()
		if first {
			n.log.Warn("service manager notification failed (readiness is not reported; the daemon serves anyway)", "notify_socket", n.addr, "err", err)
		}
	}
	return err
}

func (n *Notifier) send(msg string) error {
	if n.addr[0] != '/' && n.addr[0] != '@' {
		return fmt.Errorf("%s=%q: want an absolute path or @abstract name", NotifyEnv, n.addr)
	}
	// Go's net package maps a leading '@' to the abstract namespace.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(notifyTimeout)); err != nil {
		return err
	}
	_, err = c.Write([]byte(msg))
	return err
}

// Ready says the daemon serves: its socket accepts and reconciliation is
// done.
func (n *Notifier) Ready(status string) error {
	return n.Send("READY=1", "STATUS="+oneLine(status), fmt.Sprintf("MAINPID=%d", os.Getpid()))
}

// Reloading says a reload began (the service manager waits for the next
// READY=1).
func (n *Notifier) Reloading() error {
	return n.Send("RELOADING=1", "STATUS=reloading", fmt.Sprintf("MONOTONIC_USEC=%d", monotonicUsec()))
}

// Stopping says the daemon is stopping.
func (n *Notifier) Stopping() error {
	return n.Send("STOPPING=1", "STATUS=stopping; sandboxes keep running")
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, as RELOADING=1 wants.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Sec*1e6 + ts.Nsec/1e3
}

// oneLine keeps a STATUS value on its line: a newline would start another
// assignment.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
