package linux

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

func TestValidHostname(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"web-1", true}, {"a.b.example", true}, {strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false}, {"", false}, {"-a", false}, {"a-", false},
		{"a_b", false}, {"a..b", false}, {"a b", false}, {"a/b", false}, {"é", false},
	} {
		if got := validHostname(tc.in); got != tc.want {
			t.Errorf("validHostname(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestImageEnv(t *testing.T) {
	if got, want := imageEnv([]string{"A=1"}), []string{"A=1", defaultPath}; !slices.Equal(got, want) {
		t.Errorf("imageEnv([A=1]) = %q, want %q", got, want)
	}
	if got, want := imageEnv([]string{"PATH=/x", "A=1"}), []string{"PATH=/x", "A=1"}; !slices.Equal(got, want) {
		t.Errorf("imageEnv([PATH=/x A=1]) = %q, want %q", got, want)
	}
}

// TestClampRlimits: limits only lower, never above the provider's own
// (core 0, NOFILE, FSIZE) or this process's hard limit; the last entry
// for a resource wins.
func TestClampRlimits(t *testing.T) {
	var nproc unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &nproc); err != nil {
		t.Fatal(err)
	}
	got := clampRlimits([]sandbox.Rlimit{
		{Type: unix.RLIMIT_NOFILE, Soft: 1 << 20, Hard: 1 << 20},
		{Type: unix.RLIMIT_FSIZE, Soft: 10, Hard: 1 << 40},
		{Type: unix.RLIMIT_CORE, Soft: 1 << 30, Hard: 1 << 30},
		{Type: unix.RLIMIT_NPROC, Soft: 5, Hard: 6},
		{Type: unix.RLIMIT_NPROC, Soft: 7, Hard: unix.RLIM_INFINITY},
	}, 4096, 1<<30)
	want := []sbinit.Rlimit{
		{Type: unix.RLIMIT_FSIZE, Soft: 10, Hard: 1 << 30},
		{Type: unix.RLIMIT_NPROC, Soft: min(7, nproc.Max), Hard: nproc.Max},
		{Type: unix.RLIMIT_CORE, Soft: 0, Hard: 0},
		{Type: unix.RLIMIT_NOFILE, Soft: 4096, Hard: 4096},
	}
	slices.SortFunc(want, func(a, b sbinit.Rlimit) int { return a.Type - b.Type })
	if !slices.Equal(got, want) {
		t.Errorf("clampRlimits = %+v, want %+v", got, want)
	}
}
