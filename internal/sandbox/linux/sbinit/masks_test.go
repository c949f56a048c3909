package sbinit

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
)

// TestMasksTable checks the table's own rules: clean absolute paths under
// /proc, no duplicates, kinds the evidence side knows, and an order in
// which no mask is covered by a later one (a read-only bind of a parent
// comes before the masks inside it; nothing is masked inside a mask).
func TestMasksTable(t *testing.T) {
	kinds := map[MaskKind]string{MaskNull: evidence.MaskNull, MaskEmpty: evidence.MaskEmpty, MaskReadOnly: evidence.MaskReadOnly}
	for k, v := range kinds {
		if string(k) != v {
			t.Errorf("sbinit kind %q, evidence kind %q: the two sides must agree", k, v)
		}
	}
	seen := map[string]bool{}
	for i, m := range Masks {
		if path.Clean(m.Path) != m.Path || !strings.HasPrefix(m.Path, "/proc/") {
			t.Errorf("Masks[%d].Path = %q, want a clean path under /proc", i, m.Path)
		}
		if _, ok := kinds[m.Kind]; !ok {
			t.Errorf("Masks[%d] (%s): unknown kind %q", i, m.Path, m.Kind)
		}
		if seen[m.Path] {
			t.Errorf("Masks[%d]: %s twice", i, m.Path)
		}
		seen[m.Path] = true
		if m.Why == "" {
			t.Errorf("Masks[%d] (%s): no reason given", i, m.Path)
		}
		for j, o := range Masks {
			if !strings.HasPrefix(m.Path, o.Path+"/") {
				continue
			}
			if o.Kind != MaskReadOnly {
				t.Errorf("%s is inside %s, which is masked %s: it can never be reached", m.Path, o.Path, o.Kind)
			}
			if j > i {
				t.Errorf("%s (Masks[%d]) comes before %s (Masks[%d]): the bind of the parent would cover it", m.Path, i, o.Path, j)
			}
		}
	}
	// The kernel command line and the boot id are the reason for the table.
	for _, p := range []string{"/proc/cmdline", "/proc/config.gz", "/proc/bootconfig", "/proc/sys/kernel/random/boot_id", "/proc/kcore", "/proc/sys"} {
		if !seen[p] {
			t.Errorf("Masks has no %s", p)
		}
	}
}

// TestMasksDocumented: docs/masked-paths.md lists every mask, so the
// published list cannot drift from the one applied.
func TestMasksDocumented(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/masked-paths.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Masks {
		if !strings.Contains(string(b), "| `"+m.Path+"` |") {
			t.Errorf("docs/masked-paths.md has no table row for %s", m.Path)
		}
	}
}
