package linux

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestWritableFileBind: a user's file bound writable (docker -v
// FILE:/x, cordon run --rw FILE) is written by the program, read from the
// host. The control: the same file bound read-only is not. (Landlock
// gave a file the directory rights, and the kernel refused the whole
// ruleset: every writable file bind failed at start.)
func TestWritableFileBind(t *testing.T) {
	p := newImageProvider(t)
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	run := func(writable bool) string {
		spec := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, "echo y > /x")
		spec.Binds = []sandbox.Bind{{Source: f, Target: "/x", Writable: writable}}
		sb := startImage(t, p, spec)
		if _, err := sb.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := run(false); got != "x\n" {
		t.Fatalf("control: a read-only file bind was written: %q", got)
	}
	if got := run(true); got != "y\n" {
		t.Errorf("the program's write through a writable file bind reads %q on the host, want \"y\\n\"", got)
	}
}
