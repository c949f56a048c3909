package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// ociBundle makes a bundle of a static busybox root whose program is
// argv, from Docker's own config.json (internal/oci/testdata) without its
// engine binds and hooks.
func ociBundle(t *testing.T, argv ...string) string {
	t.Helper()
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		testkit.Unavailable(t, "no static busybox for a bundle's root (apt-get install busybox-static): %v", err)
	}
	dir, err := os.MkdirTemp(baseDir, "bundle-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "sys", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sh", "sleep", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile("../internal/oci/testdata/docker-config.json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	s["root"] = map[string]any{"path": root, "readonly": false}
	s["process"].(map[string]any)["args"] = argv
	var mounts []any
	for _, m := range s["mounts"].([]any) {
		if m.(map[string]any)["type"] != "bind" {
			mounts = append(mounts, m)
		}
	}
	s["mounts"] = mounts
	delete(s, "hooks")
	out, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ociRun runs `cordon oci` (bin) with state and root and returns its
// output. Its stdio are files: a keeper it starts keeps them.
func ociRun(t *testing.T, bin, state, root string, args ...string) (string, error) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, append([]string{"--state-dir", state, "oci", "--root", root}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	b, _ := os.ReadFile(f.Name())
	return string(b), err
}

func ociStatus(t *testing.T, bin, state, root, id string) string {
	t.Helper()
	out, err := ociRun(t, bin, state, root, "state", id)
	if err != nil {
		t.Fatalf("state %s: %v\n%s", id, err, out)
	}
	var s struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("state %s: %v\n%s", id, err, out)
	}
	return s.Status
}

// TestOCIKillDuringStart: a kill the keeper accepts while a start is
// under way must not be lost. Found in review: a kill answered while the
// container was still "created" was queued for the keeper's loop, which
// then started the program and dropped the queued signal (only a
// not-yet-started container acted on it): `kill KILL` said OK and the
// container ran on. The test build pauses the keeper between start and
// the program's exec (--test-pause-at oci.start.before_exec) so the kill
// lands there every time. The control: the same container started
// without the kill is running.
func TestOCIKillDuringStart(t *testing.T) {
	testkit.RequireRoot(t)
	// The program ignores SIGTERM: only a SIGKILL that reaches the keeper
	// ends it.
	bundle := ociBundle(t, "/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done")
	state, root := newStateDir(t), t.TempDir()
	pause := []string{"--test-pause-at", "oci.start.before_exec"}
	run := func(args ...string) (string, error) {
		return ociRun(t, hooksBin, state, root, append(pause, args...)...)
	}
	for _, c := range []struct {
		id      string
		signals []string
	}{
		{"control", nil},
		{"kill-during-start", []string{"KILL"}},
		// Found next: a second kill accepted during the same start (an
		// engine's stop: TERM, then KILL after its grace) was dropped
		// while the first was queued, so only the ignored TERM arrived.
		{"term-then-kill-during-start", []string{"TERM", "KILL"}},
	} {
		id := c.id
		if out, err := run("create", "--bundle", bundle, id); err != nil {
			t.Fatalf("create %s: %v\n%s", id, err, out)
		}
		t.Cleanup(func() { _, _ = ociRun(t, cordonBin, state, root, "delete", "--force", id) })
		started := make(chan error, 1)
		go func() {
			out, err := run("start", id)
			if err != nil {
				t.Logf("start %s: %s", id, out)
			}
			started <- err
		}()
		logPath := filepath.Join(root, id, "keeper.log")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "test: paused before exec") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the keeper never reached its pause (is this a test build?)", id)
			}
		}
		for _, sig := range c.signals {
			if out, err := run("kill", id, sig); err != nil {
				t.Fatalf("%s: kill %s during start: %v\n%s", id, sig, err, out)
			}
		}
		if err := <-started; err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		kill := len(c.signals) > 0
		got := ociStatus(t, cordonBin, state, root, id)
		for deadline := time.Now().Add(20 * time.Second); kill && got != "stopped" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got = ociStatus(t, cordonBin, state, root, id)
		}
		switch {
		case !kill && got != "running":
			t.Fatalf("control: a container started without a kill is %q, want running", got)
		case kill && got != "stopped":
			t.Errorf("%s: a SIGKILL accepted during start was lost: the container is %q", id, got)
		}
	}
}
