package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// fakeNsenter installs a script in place of nsenter that prints out.
func fakeNsenter(t *testing.T, script string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nsenter")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := nsenterPath
	nsenterPath = p
	t.Cleanup(func() { nsenterPath = old })
}

func TestUserLimitsCheck(t *testing.T) {
	want := map[string]uint64{"max_inotify_instances": 64, "max_user_namespaces": 0}
	tests := []struct {
		name, script string
		ok           bool
		got          string
	}{
		{"values as set", "printf '64\\n0\\n'", true, "max_inotify_instances=64 max_user_namespaces=0"},
		{"host values (not the sandbox's)", "printf '128\\n96364\\n'", false, "max_inotify_instances=128 max_user_namespaces=96364"},
		{"too few values", "printf '64\\n'", false, "unreadable: 1 values for 2 files"},
		{"helper fails", "exit 1", false, "unreadable: exit status 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakeNsenter(t, tt.script)
			c := userLimitsCheck(1, want)
			if c.OK != tt.ok || c.Got != tt.got {
				t.Errorf("userLimitsCheck = {OK: %v, Got: %q}, want {%v, %q}", c.OK, c.Got, tt.ok, tt.got)
			}
		})
	}
	t.Run("missing helper", func(t *testing.T) {
		old := nsenterPath
		nsenterPath = filepath.Join(t.TempDir(), "absent")
		defer func() { nsenterPath = old }()
		if c := userLimitsCheck(1, want); c.OK || !strings.HasPrefix(c.Got, "unreadable") {
			t.Errorf("userLimitsCheck without nsenter = %+v, want unreadable and not ok", c)
		}
	})
	if c := userLimitsCheck(1, nil); c.OK {
		t.Errorf("userLimitsCheck with nothing requested = %+v, want not ok", c)
	}
}

// The trusted side's own user namespace is the host's, owned by root.
func TestNSOwnerUID(t *testing.T) {
	testkit.RequireRoot(t) // reads /proc/self/ns/user as root
	uid, err := nsOwnerUID("/proc/self/ns/user")
	if err != nil || uid != 0 {
		t.Fatalf("nsOwnerUID(/proc/self/ns/user) = %d, %v; want 0", uid, err)
	}
	if c := userNSOwner("/proc/self", 1000); c.OK || c.Got != "0" {
		t.Errorf("userNSOwner(host, want 1000) = %+v, want got 0 and not ok", c)
	}
}

func TestPtyMaxCheck(t *testing.T) {
	tests := []struct {
		name, mountinfo string
		ok              bool
	}{
		{"bounded", "25 22 0:30 / /dev/pts rw,nosuid,noexec - devpts devpts rw,mode=620,ptmxmode=666,max=64\n", true},
		{"unbounded", "25 22 0:30 / /dev/pts rw,nosuid,noexec - devpts devpts rw,mode=620,ptmxmode=666\n", false},
		{"other bound", "25 22 0:30 / /dev/pts rw - devpts devpts rw,max=4096\n", false},
		{"not devpts", "25 22 0:30 / /dev/pts rw - tmpfs tmpfs rw,max=64\n", false},
		{"absent", "22 1 0:21 / / ro - tmpfs tmpfs rw\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(tt.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			if c := ptyMaxCheck(dir, 64); c.OK != tt.ok {
				t.Errorf("ptyMaxCheck(%q) = %+v, want ok=%v", tt.mountinfo, c, tt.ok)
			}
		})
	}
}
