package metrics

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cordon-project/cordon/internal/store"
)

// Records is what a scrape reads from the store (the daemon's *store.Store).
type Records interface {
	DaemonSandboxes(ctx context.Context) ([]store.DaemonSandbox, error)
	LogSize(ctx context.Context) (int64, error)
}

// LogBytes is what a Records may also tell: the evidence log's bytes,
// costly to read (store.Store.EvidenceLogBytes visits the log's pages), so
// a scrape rereads it at most every logBytesEvery.
type LogBytes interface {
	EvidenceLogBytes(ctx context.Context) (int64, error)
}

var (
	_ Records  = (*store.Store)(nil)
	_ LogBytes = (*store.Store)(nil)
)

// logBytesEvery is how stale the evidence log's byte size may be.
const logBytesEvery = time.Minute

// scrapeTimeout bounds a scrape's store reads.
const scrapeTimeout = 5 * time.Second

var (
	sandboxesDesc = prometheus.NewDesc("cordon_sandboxes",
		"Sandboxes in the daemon's records, by state.", []string{"state"}, nil)
	levelsDesc = prometheus.NewDesc("cordon_sandboxes_admitted",
		"Running sandboxes by the isolation level they were admitted at.", []string{"level"}, nil)
	logLeavesDesc = prometheus.NewDesc("cordon_evidence_log_leaves",
		"Leaves (receipts) in the Merkle evidence log.", nil, nil)
	logBytesDesc = prometheus.NewDesc("cordon_evidence_log_size_bytes",
		"Space the evidence log (receipts, leaves, hashes, checkpoints) takes in the store; reread at most every minute.", nil, nil)
	storeBytesDesc = prometheus.NewDesc("cordon_store_size_bytes",
		"Size of the store (cordon.db with its write-ahead log), which holds the evidence log.", nil, nil)
	runLogBytesDesc = prometheus.NewDesc("cordon_run_logs_size_bytes",
		"Size of the daemon's run-log directory (the main programs' output).", nil, nil)
	storeUpDesc = prometheus.NewDesc("cordon_store_up",
		"1 when the last scrape read the store, 0 when it failed.", nil, nil)
)

// scrapeCollector reads the daemon's records and files at scrape time.
type scrapeCollector struct {
	recs     Records
	stateDir string

	mu       sync.Mutex
	logBytes int64
	logAt    time.Time // when logBytes was read; zero: never
	// triedAt is when the size was last asked for, whatever came of it:
	// a read that failed (too slow on a big store) waits as long as one
	// that worked, so scraping in a loop cannot make the daemon walk the
	// log on every request.
	triedAt time.Time
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, levelsDesc, logLeavesDesc, logBytesDesc, storeBytesDesc, runLogBytesDesc, storeUpDesc} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.recs != nil {
		c.collectRecords(ch)
	}
	if c.stateDir != "" {
		var db int64
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if fi, err := os.Lstat(filepath.Join(c.stateDir, "cordon.db"+suffix)); err == nil && fi.Mode().IsRegular() {
				db += fi.Size()
			}
		}
		ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(db))
		ch <- prometheus.MustNewConstMetric(runLogBytesDesc, prometheus.GaugeValue, float64(dirSize(filepath.Join(c.stateDir, "logs"))))
	}
}

func (c *scrapeCollector) collectRecords(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	up := 1.0
	recs, err := c.recs.DaemonSandboxes(ctx)
	if err != nil {
		up = 0
	}
	byState := map[string]int{}
	byLevel := map[string]int{}
	for _, r := range recs {
		byState[oneOf(r.State, states, "other")]++
		if r.State == store.DRunning {
			byLevel[oneOf(r.Level, levels(), "unknown")]++
		}
	}
	if err == nil {
		for _, s := range append(states, "other") {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(byState[s]), s)
		}
		for _, l := range append(levels(), "unknown") {
			ch <- prometheus.MustNewConstMetric(levelsDesc, prometheus.GaugeValue, float64(byLevel[l]), l)
		}
	}
	if n, lerr := c.recs.LogSize(ctx); lerr == nil {
		ch <- prometheus.MustNewConstMetric(logLeavesDesc, prometheus.GaugeValue, float64(n))
	} else {
		up = 0
	}
	if lb, ok := c.recs.(LogBytes); ok {
		if n, ok := c.cachedLogBytes(ctx, lb); ok {
			ch <- prometheus.MustNewConstMetric(logBytesDesc, prometheus.GaugeValue, float64(n))
		}
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, up)
}

// cachedLogBytes is the evidence log's size, reread at most every
// logBytesEvery, failed reads included (scrapes in between get the last
// value read, if any).
func (c *scrapeCollector) cachedLogBytes(ctx context.Context, lb LogBytes) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.triedAt.IsZero() || time.Since(c.triedAt) >= logBytesEvery {
		c.triedAt = time.Now()
		if n, err := lb.EvidenceLogBytes(ctx); err == nil {
			c.logBytes, c.logAt = n, c.triedAt
		}
	}
	return c.logBytes, !c.logAt.IsZero()
}

// dirSize sums the regular files directly in dir (no symlink followed).
func dirSize(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}
