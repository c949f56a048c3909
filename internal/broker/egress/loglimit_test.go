package egress

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/loglimit"
)

// The broker process logs at WARN to its stderr, which is the daemon's
// (journald's) or the run's log: one WARN line per denied connection,
// unbounded, while the privileged side's receipts and host denial line
// are rate-limited. An agent looping CONNECTs to a host not allowed
// flooded the host log (and, under journald's per-service rate limit,
// pushed out every other sandbox's and the daemon's lines). Observed in
// the log the broker writes: 1000 denials make at most the burst of
// lines, the first is there (control: the layer logs denials), and
// after the bucket refills the next line counts what was left out. Every
// denial still gets its receipt.
func TestDenialLogLinesAreRateLimited(t *testing.T) {
	var logs testkit.SyncBuffer
	l := newFakeAuthority(crossing.Amount{})
	b, _ := testBroker(t, Options{Allow: []Rule{{Host: "api.example.com"}}, Authority: l,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	deny := func() {
		r := connectReq("evil.example.net:443").WithContext(crossing.WithIdentity(context.Background(), testID))
		w := httptest.NewRecorder()
		b.ServeHTTP(w, r)
		if w.Code != 403 {
			t.Fatalf("CONNECT evil.example.net:443 = %d, want 403", w.Code)
		}
		if rc := l.receipt(t); rc.Decision != crossing.Deny {
			t.Fatalf("receipt %+v, want a denial", rc)
		}
	}
	const n = 1000
	for range n {
		deny()
	}
	lines := strings.Count(logs.String(), `msg="egress crossing"`)
	if lines == 0 {
		t.Fatalf("no denial was logged (control):\n%s", logs.String())
	}
	if lines > loglimit.Burst {
		t.Fatalf("%d denials made %d log lines, want at most %d", n, lines, loglimit.Burst)
	}
	time.Sleep(time.Second + 100*time.Millisecond)
	deny()
	if want := "suppressed=" + strconv.Itoa(n-lines); !strings.Contains(logs.String(), want) {
		t.Errorf("the line after the refill does not say %s:\n%s", want, logs.String())
	}
}
