package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
)

// latencyBuckets (seconds) span a refused connection (sub-millisecond) to
// a long model stream (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// maxWorkloads bounds the budget states kept (one per workload, the last
// one a receipt carried); past it the oldest is forgotten.
const maxWorkloads = 4096

// Metrics is the daemon's registry. Its methods are safe for concurrent
// use; ObserveReceipt is the store's receipt observer.
type Metrics struct {
	reg *prometheus.Registry

	crossings *prometheus.CounterVec   // broker, decision, reason_class
	duration  *prometheus.HistogramVec // broker
	firstByte *prometheus.HistogramVec // broker
	starts    prometheus.Counter
	stops     prometheus.Counter
	failures  *prometheus.CounterVec // op, kind

	mu      sync.Mutex
	budgets map[string]budgetEntry // by workload: never a label
	seq     uint64
}

type budgetEntry struct {
	st  crossing.BudgetState
	seq uint64
}

// Options configure the registry.
type Options struct {
	// Records, when set, are read at each scrape (sandboxes by state and
	// level, the evidence log's size).
	Records Records
	// StateDir, when set, is the state directory whose store file and
	// run-log directory are measured at each scrape.
	StateDir string
}

// New returns the registry with the Go runtime and process collectors
// and the scrape-time collector over o's records and files.
func New(o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), budgets: map[string]budgetEntry{}}
	m.crossings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cordon_crossings_total",
		Help: "Crossings recorded (one per receipt), by broker, decision and reason class.",
	}, []string{"broker", "decision", "reason_class"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cordon_crossing_duration_seconds",
		Help:    "Duration of each crossing as its receipt records it, by broker.",
		Buckets: latencyBuckets,
	}, []string{"broker"})
	m.firstByte = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cordon_crossing_first_byte_seconds",
		Help:    "Time to the upstream's first byte, for crossings whose receipt records it, by broker.",
		Buckets: latencyBuckets,
	}, []string{"broker"})
	m.starts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cordon_sandbox_starts_total", Help: "Sandboxes the daemon started (admitted and running)."})
	m.stops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cordon_sandbox_stops_total", Help: "Sandboxes the daemon stopped."})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cordon_sandbox_failures_total",
		Help: "Lifecycle operations that failed, by operation and failure kind (internal/failure).",
	}, []string{"op", "kind"})
	for _, op := range lifecycleOps {
		for _, k := range failureKinds {
			m.failures.WithLabelValues(op, k)
		}
	}
	m.reg.MustRegister(m.crossings, m.duration, m.firstByte, m.starts, m.stops, m.failures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		budgetCollector{m})
	if o.Records != nil || o.StateDir != "" {
		m.reg.MustRegister(&scrapeCollector{recs: o.Records, stateDir: o.StateDir})
	}
	return m
}

// evidenceBroker is the broker of attestation receipts (internal/attest).
const evidenceBroker = "evidence"

// Registry is what the endpoint serves (and tests gather).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveReceipt counts one committed receipt. Only fixed label values
// leave it: the broker and decision when they are known ones, the reason
// reduced to its class.
//
// A receipt of the evidence broker (a signed session receipt or record,
// logged by the trusted side: docs/session-receipts.md) is no crossing and
// is not counted as one; it is a leaf of the log like any receipt.
func (m *Metrics) ObserveReceipt(rc crossing.Receipt) {
	if rc.Broker == evidenceBroker {
		return
	}
	b := brokerLabel(rc.Broker)
	m.crossings.WithLabelValues(b, decisionLabel(rc.Decision), ReasonClass(rc)).Inc()
	if rc.Duration >= 0 {
		m.duration.WithLabelValues(b).Observe(rc.Duration.Seconds())
	}
	if rc.FirstByte > 0 {
		m.firstByte.WithLabelValues(b).Observe(rc.FirstByte.Seconds())
	}
	if rc.Identity.Workload == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if _, ok := m.budgets[rc.Identity.Workload]; !ok && len(m.budgets) >= maxWorkloads {
		m.forgetOldest()
	}
	m.budgets[rc.Identity.Workload] = budgetEntry{st: rc.Budget, seq: m.seq}
}

func (m *Metrics) forgetOldest() {
	var oldest string
	var min uint64
	for w, e := range m.budgets {
		if oldest == "" || e.seq < min {
			oldest, min = w, e.seq
		}
	}
	delete(m.budgets, oldest)
}

// Lifecycle counts one daemon lifecycle operation (OpCreate, OpStart,
// OpStop) and its outcome: nil is a start or stop done; an error counts a
// failure of its internal/failure kind.
func (m *Metrics) Lifecycle(op string, err error) {
	op = oneOf(op, lifecycleOps, "other")
	if err != nil {
		m.failures.WithLabelValues(op, oneOf(string(failure.KindOf(err)), failureKinds, string(failure.KindInternal))).Inc()
		return
	}
	switch op {
	case OpStart:
		m.starts.Inc()
	case OpStop:
		m.stops.Inc()
	}
}

// budgetCollector exports the budget states receipts last carried,
// summed over workloads per budget kind.
type budgetCollector struct{ m *Metrics }

var (
	budgetUsedDesc = prometheus.NewDesc("cordon_budget_used",
		"Budget spent in the current window (settled and held), summed over workloads seen since the daemon started, by budget kind.", []string{"kind"}, nil)
	budgetLimitDesc = prometheus.NewDesc("cordon_budget_limit",
		"Budget limits, summed over the workloads that have one for the kind.", []string{"kind"}, nil)
	budgetRatioDesc = prometheus.NewDesc("cordon_budget_used_ratio_max",
		"The highest spent/limit ratio among workloads with a limit for the kind (1 is exhausted).", []string{"kind"}, nil)
)

func (c budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetUsedDesc
	ch <- budgetLimitDesc
	ch <- budgetRatioDesc
}

func (c budgetCollector) Collect(ch chan<- prometheus.Metric) {
	var used, limit [8]float64
	var ratio [8]float64
	c.m.mu.Lock()
	for _, e := range c.m.budgets {
		u, l := amountOf(e.st.Used), amountOf(e.st.Limits)
		for i := range budgetKinds {
			used[i] += float64(u[i])
			if l[i] > 0 {
				limit[i] += float64(l[i])
				if r := float64(u[i]) / float64(l[i]); r > ratio[i] {
					ratio[i] = r
				}
			}
		}
	}
	c.m.mu.Unlock()
	for i, k := range budgetKinds {
		ch <- prometheus.MustNewConstMetric(budgetUsedDesc, prometheus.GaugeValue, used[i], k)
		ch <- prometheus.MustNewConstMetric(budgetLimitDesc, prometheus.GaugeValue, limit[i], k)
		ch <- prometheus.MustNewConstMetric(budgetRatioDesc, prometheus.GaugeValue, ratio[i], k)
	}
}
