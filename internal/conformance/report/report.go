package report

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/textsafe"
)

//go:embed report.html.tmpl
var files embed.FS

// page is parsed on first use, not at package init: this package is
// linked into every process of the binary (the sandbox init, the broker
// processes), which must not pay for a template they never render.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report.html.tmpl").Funcs(template.FuncMap{
		"t":    textsafe.Line,
		"time": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"dur":  func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		"join": func(s []string) string { return textsafe.Line(strings.Join(s, "; ")) },
	}).ParseFS(files, "report.html.tmpl"))
})

// Verification is what the caller checked about the record before
// rendering it; the zero value says the signature was not checked.
type Verification struct {
	Checked  bool
	Verified bool
	KeyID    string
	Problems []string
}

// row is one probe in the matrix.
type row struct {
	record.ProbeResult
	First bool // first probe of its class: the class cell spans the class
	Span  int
}

// count is one class's verdict counts.
type count struct {
	Class                   record.Class
	Pass, Fail, NotEvidence int
}

type view struct {
	R      *record.Record
	V      Verification
	Rows   []row
	Counts []count
	Totals count
}

// Render writes the report of rec.
func Render(w io.Writer, rec *record.Record, v Verification) error {
	if rec == nil {
		return fmt.Errorf("conformance report: no record")
	}
	vw := view{R: rec, V: v}
	byClass := map[record.Class][]record.ProbeResult{}
	var order []record.Class
	for _, c := range record.Classes() {
		order = append(order, c)
	}
	for _, p := range rec.Probes {
		if _, ok := byClass[p.Class]; !ok && !known(p.Class) {
			order = append(order, p.Class)
		}
		byClass[p.Class] = append(byClass[p.Class], p)
	}
	for _, c := range order {
		ps := byClass[c]
		n := count{Class: c}
		for i, p := range ps {
			vw.Rows = append(vw.Rows, row{ProbeResult: p, First: i == 0, Span: len(ps)})
			switch p.Verdict {
			case record.Pass:
				n.Pass++
			case record.NotEvidenced:
				n.NotEvidence++
			default:
				n.Fail++
			}
		}
		vw.Counts = append(vw.Counts, n)
		vw.Totals.Pass += n.Pass
		vw.Totals.Fail += n.Fail
		vw.Totals.NotEvidence += n.NotEvidence
	}
	return page().Execute(w, vw)
}

func known(c record.Class) bool {
	for _, k := range record.Classes() {
		if k == c {
			return true
		}
	}
	return false
}
