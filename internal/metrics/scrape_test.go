package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// TestServerHoldsBoundedConnections: any local user can connect to a
// loopback endpoint. One who opens connections and idles them (a request,
// then the keep-alive) must not make the daemon hold a descriptor per
// connection without bound — the daemon's descriptors are its socket,
// its store and its sandboxes'. The endpoint accepts at most maxConns at
// once; the rest wait in the kernel's backlog and are served once the
// holders go (control: a scrape then succeeds).
func TestServerHoldsBoundedConnections(t *testing.T) {
	a, err := ParseAddress("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen(a, New(Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range maxConns + 24 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		// One request, its answer never read: the connection then idles
		// in keep-alive (60 s), past the header timeout.
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Accepts() < maxConns && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // room for any further accept
	if n := s.Accepts(); n != maxConns {
		t.Fatalf("%d idle connections: the endpoint accepted %d, want exactly %d", len(held), n, maxConns)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("after the holders left: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the holders left: GET /healthz = %d", resp.StatusCode)
	}
}
