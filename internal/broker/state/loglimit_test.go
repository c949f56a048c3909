package state

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/loglimit"
)

// A refused state request is one WARN line of the broker process, whose
// stderr is the run's or the daemon's log: an agent repeating a bad
// request (400, before the authority) wrote one line each, unbounded.
// Observed in the log the broker writes: 500 refusals make at most the
// burst of lines, the first is there (control), and after the bucket
// refills the next line counts what was left out.
func TestRefusalLogLinesAreRateLimited(t *testing.T) {
	var logs bytes.Buffer // the handler is served synchronously here
	b, err := New(Options{Authority: newFakeAuthority(), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for range n {
		if w := do(b, "GET", "/v1/state/a*b", nil); w.Code != 400 {
			t.Fatalf("GET a*b = %d, want 400", w.Code)
		}
	}
	lines := strings.Count(logs.String(), `msg="state crossing"`)
	if lines == 0 {
		t.Fatalf("no refusal was logged (control):\n%s", logs.String())
	}
	if lines > loglimit.Burst {
		t.Fatalf("%d refusals made %d log lines, want at most %d", n, lines, loglimit.Burst)
	}
	time.Sleep(time.Second + 100*time.Millisecond)
	do(b, "GET", "/v1/state/a*b", nil)
	if want := "suppressed=" + strconv.Itoa(n-lines); !strings.Contains(logs.String(), want) {
		t.Errorf("the line after the refill does not say %s:\n%s", want, logs.String())
	}
}
