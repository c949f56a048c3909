package metrics

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cordon-project/cordon/internal/store"
)

// Records is what a scrape reads from the store (the daemon's *store.Store).
type Records interface {
	DaemonSandboxes(ctx context.Context) ([]store.DaemonSandbox, error)
	LogSize(ctx context.Context) (int64, error)
}

var _ Records = (*store.Store)(nil)

// scrapeTimeout bounds a scrape's store reads.
const scrapeTimeout = 5 * time.Second

var (
	sandboxesDesc = prometheus.NewDesc("cordon_sandboxes",
		"Sandboxes in the daemon's records, by state.", []string{"state"}, nil)
	levelsDesc = prometheus.NewDesc("cordon_sandboxes_admitted",
		"Running sandboxes by the isolation level they were admitted at.", []string{"level"}, nil)
	logLeavesDesc = prometheus.NewDesc("cordon_evidence_log_leaves",
		"Leaves (receipts) in the Merkle evidence log.", nil, nil)
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
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, levelsDesc, logLeavesDesc, storeBytesDesc, runLogBytesDesc, storeUpDesc} {
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
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, up)
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
