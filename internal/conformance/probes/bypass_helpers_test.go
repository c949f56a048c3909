package probes

import (
	"slices"
	"testing"
)

// The device check passes the safe set and the sandbox's own pty
// subsidiaries, and names everything else.
func TestUnsafeNodes(t *testing.T) {
	got := unsafeNodes([]string{
		"null c 1:3", "zero c 1:5", "full c 1:7", "random c 1:8", "urandom c 1:9", "tty c 5:0", "pts/ptmx c 5:2", "pts/0 c 136:0",
		"mem c 1:1", "kmsg c 1:11", "sda b 8:0", "loop0 b 7:0", "evil c 136:0", "ptmx b 5:2",
	})
	want := []string{"mem c 1:1", "kmsg c 1:11", "sda b 8:0", "loop0 b 7:0", "evil c 136:0", "ptmx b 5:2"}
	if !slices.Equal(got, want) {
		t.Errorf("unsafeNodes = %q, want %q", got, want)
	}
}
