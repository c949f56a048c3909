package oci

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// TestDocker drives Debian's docker.io engine with cordon registered as
// the runtime `cordon` (the cordon-oci name of the binary, as an operator
// registers it): the engine's own commands and lifecycle, what cordon
// refuses, the evidence of a container, escapes from inside one, and the
// residue after the shim or cordon's keeper is SIGKILLed. One private
// dockerd serves every subtest.
func TestDocker(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireStaticBuild(t)
	d := engines.DockerdWith(t, map[string]engines.DockerRuntime{"cordon": {Path: cordonOCI, VolumeRoot: true}})
	d.Import(t, engines.Image(t), image)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Run("run", func(t *testing.T) { testRun(t, d, rt) })
			t.Run("detached exec stop rm", func(t *testing.T) { testDetached(t, d, rt) })
			t.Run("interactive", func(t *testing.T) { testInteractive(t, d, rt) })
			t.Run("restart policy", func(t *testing.T) { testRestart(t, d, rt) })
			t.Run("overlay2 root", func(t *testing.T) { testOverlayRoot(t, d, rt) })
			t.Run("named volume", func(t *testing.T) { testNamedVolume(t, d, rt) })
		})
	}
	t.Run("refused", func(t *testing.T) { testRefused(t, d) })
	t.Run("evidence", func(t *testing.T) { testEvidence(t, d) })
	t.Run("escape", func(t *testing.T) { testEscapes(t, d) })
	t.Run("residue", func(t *testing.T) { testResidue(t, d) })
}

// testRun: the program's output reaches `docker run`, and its exit status
// is docker run's.
func testRun(t *testing.T, d *engines.Docker, rt string) {
	if out := d.Must(t, base(rt, "--rm", image, "/bin/echo", "hi")...); out != "hi" {
		t.Errorf("docker run --runtime %s echo hi printed %q, want hi", rt, out)
	}
	if r := d.Run(t, base(rt, "--rm", image, "sh", "-c", "exit 7")...); r.Code != 7 {
		t.Errorf("docker run --runtime %s sh -c 'exit 7' = %d, want 7\n%s", rt, r.Code, r.Stderr)
	}
}

// testDetached: run -d, exec (output and exit status), stop with a
// timeout of 2 s of a program that ignores SIGTERM (the engine kills it
// when the timeout ends, long before docker's default 10 s), rm.
func testDetached(t *testing.T, d *engines.Docker, rt string) {
	id := d.Must(t, base(rt, "-d", image, "sh", "-c", `trap "" TERM; while :; do sleep 1; done`)...)
	if got := inspect(t, d, id, "{{.State.Running}}"); got != "true" {
		t.Fatalf("after docker run -d: running = %s", got)
	}
	r := d.Run(t, "exec", id, "sh", "-c", "echo from-exec; exit 3")
	if r.Code != 3 || strings.TrimSpace(r.Stdout) != "from-exec" {
		t.Errorf("docker exec = %d %q, want 3 \"from-exec\"\n%s", r.Code, r.Stdout, r.Stderr)
	}
	start := time.Now()
	d.Must(t, "stop", "-t", "2", id)
	took := time.Since(start)
	// It ignored SIGTERM, so the stop took the timeout; and the engine's
	// SIGKILL ended it then (docker's default would be 10 s).
	if took < 2*time.Second || took > 8*time.Second {
		t.Errorf("docker stop -t 2 of a program ignoring SIGTERM took %v, want about 2 s", took)
	}
	if got := inspect(t, d, id, "{{.State.Running}} {{.State.ExitCode}}"); got != "false 137" {
		t.Errorf("after docker stop: running, exit code = %s, want false 137 (SIGKILL)", got)
	}
	d.Must(t, "rm", id)
	if r := d.Run(t, "inspect", id); r.Code == 0 {
		t.Errorf("docker inspect %s succeeded after docker rm", id)
	}
}

// testInteractive: `docker run -it` in a real terminal: a shell inside
// echoes what is typed and its exit status is docker's.
func testInteractive(t *testing.T, d *engines.Docker, rt string) {
	argv := append([]string{d.Cmd().Path}, d.Cmd().Args[1:]...)
	argv = append(argv, base(rt, "-it", "--rm", image, "/bin/bash", "--norc", "-i")...)
	x := testkit.NewTmux(t, 100, 30, []string{"DOCKER_CONFIG=" + filepath.Join(d.Dir, "cli")}, argv...)
	x.WaitFor(`bash-[0-9.]+[#$] `, 120*time.Second) // bash --norc's own prompt; a start on vfs under load takes a while
	x.Type("echo $((6*7))x")
	x.WaitFor(`(?m)^42x`, 10*time.Second)
	x.Type("exit 5")
	deadline := time.Now().Add(15 * time.Second)
	for {
		if done, code := x.Exited(); done {
			if code != 5 {
				t.Errorf("docker run -it: exit %d after `exit 5`, want 5; screen:\n%s", code, x.Screen())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker run -it did not end after `exit 5`; screen:\n%s", x.Screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testRestart: with --restart on-failure:2 a failing program is started
// three times in all; the engine counts two restarts.
func testRestart(t *testing.T, d *engines.Docker, rt string) {
	id := d.Must(t, base(rt, "-d", "--restart", "on-failure:2", image, "sh", "-c", "exit 3")...)
	defer d.Run(t, "rm", "-f", id)
	deadline := time.Now().Add(60 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = inspect(t, d, id, "{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}")
		if got == "2 exited 3" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("docker run --restart on-failure:2 (exit 3): restarts, status, exit = %q, want \"2 exited 3\"\n%s", got, d.Log("dockerd"))
}

// testRefused: what cordon cannot make safe is refused, with docker's
// error naming the config.json field cordon refused; nothing is left
// running. runc accepts each (the control: the engine's flags themselves
// are fine, cordon is what refuses).
func testRefused(t *testing.T, d *engines.Docker) {
	kmsg := "/dev/kmsg"
	if _, err := os.Stat(kmsg); err != nil {
		kmsg = "/dev/null"
	}
	for _, c := range []struct {
		name    string
		flags   []string
		fields  []string // cordon's message names one of these
		control bool     // runc runs it on this host
	}{
		// No runc control for --privileged: runc cannot apply the full
		// capability set where the host itself lacks one (these test
		// hosts run without CAP_SYS_RESOURCE in their bounding set).
		{"privileged", []string{"--privileged"}, []string{"linux.seccomp", "linux.maskedPaths", "linux.readonlyPaths", "linux.devices"}, false},
		{"network host", []string{"--network", "host"}, []string{"linux.namespaces"}, true},
		{"pid host", []string{"--pid", "host"}, []string{"linux.namespaces"}, true},
		{"seccomp unconfined", []string{"--security-opt", "seccomp=unconfined"}, []string{"linux.seccomp"}, true},
		{"device", []string{"--device", kmsg}, []string{"linux.devices"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := func(rt string) []string {
				a := []string{"run", "--runtime", rt}
				if !strings.Contains(strings.Join(c.flags, " "), "--network") {
					a = append(a, "--network", "none")
				}
				return append(append(a, c.flags...), image, "/bin/true")
			}
			if c.control {
				if r := d.Run(t, append([]string{"run", "--rm"}, args("runc")[1:]...)...); r.Code != 0 {
					t.Fatalf("control: runc with %v = %d, want 0\n%s", c.flags, r.Code, r.Stderr)
				}
			}
			// No --rm: the refused container stays, to be inspected.
			name := "refused-" + randHex(4)
			r := d.Run(t, append([]string{"run", "--name", name}, args("cordon")[1:]...)...)
			defer d.Run(t, "rm", "-f", name)
			if r.Code == 0 {
				t.Fatalf("docker run --runtime cordon %v succeeded; cordon must refuse it", c.flags)
			}
			named := false
			for _, f := range c.fields {
				named = named || strings.Contains(r.Stderr, f)
			}
			if !named {
				t.Errorf("docker run --runtime cordon %v: error does not name any of %v:\n%s", c.flags, c.fields, r.Stderr)
			}
			if got := inspect(t, d, name, "{{.State.Running}} {{.State.Pid}}"); got != "false 0" {
				t.Errorf("refused container: running, pid = %s, want false 0", got)
			}
		})
	}
}

// testEvidence: a container started by docker is admitted
// DEDICATED_CONTAINER (cordon's state annotations and evidence record),
// and its program, seen from the host, holds no capability, has
// no_new_privs and a seccomp filter, and runs in a leased uid range. The
// same reads of a runc container show the reads can tell the difference.
func testEvidence(t *testing.T, d *engines.Docker) {
	marker := strconv.Itoa(3000 + int(time.Now().UnixNano()%1000))
	for _, rt := range runtimes {
		id := d.Must(t, base(rt, "-d", image, "sleep", marker)...)
		t.Cleanup(func() { d.Run(t, "rm", "-f", id) })
		st := status(t, hostPid(t, d, id, "sleep\x00"+marker))
		uidMap, err := os.ReadFile("/proc/" + strconv.Itoa(hostPid(t, d, id, "sleep\x00"+marker)) + "/uid_map")
		if err != nil {
			t.Fatal(err)
		}
		m := strings.Fields(string(uidMap))
		confined := st["CapEff"] == "0000000000000000" && st["CapBnd"] == "0000000000000000" && st["NoNewPrivs"] == "1" && st["Seccomp"] == "2" &&
			len(m) == 3 && m[0] == "0" && m[1] != "0" && m[2] != "4294967295"
		switch rt {
		case "runc":
			if confined {
				t.Errorf("control: the runc container reads as confined (CapEff %s, NoNewPrivs %s, uid_map %q): the checks cannot tell", st["CapEff"], st["NoNewPrivs"], uidMap)
			}
		case "cordon":
			if !confined {
				t.Errorf("cordon container's program: CapEff %s CapBnd %s NoNewPrivs %s Seccomp %s uid_map %q; want no capabilities, no_new_privs, a filter and a leased range",
					st["CapEff"], st["CapBnd"], st["NoNewPrivs"], st["Seccomp"], uidMap)
			}
			s := cordonState(t, d, id)
			if s.Annotations["dev.cordon.level-admitted"] != "DEDICATED_CONTAINER" || s.SandboxID == "" {
				t.Errorf("cordon oci state %s: sandbox %q, annotations %v; want DEDICATED_CONTAINER admitted and the sandbox id", id, s.SandboxID, s.Annotations)
			}
			// Docker always sends its capability set and seccomp profile:
			// what cordon did not grant is on record.
			if ng := s.Annotations["dev.cordon.not-granted"]; !strings.Contains(ng, "seccomp") || !strings.Contains(ng, "capabilities") {
				t.Errorf("cordon oci state %s: dev.cordon.not-granted = %q; want docker's capabilities and seccomp profile recorded as not granted", id, ng)
			}
			ev, err := os.ReadFile(s.Annotations["dev.cordon.evidence"])
			if err != nil || !strings.Contains(string(ev), "DEDICATED_CONTAINER") || !strings.Contains(string(ev), s.SandboxID) {
				t.Errorf("evidence record %s: %v; want it to name the sandbox and DEDICATED_CONTAINER\n%.2000s", s.Annotations["dev.cordon.evidence"], err, ev)
			}
			// The root is cordon's overlay of overlay2's layers, judged by
			// the owners the host sees (docs/oci.md "Overlay roots").
			if !strings.Contains(string(ev), `"got": "overlay rw,`) {
				t.Errorf("evidence record %s: the root fact does not read cordon's overlay\n%.3000s", s.Annotations["dev.cordon.evidence"], ev)
			}
			if len(cgroupDirsOf(s.SandboxID)) == 0 {
				t.Errorf("no cordon cgroup of sandbox %s while its container runs", s.SandboxID)
			}
		}
	}
}

// testOverlayRoot: on docker's overlay2 a container writes and deletes in
// its root; read from the host, overlay2's upper directory holds the new
// file owned by the image's uid 0 (as under runc, the control) and a
// whiteout for the deleted one; a second start of the same container
// (the engine mounts its root afresh) sees both changes.
func testOverlayRoot(t *testing.T, d *engines.Docker, rt string) {
	name := "ovl-" + rt + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	script := "if [ -e /etc/written ]; then cat /etc/written; [ -e /etc/debian_version ] || echo gone; else echo w > /etc/written && rm /etc/debian_version; fi"
	d.Must(t, base(rt, "--name", name, image, "sh", "-c", script)...)
	t.Cleanup(func() { d.Run(t, "rm", "-f", name) })
	if drv := inspect(t, d, name, "{{.GraphDriver.Name}}"); drv != "overlay2" {
		t.Fatalf("graph driver %q, want overlay2", drv)
	}
	upper := inspect(t, d, name, "{{.GraphDriver.Data.UpperDir}}")
	st, err := os.Lstat(filepath.Join(upper, "etc", "written"))
	if err != nil {
		t.Fatalf("upper layer %s: %v", upper, err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
		t.Errorf("%s: the container's uid 0 wrote etc/written, stored as %d:%d; want 0:0", rt, sys.Uid, sys.Gid)
	}
	wo, err := os.Lstat(filepath.Join(upper, "etc", "debian_version"))
	if err != nil || wo.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s: no whiteout for etc/debian_version in the upper layer (%v, %v)", rt, wo, err)
	}
	if out := d.Must(t, "start", "-a", name); out != "w\ngone" {
		t.Errorf("%s: the second start printed %q, want the first one's changes (w, gone)", rt, out)
	}
}

// testNamedVolume: a docker named volume (under DATA-ROOT/volumes, which
// the harness registers as cordon's --volume-root, as an operator does)
// is written by the container's uid 0 and read by a second container;
// on the host the file is owned by 0, as under runc (the control).
func testNamedVolume(t *testing.T, d *engines.Docker, rt string) {
	vol := "vol-" + rt + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	d.Must(t, "volume", "create", vol)
	t.Cleanup(func() { d.Run(t, "volume", "rm", "-f", vol) })
	d.Must(t, base(rt, "--rm", "-v", vol+":/data", image, "sh", "-c", "echo v > /data/f")...)
	if out := d.Must(t, base(rt, "--rm", "-v", vol+":/data", image, "cat", "/data/f")...); out != "v" {
		t.Errorf("%s: the second container read %q from the volume, want v", rt, out)
	}
	mp := inspectVolume(t, d, vol)
	st, err := os.Lstat(filepath.Join(mp, "f"))
	if err != nil {
		t.Fatalf("%s: the volume's file on the host: %v", rt, err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
		t.Errorf("%s: the container's uid 0 wrote the volume's f, stored as %d:%d; want 0:0", rt, sys.Uid, sys.Gid)
	}
}

func inspectVolume(t *testing.T, d *engines.Docker, vol string) string {
	t.Helper()
	return d.Must(t, "volume", "inspect", "-f", "{{.Mountpoint}}", vol)
}
