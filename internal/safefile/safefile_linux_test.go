package safefile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ev.json")
	if err := WriteFile(p, []byte("one\n"), 0o644); err != nil {
		t.Fatalf("WriteFile(%q) = %v, want nil", p, err)
	}
	if err := WriteFile(p, []byte("two\n"), 0o644); err != nil {
		t.Fatalf("WriteFile(%q) over a regular file = %v, want nil", p, err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two\n" {
		t.Fatalf("ReadFile(%q) = %q, %v; want %q", p, b, err, "two\n")
	}
	fi, _ := os.Lstat(p)
	if fi.Mode() != 0o644 {
		t.Errorf("mode of %q = %v, want -rw-r--r--", p, fi.Mode())
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries after two writes, want 1: %v", len(ents), ents)
	}
}

// TestWriteFileRefuses: every way a sandbox could aim the write elsewhere
// is refused, and the place it aimed at is unchanged.
func TestWriteFileRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, victim string) string // returns the target path
		want  error
	}{
		{"symlink at target", func(t *testing.T, dir, victim string) string {
			p := filepath.Join(dir, "ev.json")
			mustSymlink(t, victim, p)
			return p
		}, ErrSymlink},
		{"dangling symlink at target", func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "ev.json")
			mustSymlink(t, filepath.Join(dir, "nowhere"), p)
			return p
		}, ErrSymlink},
		{"symlink in the middle of the path", func(t *testing.T, dir, victim string) string {
			mustSymlink(t, filepath.Dir(victim), filepath.Join(dir, "sub"))
			return filepath.Join(dir, "sub", filepath.Base(victim))
		}, ErrSymlink},
		{"symlink as the last directory", func(t *testing.T, dir, victim string) string {
			mustSymlink(t, filepath.Dir(victim), filepath.Join(dir, "sub"))
			return filepath.Join(dir, "sub", "new.json")
		}, ErrSymlink},
		{"FIFO at target", func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "ev.json")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, ErrNotRegular},
		{"directory at target", func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "ev.json")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, ErrNotRegular},
		{"socket at target", func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "ev.json")
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return p
		}, ErrNotRegular},
		{"relative path", func(t *testing.T, dir, _ string) string {
			return "ev.json"
		}, ErrNotAbsolute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, host := t.TempDir(), t.TempDir()
			victim := filepath.Join(host, "victim")
			if err := os.WriteFile(victim, []byte("host file\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p := tt.setup(t, dir, victim)
			err := WriteFile(p, []byte("attack\n"), 0o644)
			var fe *Error
			if !errors.Is(err, tt.want) || !errors.As(err, &fe) {
				t.Fatalf("WriteFile(%q) = %v, want a *Error wrapping %v", p, err, tt.want)
			}
			if b, _ := os.ReadFile(victim); string(b) != "host file\n" {
				t.Errorf("victim holds %q after WriteFile(%q), want it unchanged", b, p)
			}
			if ents, _ := os.ReadDir(host); len(ents) != 1 {
				t.Errorf("host dir holds %v after WriteFile(%q), want only the victim", ents, p)
			}
			if ents, _ := os.ReadDir(dir); strings.Contains(strings.Join(names(ents), " "), ".tmp-") {
				t.Errorf("temporary file left in %s: %v", dir, names(ents))
			}
		})
	}
}

// TestWriteFileIgnoresPlantedTemp: the old code wrote PATH.tmp; a symlink
// planted there (or at any other name) is not used.
func TestWriteFileIgnoresPlantedTemp(t *testing.T) {
	dir, host := t.TempDir(), t.TempDir()
	victim := filepath.Join(host, "victim")
	if err := os.WriteFile(victim, []byte("host file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ev.json")
	mustSymlink(t, victim, p+".tmp")
	if err := WriteFile(p, []byte("record\n"), 0o644); err != nil {
		t.Fatalf("WriteFile(%q) = %v, want nil", p, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "host file\n" {
		t.Errorf("victim = %q, want unchanged", b)
	}
	if b, _ := os.ReadFile(p); string(b) != "record\n" {
		t.Errorf("%s = %q, want the record", p, b)
	}
}

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := WriteNew(p, []byte("k1"), 0o600); err != nil {
		t.Fatalf("WriteNew(%q) = %v, want nil", p, err)
	}
	if err := WriteNew(p, []byte("k2"), 0o600); !errors.Is(err, ErrExists) {
		t.Errorf("WriteNew(%q) over a file = %v, want ErrExists", p, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "k1" {
		t.Errorf("%s = %q, want the first key kept", p, b)
	}
	q := filepath.Join(dir, "dangling")
	mustSymlink(t, filepath.Join(dir, "nowhere"), q)
	if err := WriteNew(q, []byte("k"), 0o600); !errors.Is(err, ErrExists) {
		t.Errorf("WriteNew(%q) over a dangling symlink = %v, want ErrExists", q, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !os.IsNotExist(err) {
		t.Errorf("WriteNew followed the dangling symlink: %v", err)
	}
	if fi, _ := os.Lstat(p); fi.Mode() != 0o600 {
		t.Errorf("mode of %s = %v, want -rw-------", p, fi.Mode())
	}
}

func TestOpenDir(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, dir, link)
	fd, err := OpenDir(dir)
	if err != nil {
		t.Fatalf("OpenDir(%q) = %v", dir, err)
	}
	syscall.Close(fd)
	if fd, err := OpenDir(link); !errors.Is(err, ErrSymlink) {
		syscall.Close(fd)
		t.Errorf("OpenDir(%q) = %v, want ErrSymlink", link, err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
