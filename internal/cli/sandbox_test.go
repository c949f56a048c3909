package cli

import (
	"os"
	"testing"

	"github.com/cordon-project/cordon/internal/hostmgr"
)

// openFiles closes what it opened when a later flag is refused: the
// descriptors of the workspace and the first bind do not outlive the
// refusal of the second (positive control: without the bad bind, both
// are open and returned).
func TestOpenFilesClosesOnRefusal(t *testing.T) {
	dir := t.TempDir()
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	before := count()
	ok := &createFlags{workspace: dir, ro: []string{dir + ":/in"}}
	files, err := ok.openFiles(&hostmgr.Spec{})
	if err != nil || len(files) != 2 || count() != before+2 {
		t.Fatalf("openFiles = %d files, %v; %d descriptors open, want 2 more than %d", len(files), err, count(), before)
	}
	for _, f := range files {
		f.Close()
	}
	bad := &createFlags{workspace: dir, ro: []string{dir + ":/in", dir + "/missing:/x"}}
	if _, err := bad.openFiles(&hostmgr.Spec{}); err == nil {
		t.Fatal("openFiles of a missing bind succeeded")
	}
	if n := count(); n != before {
		t.Errorf("after the refusal %d descriptors are open, want %d (the ones opened before it leaked)", n, before)
	}
}
