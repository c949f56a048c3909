package store

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// ownerOf is pid's Owner as Self would have recorded it.
func ownerOf(t *testing.T, pid int) Owner {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, start, err := parseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := bootID()
	if err != nil {
		t.Fatal(err)
	}
	return Owner{PID: pid, StartTime: start, BootID: boot}
}

// TestAliveZombieIsGone: an owner that has exited and waits to be reaped
// runs no code and holds nothing. Found in review: a cordon oci keeper
// SIGKILLed under a parent that does not reap it at once (here PID 1)
// stayed "alive", so `cordon oci delete` removed the container's state
// while Reclaim kept its cgroups, exec socket and lease (until some later
// call after the reap). The control: the same process before it exits is
// alive.
func TestAliveZombieIsGone(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read x")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = cmd.Process.Wait() }()
	o := ownerOf(t, cmd.Process.Pid)
	if !Alive(o) {
		t.Fatalf("control: a running process is not alive")
	}
	// Ending stdin ends it; it stays a zombie until this test waits for
	// it. waitid(WNOWAIT) blocks until then without reaping it.
	in.Close()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if i := bytes.LastIndexByte(b, ')'); i < 0 || !strings.HasPrefix(string(b[i+1:]), " Z") {
		t.Fatalf("control: not a zombie: %s", b)
	}
	if Alive(o) {
		t.Errorf("a zombie owner counts as alive")
	}
}
