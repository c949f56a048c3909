package conformance

import (
	"strings"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

// MarkdownTable is docs/testing.md's table of conformance probes by class
// (`cordon conformance list --markdown`): one row per class, its probe
// IDs, or "(none yet)" for a class with none.
func MarkdownTable(ps []Probe) string {
	var b strings.Builder
	b.WriteString("| Class | Conformance probes |\n| --- | --- |\n")
	for _, c := range record.Classes() {
		var ids []string
		for _, p := range ps {
			if p.Class == c {
				ids = append(ids, "`"+p.ID+"`")
			}
		}
		cell := "(none yet)"
		if len(ids) > 0 {
			cell = strings.Join(ids, ", ")
		}
		b.WriteString("| " + string(c) + " | " + cell + " |\n")
	}
	return b.String()
}
