package metrics

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// logBytesRecords is a store whose evidence log size is costly: each call
// is counted, and it fails while fail is set (a dbstat over a big store
// that runs past the scrape's timeout).
type logBytesRecords struct {
	fakeRecords
	calls atomic.Int64
	fail  atomic.Bool
	n     int64
}

func (r *logBytesRecords) EvidenceLogBytes(context.Context) (int64, error) {
	r.calls.Add(1)
	if r.fail.Load() {
		return 0, errors.New("interrupted: the scrape's deadline passed")
	}
	return r.n, nil
}

// TestLogBytesFailureIsNotRetriedPerScrape: the evidence log's size (a
// dbstat walk of the whole log) is read at most once a minute however
// often anyone scrapes — also when that read fails. Otherwise a local
// user scraping in a loop makes the daemon walk a big store on every
// request, exactly when the walk is too slow to finish.
func TestLogBytesFailureIsNotRetriedPerScrape(t *testing.T) {
	// Positive control: a read that succeeds is cached.
	ok := &logBytesRecords{n: 4096}
	m := New(Options{Records: ok})
	for range 5 {
		scrape(t, Handler(m))
	}
	if n := ok.calls.Load(); n != 1 {
		t.Errorf("5 scrapes with a working store read the log's size %d times, want 1", n)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP cordon_evidence_log_size_bytes Space the evidence log (receipts, leaves, hashes, checkpoints) takes in the store; reread at most every minute.
# TYPE cordon_evidence_log_size_bytes gauge
cordon_evidence_log_size_bytes 4096
`), "cordon_evidence_log_size_bytes"); err != nil {
		t.Error(err)
	}

	// The attack: the walk fails (too slow); scraping in a loop must not
	// start it again each time.
	bad := &logBytesRecords{}
	bad.fail.Store(true)
	m = New(Options{Records: bad})
	for range 20 {
		fams := scrape(t, Handler(m))
		if _, ok := fams["cordon_evidence_log_size_bytes"]; ok {
			t.Fatal("a size never read is exported")
		}
	}
	if n := bad.calls.Load(); n != 1 {
		t.Errorf("20 scrapes with a failing size read walked the log %d times, want 1 (at most once a minute)", n)
	}
}
