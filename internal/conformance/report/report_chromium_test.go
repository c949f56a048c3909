package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/testkit/browser"
)

// TestReportInChromium loads a report of a record carrying hostile facts
// (<script>, </style>, an <img onerror>, U+202E) from a file in headless
// Chromium: no script runs and no element comes from the record, the
// hostile text is visible as text with the bidi override escaped, and the
// matrix shows the record's counts. The positive control is a page with a
// real script, whose run the same title check does see.
func TestReportInChromium(t *testing.T) {
	rec := hostileRecord()
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := Render(f, rec, Verification{Checked: true, Verified: true, KeyID: "0a0b0c0d"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	control := filepath.Join(dir, "control.html")
	os.WriteFile(control, []byte(`<!DOCTYPE html><title>control</title><script>document.title='pwned'</script>`), 0o644)

	bctx := browser.Chromium(t, 90*time.Second)

	// Positive control: a script in a page does run and the check sees it.
	if err := chromedp.Do(bctx, chromedp.Navigate("file://"+control)); err != nil {
		t.Fatalf("open the control page: %v", err)
	}
	if title, err := chromedp.Run(bctx, chromedp.Title()); err != nil || title != "pwned" {
		t.Fatalf("control page title = %q (%v): the check cannot see a script run", title, err)
	}

	if err := chromedp.Do(bctx,
		chromedp.Navigate("file://"+page),
		chromedp.WaitVisible(chromedp.CSS("#matrix")),
	); err != nil {
		t.Fatalf("open the report: %v", err)
	}
	if title, err := chromedp.Run(bctx, chromedp.Title()); err != nil || title != "cordon conformance record" {
		t.Errorf("title = %q (%v): a script from the record may have run", title, err)
	}
	n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("script, img, iframe, object, embed, link, base").length`))
	if err != nil || n != 0 {
		t.Errorf("%d script/img/iframe/link elements in the page (%v), want 0", n, err)
	}
	// The hostile fact is text, visible, with the bidi override escaped.
	got, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#matrix tr.probe[data-class="bypass"] td.got').innerText`))
	if err != nil || !strings.Contains(got, "<script>document.title='pwned'</script></style><img src=x onerror=alert(1)>") ||
		!strings.Contains(got, `\u202etxt.exe`) || strings.ContainsRune(got, '\u202e') {
		t.Errorf("fact shown = %q (%v): want the markup as visible text and the bidi override as an escape", got, err)
	}
	kernel, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#host dd').innerText`))
	if err != nil || !strings.HasPrefix(kernel, "<script>") {
		t.Errorf("kernel shown = %q (%v)", kernel, err)
	}
	// The styles still apply after the hostile </style>: a pass row is green.
	bg, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#matrix tr.probe.pass')).backgroundColor`))
	if err != nil || bg != "rgb(217, 242, 217)" {
		t.Errorf("pass row background = %q (%v): the page's style was broken", bg, err)
	}
	// The counts: per class and in the matrix's rows.
	want := map[string][3]int{}
	for _, p := range rec.Probes {
		c := want[string(p.Class)]
		switch p.Verdict {
		case record.Pass:
			c[0]++
		case record.Fail:
			c[1]++
		default:
			c[2]++
		}
		want[string(p.Class)] = c
	}
	for class, c := range want {
		for i, v := range []string{"pass", "fail", "not_evidenced"} {
			q := fmt.Sprintf(`Number(document.querySelector('#counts tr[data-class="%s"] td.n-%s').innerText)`, class, v)
			got, err := chromedp.Run(bctx, chromedp.Evaluate[int](q))
			if err != nil || got != c[i] {
				t.Errorf("%s %s count shown %d (%v), want %d", class, v, got, err, c[i])
			}
			rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('#matrix tr.probe[data-class="%s"][data-verdict="%s"]').length`, class, v)))
			if err != nil || rows != c[i] {
				t.Errorf("%s %s rows %d (%v), want %d", class, v, rows, err, c[i])
			}
		}
	}
	adm, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#admitted').innerText`))
	if err != nil || adm != record.NoClaim {
		t.Errorf("claim shown %q (%v), want %s (a probe failed)", adm, err, record.NoClaim)
	}
}
