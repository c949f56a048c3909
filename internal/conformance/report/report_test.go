package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

// hostile is a fact a sandbox could make the trusted side observe.
const hostile = "<script>document.title='pwned'</script></style><img src=x onerror=alert(1)>\u202etxt.exe"

// hostileRecord is the sample with hostile text in every kind of field a
// sandbox or the record's sender controls, and one probe of each verdict.
func hostileRecord() *record.Record {
	r := record.Sample()
	r.Probes[1].Facts[0].Got = hostile
	r.Probes[1].Hint = hostile
	r.Probes[2].Verdict, r.Probes[2].Reason = record.Fail, hostile
	r.Probes[3].Verdict, r.Probes[3].Reason = record.NotEvidenced, "no daemon"
	r.Probes[0].Title = hostile
	r.Host.Kernel = hostile
	r.NonClaims = append(r.NonClaims, hostile)
	r.Finish(r.Probes, r.Window.Finished)
	return r
}

func TestRenderEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, hostileRecord(), Verification{Checked: true, Verified: true, KeyID: "0a0b0c0d"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script", "</style><img", "<img", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("report contains %q raw", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", `\u202e`, "default-src &#39;none&#39;", `id="matrix"`} {
		if !strings.Contains(out, want) && !strings.Contains(out, strings.ReplaceAll(want, "&#39;", "'")) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Control: the template does render record text (the escapes above
	// are of text that is there).
	if !strings.Contains(out, "txt.exe") || !strings.Contains(out, "bypass.sample") {
		t.Error("report does not show the record's text")
	}
}
