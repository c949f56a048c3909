package cli

import (
	"strings"
	"testing"
)

// runOCI runs the command tree with args and returns stdout and the
// error Execute returned.
func runOCI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb strings.Builder
	g := &globals{stdout: &out, stderr: &errb}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.Execute()
	return out.String(), err
}

// TestOCIUnknownCommandFails: the OCI runtime command line says a runtime
// invoked with an unrecognised command exits non-zero; without a command
// `cordon oci` prints its help, and --version answers as runc's does.
func TestOCIUnknownCommandFails(t *testing.T) {
	if _, err := runOCI(t, "oci", "no-such-command"); err == nil || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("cordon oci no-such-command: err = %v, want an error naming the command", err)
	}
	out, err := runOCI(t, "oci")
	if err != nil || !strings.Contains(out, "cordon oci implements the OCI runtime command line") {
		t.Errorf("cordon oci: err = %v, out = %q; want its help", err, out)
	}
	out, err = runOCI(t, "oci", "--version")
	if err != nil || !strings.HasPrefix(out, "cordon ") {
		t.Errorf("cordon oci --version: err = %v, out = %q; want cordon's version", err, out)
	}
}

// TestOCIKillSignalForms: kill takes the signal as runc does (kill ID
// SIGNAL) and as the OCI command line does (kill --signal SIGNAL ID);
// giving both, or a signal that does not exist, is refused before any
// container is looked up.
func TestOCIKillSignalForms(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		args []string
		want string // in the error; "" for one about the (absent) container
	}{
		{[]string{"kill", "--signal", "KILL", "c1"}, ""},
		{[]string{"kill", "c1", "KILL"}, ""},
		{[]string{"kill", "--signal", "9", "c1"}, ""},
		{[]string{"kill", "--signal", "NOSUCH", "c1"}, "unknown signal"},
		{[]string{"kill", "c1", "NOSUCH"}, "unknown signal"},
		{[]string{"kill", "--signal", "KILL", "c1", "TERM"}, "given twice"},
	} {
		_, err := runOCI(t, append([]string{"oci", "--root", root}, c.args...)...)
		switch {
		case err == nil:
			t.Errorf("%v: no error for a container that does not exist", c.args)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		case c.want == "" && (strings.Contains(err.Error(), "flag") || strings.Contains(err.Error(), "signal")):
			t.Errorf("%v: err = %v, want one about the container, not the signal", c.args, err)
		}
	}
}

// TestListenFDs: descriptors from socket activation count only when
// LISTEN_PID names this process (as go-systemd and runc read them).
func TestListenFDs(t *testing.T) {
	for _, c := range []struct {
		fds, pid string
		want     int
	}{
		{"", "", 0},
		{"2", "", 0},
		{"2", "41", 0},
		{"2", "42", 2},
		{"0", "42", 0},
		{"x", "42", -1},
		{"-3", "42", -1},
	} {
		env := map[string]string{"LISTEN_FDS": c.fds, "LISTEN_PID": c.pid}
		if got := listenFDs(func(k string) string { return env[k] }, 42); got != c.want {
			t.Errorf("LISTEN_FDS=%q LISTEN_PID=%q: %d, want %d", c.fds, c.pid, got, c.want)
		}
	}
}

// TestOCIEngineNetworkNeedsLevel: --engine-network=accept with the
// default level fails at create, before any bundle is read, with an error
// naming both flags; with --level DEDICATED_RUNTIME (the control) create
// gets as far as the bundle. The flag reaches the keeper, and --help
// documents it.
func TestOCIEngineNetworkNeedsLevel(t *testing.T) {
	dir := t.TempDir()
	_, err := runOCI(t, "oci", "--root", dir, "--engine-network", "accept", "create", "--bundle", dir, "c1")
	if err == nil || !strings.Contains(err.Error(), "--engine-network=accept") || !strings.Contains(err.Error(), "--level DEDICATED_RUNTIME or lower") {
		t.Errorf("accept at the default level: err = %v, want one naming --engine-network=accept and --level", err)
	}
	_, err = runOCI(t, "oci", "--root", dir, "--engine-network", "accept", "--level", "DEDICATED_RUNTIME", "create", "--bundle", dir, "c1")
	if err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("accept at DEDICATED_RUNTIME: err = %v, want one about the (absent) config.json", err)
	}
	_, err = runOCI(t, "oci", "--root", dir, "--engine-network", "bridge", "--level", "DEDICATED_RUNTIME", "create", "--bundle", dir, "c1")
	if err == nil || !strings.Contains(err.Error(), `--engine-network "bridge"`) {
		t.Errorf("--engine-network bridge: err = %v, want it refused", err)
	}
	o := &ociFlags{g: &globals{}, engineNetwork: "accept"}
	if a := strings.Join(o.forwardArgs(), " "); !strings.Contains(a, "--engine-network accept") {
		t.Errorf("the keeper's arguments lack --engine-network accept: %s", a)
	}
	out, _ := runOCI(t, "oci", "--help")
	if !strings.Contains(out, "--engine-network") || !strings.Contains(out, "DEDICATED_RUNTIME") {
		t.Errorf("cordon oci --help does not document --engine-network:\n%s", out)
	}
}
