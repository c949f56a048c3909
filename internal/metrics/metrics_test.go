package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
)

// scrape serves h's /metrics and parses the exposition text.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", rec.Code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// allowedLabels is every label value the registry may carry, by label name.
func allowedLabels() map[string][]string {
	return map[string][]string{
		"broker":       append(slices.Clone(brokers), "other"),
		"decision":     append(slices.Clone(decisions), "other"),
		"reason_class": reasonClasses,
		"op":           append(slices.Clone(lifecycleOps), "other"),
		"kind":         append(slices.Clone(failureKinds), budgetKinds...),
		"state":        append(slices.Clone(states), "other"),
		"level":        append(levels(), "unknown"),
		"version":      {runtime.Version()}, // go_info: the Go collector's own
	}
}

// TestHostileReceiptsCarryNoLabel: receipts whose every string is hostile
// (a megabyte of reason, a target with newlines and quotes, a broker and
// decision the agent might have spelt) leave no trace in any label: every
// label value of the scrape is one of the fixed sets.
func TestHostileReceiptsCarryNoLabel(t *testing.T) {
	m := New(Options{})
	hostile := []string{
		strings.Repeat("A", 1<<20),
		"evil.example:443\n# HELP cordon_fake 1\ncordon_fake 1",
		`model"} 1` + "\n" + `x{a="`,
		"claude-opus\x00\xff",
		"budget-exceeded-but-not-really-" + strings.Repeat("z", 300),
	}
	for _, h := range hostile {
		m.ObserveReceipt(crossing.Receipt{
			Broker: h, Decision: h, Reason: h, Target: h, Action: h,
			Identity: crossing.Identity{Workload: h, SandboxID: h, Tenant: h},
			Duration: time.Millisecond, FirstByte: time.Microsecond,
			Policy: &crossing.PolicyDecision{Determining: []string{h}},
		})
		m.ObserveReceipt(crossing.Receipt{Broker: "egress", Decision: crossing.Deny, Reason: h, Target: h})
	}
	allowed := allowedLabels()
	n := 0
	for name, fam := range scrape(t, Handler(m)) {
		for _, mt := range fam.GetMetric() {
			for _, lp := range mt.GetLabel() {
				n++
				if !slices.Contains(allowed[lp.GetName()], lp.GetValue()) {
					t.Errorf("%s{%s=%q}: not a fixed label value", name, lp.GetName(), lp.GetValue())
				}
				for _, h := range hostile {
					if len(lp.GetValue()) > 64 || strings.Contains(h, lp.GetValue()) && len(lp.GetValue()) > 8 {
						t.Errorf("%s{%s=%q} carries receipt text", name, lp.GetName(), clipForTest(lp.GetValue()))
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the scrape carries no label at all: nothing was checked")
	}
	// The receipts were counted, under fixed values.
	if got := testutil.ToFloat64(m.crossings.WithLabelValues("other", "other", ReasonPolicy)); got != 4 {
		t.Errorf("crossings{other,other,policy} = %v, want 4 (the hostile receipts with a determining policy)", got)
	}
	if got := testutil.ToFloat64(m.crossings.WithLabelValues("egress", "deny", ReasonOther)); got != 4 {
		t.Errorf("crossings{egress,deny,other} = %v, want 4", got)
	}
}

func clipForTest(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func TestReasonClass(t *testing.T) {
	for _, tc := range []struct {
		rc   crossing.Receipt
		want string
	}{
		{crossing.Receipt{Decision: crossing.Allow, Reason: "policy-denied"}, ReasonOK},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "host-not-allowed"}, ReasonNotDeclared},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "address-denied"}, ReasonAddress},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "policy-denied"}, ReasonPolicy},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "receipt_budget_exhausted: this sandbox has 3 receipts"}, ReasonBudget},
		{crossing.Receipt{Decision: crossing.Deny, Action: store.ReasonGatewayLost, Reason: "anything"}, ReasonLost},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "denied by policy for this workload; nothing was forwarded"}, ReasonPolicy},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "the workload's model budget is exhausted (requests: 1 used of 1)"}, ReasonBudget},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "approval pending: ap-1 (expires x)"}, ReasonApproval},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "the budget authority is unavailable; nothing was forwarded"}, ReasonUnavailable},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "an operator denied this exact request, or too many approvals are waiting"}, ReasonApproval},
		{crossing.Receipt{Decision: crossing.Deny, Reason: `tools[fs].allow does not offer tool "rm"`}, ReasonNotDeclared},
		{crossing.Receipt{Decision: crossing.Deny, Reason: `model "x" is not allowed for this workload`}, ReasonNotDeclared},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "request body is not valid JSON: x"}, ReasonInvalid},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "too many model streams are open"}, ReasonLimit},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "zzz"}, ReasonOther},
		{crossing.Receipt{Decision: crossing.Deny, Reason: "zzz", Policy: &crossing.PolicyDecision{Determining: []string{"f1"}}}, ReasonPolicy},
	} {
		if got := ReasonClass(tc.rc); got != tc.want {
			t.Errorf("ReasonClass(%q, %q) = %q, want %q", tc.rc.Decision, tc.rc.Reason, got, tc.want)
		}
	}
}

// FuzzReasonClass: whatever a receipt says, its class is one of the set.
func FuzzReasonClass(f *testing.F) {
	f.Add("deny", "host-not-allowed", "connect")
	f.Add("deny", "budget-exceeded: x", "")
	f.Add("allow", "route main", "anthropic.messages")
	f.Fuzz(func(t *testing.T, decision, reason, action string) {
		rc := crossing.Receipt{Decision: decision, Reason: reason, Action: action, Broker: reason}
		if c := ReasonClass(rc); !slices.Contains(reasonClasses, c) {
			t.Fatalf("ReasonClass(%q) = %q, not in the fixed set", reason, c)
		}
		if b := brokerLabel(rc.Broker); !slices.Contains(allowedLabels()["broker"], b) {
			t.Fatalf("brokerLabel(%q) = %q", rc.Broker, b)
		}
	})
}

func TestObserveReceiptCountsAndHistograms(t *testing.T) {
	m := New(Options{})
	for i := 0; i < 3; i++ {
		m.ObserveReceipt(crossing.Receipt{Broker: "model", Decision: crossing.Allow, Duration: 20 * time.Millisecond, FirstByte: 5 * time.Millisecond,
			Identity: crossing.Identity{Workload: "w1"},
			Budget:   crossing.BudgetState{Used: crossing.Amount{Requests: int64(i + 1)}, Limits: crossing.Amount{Requests: 10}}})
	}
	m.ObserveReceipt(crossing.Receipt{Broker: "egress", Decision: crossing.Deny, Reason: "host-not-allowed", Duration: time.Millisecond,
		Identity: crossing.Identity{Workload: "w2"}, Budget: crossing.BudgetState{Used: crossing.Amount{Connections: 1}}})
	if got := testutil.ToFloat64(m.crossings.WithLabelValues("model", "allow", "ok")); got != 3 {
		t.Errorf("model allow = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.crossings.WithLabelValues("egress", "deny", "not_declared")); got != 1 {
		t.Errorf("egress deny not_declared = %v, want 1", got)
	}
	fams := scrape(t, Handler(m))
	hist := func(name, broker string) uint64 {
		for _, mt := range fams[name].GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "broker" && lp.GetValue() == broker {
					return mt.GetHistogram().GetSampleCount()
				}
			}
		}
		return 0
	}
	if got := hist("cordon_crossing_duration_seconds", "model"); got != 3 {
		t.Errorf("model duration count = %d, want 3", got)
	}
	if got := hist("cordon_crossing_first_byte_seconds", "model"); got != 3 {
		t.Errorf("model first-byte count = %d, want 3", got)
	}
	if got := hist("cordon_crossing_first_byte_seconds", "egress"); got != 0 {
		t.Errorf("egress first-byte count = %d, want 0 (no first byte recorded)", got)
	}
	gauge := func(name, kind string) float64 {
		for _, mt := range fams[name].GetMetric() {
			if mt.GetLabel()[0].GetValue() == kind {
				return mt.GetGauge().GetValue()
			}
		}
		t.Fatalf("%s{kind=%q} missing", name, kind)
		return 0
	}
	// The last state per workload, summed: w1 used 3 of 10 requests.
	if u, l, r := gauge("cordon_budget_used", "requests"), gauge("cordon_budget_limit", "requests"), gauge("cordon_budget_used_ratio_max", "requests"); u != 3 || l != 10 || r != 0.3 {
		t.Errorf("budget requests used/limit/ratio = %v/%v/%v, want 3/10/0.3", u, l, r)
	}
	if u, l := gauge("cordon_budget_used", "connections"), gauge("cordon_budget_limit", "connections"); u != 1 || l != 0 {
		t.Errorf("budget connections used/limit = %v/%v, want 1/0 (unlimited)", u, l)
	}
}

func TestBudgetWorkloadsBounded(t *testing.T) {
	m := New(Options{})
	for i := 0; i < maxWorkloads+10; i++ {
		m.ObserveReceipt(crossing.Receipt{Broker: "model", Decision: crossing.Allow, Identity: crossing.Identity{Workload: strings.Repeat("w", 1+i%7) + string(rune('a'+i%26)) + time.Duration(i).String()}})
	}
	if n := len(m.budgets); n > maxWorkloads {
		t.Errorf("%d workloads kept, want at most %d", n, maxWorkloads)
	}
}

func TestLifecycle(t *testing.T) {
	m := New(Options{})
	m.Lifecycle(OpStart, nil)
	m.Lifecycle(OpStart, nil)
	m.Lifecycle(OpStop, nil)
	m.Lifecycle(OpStart, failure.Failf(failure.KindEvidence, "start", "not admitted"))
	m.Lifecycle(OpCreate, errors.New("no kind"))
	m.Lifecycle("hostile\nop", failure.Failf(failure.KindUsage, "x", "y"))
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(m.starts), 2, "starts"},
		{testutil.ToFloat64(m.stops), 1, "stops"},
		{testutil.ToFloat64(m.failures.WithLabelValues(OpStart, string(failure.KindEvidence))), 1, "start failures (evidence)"},
		{testutil.ToFloat64(m.failures.WithLabelValues(OpCreate, string(failure.KindInternal))), 1, "create failures (internal)"},
		{testutil.ToFloat64(m.failures.WithLabelValues("other", string(failure.KindUsage))), 1, "other failures (usage)"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// fakeRecords is the daemon's store as a scrape sees it.
type fakeRecords struct {
	recs   []store.DaemonSandbox
	leaves int64
	err    error
}

func (f fakeRecords) DaemonSandboxes(context.Context) ([]store.DaemonSandbox, error) {
	return f.recs, f.err
}
func (f fakeRecords) LogSize(context.Context) (int64, error) { return f.leaves, f.err }

func TestScrapeRecordsAndSizes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cordon.db"), make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cordon.db-wal"), make([]byte, 24), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{100, 23} {
		if err := os.WriteFile(filepath.Join(dir, "logs", string(rune('a'+i))+".log"), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink in the log directory is not followed.
	_ = os.Symlink(filepath.Join(dir, "cordon.db"), filepath.Join(dir, "logs", "link.log"))
	recs := fakeRecords{leaves: 42, recs: []store.DaemonSandbox{
		{State: store.DRunning, Level: "DEDICATED_CONTAINER"}, {State: store.DRunning, Level: "DEDICATED_CONTAINER"},
		{State: store.DRunning, Level: "bogus\nlevel"}, {State: store.DStopped, Level: "DEDICATED_CONTAINER"},
		{State: store.DCreated}, {State: "weird"},
	}}
	m := New(Options{Records: recs, StateDir: dir})
	want := `
# HELP cordon_sandboxes Sandboxes in the daemon's records, by state.
# TYPE cordon_sandboxes gauge
cordon_sandboxes{state="created"} 1
cordon_sandboxes{state="creating"} 0
cordon_sandboxes{state="other"} 1
cordon_sandboxes{state="removing"} 0
cordon_sandboxes{state="running"} 3
cordon_sandboxes{state="starting"} 0
cordon_sandboxes{state="stopped"} 1
cordon_sandboxes{state="stopping"} 0
# HELP cordon_evidence_log_leaves Leaves (receipts) in the Merkle evidence log.
# TYPE cordon_evidence_log_leaves gauge
cordon_evidence_log_leaves 42
# HELP cordon_store_size_bytes Size of the store (cordon.db with its write-ahead log), which holds the evidence log.
# TYPE cordon_store_size_bytes gauge
cordon_store_size_bytes 1024
# HELP cordon_run_logs_size_bytes Size of the daemon's run-log directory (the main programs' output).
# TYPE cordon_run_logs_size_bytes gauge
cordon_run_logs_size_bytes 123
# HELP cordon_store_up 1 when the last scrape read the store, 0 when it failed.
# TYPE cordon_store_up gauge
cordon_store_up 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"cordon_sandboxes", "cordon_evidence_log_leaves", "cordon_store_size_bytes", "cordon_run_logs_size_bytes", "cordon_store_up"); err != nil {
		t.Error(err)
	}
	fams := scrape(t, Handler(m))
	lv := map[string]float64{}
	for _, mt := range fams["cordon_sandboxes_admitted"].GetMetric() {
		lv[mt.GetLabel()[0].GetValue()] = mt.GetGauge().GetValue()
	}
	if lv["DEDICATED_CONTAINER"] != 2 || lv["unknown"] != 1 || lv["SHARED"] != 0 {
		t.Errorf("admitted levels = %v, want DEDICATED_CONTAINER 2, unknown 1", lv)
	}

	// A store that fails is said, not hidden.
	m = New(Options{Records: fakeRecords{err: errors.New("locked")}})
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP cordon_store_up 1 when the last scrape read the store, 0 when it failed.
# TYPE cordon_store_up gauge
cordon_store_up 0
`), "cordon_store_up"); err != nil {
		t.Error(err)
	}
}

// TestHandlerPaths: only GET/HEAD /metrics and /healthz are served.
func TestHandlerPaths(t *testing.T) {
	h := Handler(New(Options{}))
	for _, tc := range []struct {
		method, path string
		want         int
		body         string
	}{
		{"GET", "/metrics", 200, "go_goroutines"},
		{"HEAD", "/metrics", 200, ""},
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/", 404, ""},
		{"GET", "/metrics/", 404, ""},
		{"GET", "/debug/pprof/", 404, ""},
		{"GET", "/../metrics", 404, ""},
		{"POST", "/metrics", 405, ""},
		{"PUT", "/healthz", 405, ""},
		{"POST", "/other", 404, ""},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, "http://x/", nil)
		req.URL.Path = tc.path
		h.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tc.want || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s %s = %d (%d bytes), want %d containing %q", tc.method, tc.path, rec.Code, len(body), tc.want, tc.body)
		}
	}
	// The process collectors are there (Go runtime, process).
	fams := scrape(t, h)
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "cordon_sandbox_starts_total", "cordon_sandbox_failures_total"} {
		if fams[name] == nil {
			t.Errorf("%s missing from the scrape", name)
		}
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want     string
		loopback bool
		ok       bool
	}{
		{"127.0.0.1:9464", "127.0.0.1:9464", true, true},
		{"localhost:9464", "127.0.0.1:9464", true, true},
		{"[::1]:9464", "[::1]:9464", true, true},
		{"127.0.0.2:0", "127.0.0.2:0", true, true},
		{"10.1.2.3:9464", "10.1.2.3:9464", false, true},
		{"[::ffff:127.0.0.1]:9464", "127.0.0.1:9464", true, true},
		{":9464", "", false, false},
		{"0.0.0.0:9464", "", false, false},
		{"[::]:9464", "", false, false},
		{"example.com:9464", "", false, false},
		{"127.0.0.1", "", false, false},
		{"127.0.0.1:99999", "", false, false},
		{"127.0.0.1:-1", "", false, false},
		{"[fe80::1%eth0]:9464", "", false, false},
		{"", "", false, false},
	} {
		a, err := ParseAddress(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseAddress(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if failure.KindOf(err) != failure.KindUsage {
				t.Errorf("ParseAddress(%q) kind = %s, want usage", tc.in, failure.KindOf(err))
			}
			continue
		}
		if a.AddrPort.String() != tc.want || a.Loopback != tc.loopback {
			t.Errorf("ParseAddress(%q) = %v loopback=%v, want %s loopback=%v", tc.in, a.AddrPort, a.Loopback, tc.want, tc.loopback)
		}
	}
}

// TestServerServesAndCounts: the endpoint serves a real scrape over TCP,
// counts the connections it accepts, sets its slow-client limits, and
// stops on Close.
func TestServerServesAndCounts(t *testing.T) {
	a, err := ParseAddress("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Options{})
	s, err := Listen(a, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	if s.srv.ReadHeaderTimeout <= 0 || s.srv.ReadTimeout <= 0 || s.srv.WriteTimeout <= 0 || s.srv.IdleTimeout <= 0 || s.srv.MaxHeaderBytes <= 0 {
		t.Errorf("server limits unset: %+v", s.srv)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	for i := 0; i < 2; i++ {
		resp, err := c.Get("http://" + s.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("cordon_sandbox_starts_total 0")) {
			t.Fatalf("GET /metrics = %d, %d bytes", resp.StatusCode, len(body))
		}
	}
	if n := s.Accepts(); n != 2 {
		t.Errorf("Accepts = %d, want 2", n)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP cordon_metrics_connections_accepted_total Connections the metrics endpoint accepted (each scrape without keep-alive is one).
# TYPE cordon_metrics_connections_accepted_total counter
cordon_metrics_connections_accepted_total 2
`), "cordon_metrics_connections_accepted_total"); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve = %v after Close", err)
	}
	if _, err := c.Get("http://" + s.Addr().String() + "/metrics"); err == nil {
		t.Error("the endpoint still answers after Close")
	}
}

// TestListenWarnsOffLoopback: an address the operator named off loopback
// is served with a warning that says who can read it; loopback at INFO.
func TestListenWarnsOffLoopback(t *testing.T) {
	for _, loopback := range []bool{true, false} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		a := Address{AddrPort: netip.MustParseAddrPort("127.0.0.1:0"), Loopback: loopback}
		s, err := Listen(a, New(Options{}), log)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "whoever reaches it")
		if warned == loopback {
			t.Errorf("loopback=%v: log %q, want a warning only off loopback", loopback, buf.String())
		}
	}
}

// TestObserveReceiptSkipsEvidence: a session receipt (broker evidence) is
// no crossing: nothing is counted for it; a crossing beside it is.
func TestObserveReceiptSkipsEvidence(t *testing.T) {
	m := New(Options{})
	m.ObserveReceipt(crossing.Receipt{Broker: "evidence", Action: "session.receipt", Decision: crossing.Allow, Identity: crossing.Identity{Workload: "w"}})
	m.ObserveReceipt(crossing.Receipt{Broker: "model", Decision: crossing.Allow})
	if got := testutil.CollectAndCount(m.crossings); got != 1 {
		t.Errorf("crossings series = %d, want 1 (the model crossing only)", got)
	}
	if got := testutil.ToFloat64(m.crossings.WithLabelValues("other", "allow", "ok")); got != 0 {
		t.Errorf("the session receipt was counted as a crossing of broker other: %v", got)
	}
}
