package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
)

// --format executes a template per row with escaped strings; json is one
// exact object a line; a template that does not parse or names an
// unknown field is a usage error naming the fields.
func TestLsFormat(t *testing.T) {
	now := time.Now()
	is := []hostmgr.Info{
		{Name: "a", ID: "sb-1", Owner: 0, State: "running", Created: now.Add(-90 * time.Second)},
		{Name: "b\x1b]0;pwned\x07", ID: "sb-2", Owner: 4242424, State: "stopped", Note: "x"},
	}
	owners := ownerNames{}
	print := func(format string) string {
		row, err := lsFormat(format)
		if err != nil {
			t.Fatalf("lsFormat(%q): %v", format, err)
		}
		var b bytes.Buffer
		for _, i := range is {
			if err := row(&b, lsRow(i, owners, now)); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	got := print("{{.Name}} {{.State}} {{.Owner}} {{.OwnerUID}} {{.Age}}")
	want := "a running root 0 1m\nb\\u001b]0;pwned\\u0007 stopped 4242424 4242424 -\n"
	if got != want {
		t.Errorf("template output %q, want %q", got, want)
	}
	lines := strings.Split(strings.TrimSuffix(print("json"), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("json: %d lines, want 2: %q", len(lines), lines)
	}
	var r LsRow
	if err := json.Unmarshal([]byte(lines[1]), &r); err != nil || r.Name != is[1].Name || r.Owner != "4242424" || r.Note != "x" {
		t.Errorf("json line %s = %+v, %v; want the exact name and uid as owner", lines[1], r, err)
	}
	if strings.ContainsRune(lines[1], 0x1b) {
		t.Errorf("json line carries a raw escape: %q", lines[1])
	}
	for _, bad := range []string{"{{.Nope}}", "{{.Name", "{{template \"x\"}}"} {
		_, err := lsFormat(bad)
		if failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), ".OwnerUID") {
			t.Errorf("lsFormat(%q) = %v, want a usage error listing the fields", bad, err)
		}
	}
}
