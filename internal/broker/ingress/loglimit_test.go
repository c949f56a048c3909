package ingress

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/loglimit"
)

// Every refused ingress connection was one WARN line of the broker
// process (its stderr: the run's or the daemon's log), unbounded: a
// client outside looping connections that policy refuses flooded the
// host's log. Observed in the log the broker writes: 100 refusals make
// at most the burst of lines, the first is there (control), and after
// the bucket refills the next line counts what was left out. Every
// refusal still has its receipt.
func TestRefusalLogLinesAreRateLimited(t *testing.T) {
	var logs testkit.SyncBuffer
	auth, tg := newFake(crossing.Amount{}), newTarget(t)
	auth.deny = crossing.ErrPolicyDenied
	addr := start(t, auth, tg, 4, 0, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	refuse := func() {
		t.Helper()
		if got := exchange(t, addr, "x"); got != "" {
			t.Fatalf("a refused connection got %q", got)
		}
		if rc := auth.receipt(t); rc.Decision != crossing.Deny {
			t.Fatalf("receipt %+v, want a denial", rc)
		}
	}
	const n = 100
	for range n {
		refuse()
	}
	count := func() int { return strings.Count(logs.String(), `msg="ingress crossing"`) }
	// The line follows the receipt: wait for the last one to be logged
	// or left out.
	time.Sleep(100 * time.Millisecond)
	lines := count()
	if lines == 0 {
		t.Fatalf("no refusal was logged (control):\n%s", logs.String())
	}
	if lines > loglimit.Burst {
		t.Fatalf("%d refusals made %d log lines, want at most %d", n, lines, loglimit.Burst)
	}
	time.Sleep(time.Second + 100*time.Millisecond)
	refuse()
	want := "suppressed=" + strconv.Itoa(n-lines)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the line after the refill does not say %s:\n%s", want, logs.String())
	}
}
