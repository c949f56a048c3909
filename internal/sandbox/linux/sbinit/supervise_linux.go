package sbinit

import (
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwarded are the signals the init passes on to the program.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT}

// supervise starts the program in its own session (no controlling
// terminal but, with Config.Tty, a pty of the sandbox's own: never the
// user's terminal, so it cannot push keystrokes into it), forwards
// signals to it, reaps every child, and reports how the program ended.
// When the program ends the init exits, which ends every other process in
// the PID namespace. console is the terminal opened at start
// (Config.TtyAtStart), or nil.
func supervise(c ctl, cfg *Config, console *pty) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)

	pid, err := startMain(c, cfg, console)
	if err != nil {
		return 125
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			_ = unix.Kill(pid, sig.(syscall.Signal))
			continue
		}
		for {
			var ws unix.WaitStatus
			p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if p <= 0 || err != nil {
				break
			}
			if p != pid {
				continue
			}
			m := Message{Type: "exit"}
			if ws.Signaled() {
				m.Signal = int(ws.Signal())
			} else {
				m.Code = ws.ExitStatus()
			}
			_ = c.send(m)
			return 0
		}
	}
	return 0
}

// startMain starts the program, on a pseudo-terminal of the sandbox's
// own when Config.Tty asks for one (console, when it was opened at start;
// else opened now), and reports "started": with the master when it was
// opened now, with no descriptor otherwise. On error it has reported the
// failure (or the channel is gone) and the program is not running. Call it
// only from the init's main thread (startProcess).
func startMain(c ctl, cfg *Config, console *pty) (int, error) {
	p := console
	if t := cfg.Tty; t != nil && p == nil {
		var err error
		if p, err = openPty(t); err != nil {
			c.fail("pty", err)
			return 0, err
		}
	}
	files, ctty := []uintptr{0, 1, 2}, -1
	if p != nil {
		// The master never stays in the sandbox, nor the slave in the
		// init: closed here whatever happens (a master sent is the
		// trusted side's own copy).
		defer p.close()
		files, ctty = p.files(cfg.Tty), cfg.Tty.ctty()
	}
	pid, err := startProcess(cfg.Argv, cfg.Env, cfg.Dir, files, ctty)
	if err != nil {
		c.fail("exec", err)
		return 0, err
	}
	m := Message{Type: "started", Pid: pid}
	if p != nil && p.master >= 0 {
		m.Tty = true
		err = c.sendFD(m, p.master)
	} else {
		err = c.send(m)
	}
	if err != nil {
		unix.Kill(pid, unix.SIGKILL)
		return 0, err
	}
	return pid, nil
}

// lookPath resolves a bare program name on the sandbox's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}
