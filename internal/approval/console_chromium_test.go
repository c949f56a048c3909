package approval

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit/browser"
)

// TestConsoleInChromium drives the console in headless Chromium the way an
// operator does: open the login URL, read the exact arguments of a pending
// approval (hostile markup included, shown as text and never run), and
// click Approve.
func TestConsoleInChromium(t *testing.T) {
	st := openStore(t)
	other := pending(t, st, "other", `{"keep":"pending"}`)
	a := pending(t, st, "wl", hostileArgs)
	c := startConsole(t, st)

	bctx := browser.Chromium(t, 60*time.Second)

	sel := "#approval-" + a.ID
	if err := chromedp.Do(bctx,
		chromedp.Navigate(c.LoginURL()),
		chromedp.WaitVisible(chromedp.CSS(sel+" pre.arguments")),
	); err != nil {
		t.Fatalf("open the login URL: %v", err)
	}
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || loc != "http://"+c.Addr()+"/" {
		t.Errorf("after login the browser is at %q (%v), want the console's / (the token left the URL)", loc, err)
	}
	shown, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel+" pre.arguments")))
	if err != nil {
		t.Fatalf("read the arguments: %v", err)
	}
	if want := DisplayJSON([]byte(hostileArgs)); shown != want {
		t.Errorf("arguments shown:\n%s\nwant exactly:\n%s", shown, want)
	}
	if !strings.Contains(shown, "<script>document.title='pwned'</script>") || !strings.Contains(shown, `\u202etxt.exe`) || strings.ContainsRune(shown, '\u202e') {
		t.Errorf("arguments shown %q: want the markup as text and the bidi override as an escape", shown)
	}
	for field, want := range map[string]string{"workload": "wl", "sandbox": "sb-wl", "action": "tool.call", "target": "fs/write_file", "digest": a.Digest} {
		got, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel+" dd."+field)))
		if err != nil || got != want {
			t.Errorf("%s shown = %q (%v), want %q", field, got, err, want)
		}
	}
	// Nothing from the arguments ran or became an element.
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil || title != "cordon approvals" {
		t.Errorf("title = %q (%v): a script from the arguments may have run", title, err)
	}
	n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("script, img, iframe, object, embed").length`))
	if err != nil || n != 0 {
		t.Errorf("%d script/img/iframe elements in the page (%v), want 0", n, err)
	}

	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(sel+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	); err != nil {
		t.Fatalf("click Approve: %v", err)
	}
	flash, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS("#flash")))
	if err != nil || !strings.Contains(flash, "approved "+a.ID) {
		t.Errorf("flash = %q (%v), want it to confirm the approval", flash, err)
	}
	got, err := st.Approval(context.Background(), a.ID)
	if err != nil {
		t.Fatalf("Approval(%s) = %v", a.ID, err)
	}
	if got.State != store.ApprovalApproved || got.DecidedBy != DecidedBy || got.Decided.IsZero() {
		t.Errorf("after the click: state %q by %q at %v, want approved by %q", got.State, got.DecidedBy, got.Decided, DecidedBy)
	}
	wantPending(t, st, other.ID)
	// The approved one left the pending list and shows under recent approvals.
	if err := chromedp.Do(bctx, chromedp.WaitNotPresent(chromedp.CSS(sel))); err != nil {
		t.Errorf("approval %s still listed as pending: %v", a.ID, err)
	}
	rows, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS("#decided")))
	if err != nil || !strings.Contains(rows, a.ID) || !strings.Contains(rows, DecidedBy) {
		t.Errorf("recent approvals = %q (%v), want %s approved by %s", rows, err, a.ID, DecidedBy)
	}
}
