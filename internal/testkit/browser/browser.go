package browser

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Chromium starts Debian's chromium headless (no GPU, its own profile
// directory) and returns a chromedp context bounded by timeout, ended with
// the test. Without chromium the test skips, except under CI=true, where a
// security test that would skip fails instead.
func Chromium(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	exe := testkit.RequireCommand(t, "Debian: apt-get install chromium; scripts/test.sh installs it", "chromium", "chromium-browser")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // the test runs as root, where Chromium's own sandbox cannot start
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		bcancel()
		acancel()
		cancel()
	})
	return bctx
}
