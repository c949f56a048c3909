package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cordon-project/cordon/internal/testkit"
)

// scrapeMetrics GETs addr's /metrics from the host (no keep-alive: one
// connection per scrape) and parses the exposition text.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape %s = %d\n%s", addr, resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the exposition: %v\n%s", err, body)
	}
	return fams
}

// metricValue is the value of name with exactly the labels given
// (label=value pairs), a counter's or gauge's value or a histogram's
// sample count; -1 when there is no such series.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		if strings.Join(got, ",") != strings.Join(labels, ",") {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// daemonMetricsAddr is the address the daemon logged for its endpoint.
func daemonMetricsAddr(t *testing.T, d *daemon) string {
	t.Helper()
	re := regexp.MustCompile(`metrics endpoint serving"? address=(127\.0\.0\.1:\d+)`)
	var addr string
	waitFor(t, func() bool {
		m := re.FindStringSubmatch(d.String())
		if m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "the daemon's metrics endpoint in its log")
	return addr
}

// TestDaemonMetrics: a daemon started with --metrics-address serves
// metrics that move by exactly the crossings a sandbox made (model allow
// and deny, egress allow and deny: counters by broker, decision and reason
// class; latency histogram counts), and read its records (running
// sandboxes, level, starts, evidence log leaves). The agent-chosen model
// name (with a newline) is in no label. Then the escape: from inside the
// sandbox the endpoint cannot be reached — not on the sandbox's loopback
// (its own network namespace), not through the egress proxy by IP literal,
// not by a name the configuration allows and resolves to the endpoint's
// address (the loopback range is denied) — witnessed from the host by the
// endpoint's own accept count, which moved only by the host's scrape
// (the positive control: the host reaches it).
func TestDaemonMetrics(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--metrics-address", "127.0.0.1:0")
	addr := daemonMetricsAddr(t, d)
	_, mport, _ := net.SplitHostPort(addr)

	up := testkit.NewModelUpstream(t, fakeKey, "metrics-answer")
	// The allowed egress target listens on 127.0.0.2, and only that
	// address is let through: the endpoint's 127.0.0.1 stays denied.
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.2 (loopback /8): %v", err)
	}
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "allowed-body")
	}))
	target.Listener = ln
	target.Start()
	t.Cleanup(target.Close)
	_, tport, _ := net.SplitHostPort(ln.Addr().String())
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
    - host: metrics.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.2/32"]
  resolve:
    allowed.test: 127.0.0.2
    denied.test: 127.0.0.2
    metrics.test: 127.0.0.1
`, tport, mport))

	before := scrapeMetrics(t, addr)
	if v := metricValue(before, "cordon_sandboxes", "state=running"); v != 0 {
		t.Fatalf("cordon_sandboxes{running} = %v before any sandbox, want 0", v)
	}
	d.createStart("m1", "--config", cfg, "--", "/bin/sleep", "1000")
	exec := func(argv ...string) result {
		return d.cli(append([]string{"sandbox", "exec", "m1", "--"}, argv...)...)
	}
	modelCall := func(name string) string {
		r := exec("/usr/bin/curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "content-type: application/json",
			"-d", `{"model":"`+name+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "http://127.0.0.1:80/v1/messages")
		return r.Stdout
	}
	if code := modelCall("claude-x"); code != "200" {
		t.Fatalf("allowed model call = %q, want 200", code)
	}
	if code := modelCall(`evil\nmodel-name`); code == "200" {
		t.Fatalf("model call for an undeclared model = %q, want refused", code)
	}
	if r := exec("/usr/bin/curl", "-sS", "--max-time", "10", "http://allowed.test:"+tport+"/"); !strings.Contains(r.Stdout, "allowed-body") || hits.Load() != 1 {
		t.Fatalf("egress allowed = %d %q %q (hits %d)", r.Code, r.Stdout, r.Stderr, hits.Load())
	}
	if r := exec("/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://denied.test:"+tport+"/"); !strings.Contains(r.Stdout, "403") || hits.Load() != 1 {
		t.Fatalf("egress denied = %d %q %q (hits %d)", r.Code, r.Stdout, r.Stderr, hits.Load())
	}

	type rcpt struct{ Broker, Decision string }
	rcs := receiptLines[rcpt](t, st)
	if len(rcs) != 4 {
		t.Fatalf("%d receipts after 4 crossings: %+v", len(rcs), rcs)
	}
	after := scrapeMetrics(t, addr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cordon_crossings_total", []string{"broker=model", "decision=allow", "reason_class=ok"}, 1},
		{"cordon_crossings_total", []string{"broker=model", "decision=deny", "reason_class=not_declared"}, 1},
		{"cordon_crossings_total", []string{"broker=egress", "decision=allow", "reason_class=ok"}, 1},
		{"cordon_crossings_total", []string{"broker=egress", "decision=deny", "reason_class=not_declared"}, 1},
		{"cordon_crossing_duration_seconds", []string{"broker=model"}, 2},
		{"cordon_crossing_duration_seconds", []string{"broker=egress"}, 2},
		{"cordon_crossing_first_byte_seconds", []string{"broker=model"}, 1},
		{"cordon_sandboxes", []string{"state=running"}, 1},
		{"cordon_sandboxes_admitted", []string{"level=DEDICATED_CONTAINER"}, 1},
		{"cordon_sandbox_starts_total", nil, 1},
		{"cordon_evidence_log_leaves", nil, 5}, // the 4 crossings and the sandbox's signed session receipt
		{"cordon_store_up", nil, 1},
	} {
		if got := metricValue(after, c.name, c.labels...); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, strings.Join(c.labels, ","), got, c.want)
		}
	}
	var total float64
	for _, m := range after["cordon_crossings_total"].GetMetric() {
		total += m.GetCounter().GetValue()
		for _, lp := range m.GetLabel() {
			if strings.Contains(lp.GetValue(), "evil") || strings.Contains(lp.GetValue(), "test") {
				t.Errorf("a label carries agent input: %s=%q", lp.GetName(), lp.GetValue())
			}
		}
	}
	if total != float64(len(rcs)) {
		t.Errorf("cordon_crossings_total sums to %v, the store holds %d receipts", total, len(rcs))
	}
	for _, name := range []string{"cordon_store_size_bytes", "cordon_evidence_log_size_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		if v := metricValue(after, name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}

	// The escape: the sandbox tries the endpoint three ways.
	accepted := metricValue(after, "cordon_metrics_connections_accepted_total")
	if accepted < 2 {
		t.Fatalf("cordon_metrics_connections_accepted_total = %v after two host scrapes, want ≥ 2 (the control)", accepted)
	}
	for _, argv := range [][]string{
		{"/usr/bin/curl", "-sS", "--noproxy", "*", "--max-time", "5", "http://" + addr + "/metrics"},      // its own loopback
		{"/usr/bin/curl", "-sS", "-i", "--noproxy", "", "--max-time", "5", "http://" + addr + "/metrics"}, // the proxy, by IP literal
		{"/usr/bin/curl", "-sS", "-i", "--max-time", "5", "http://metrics.test:" + mport + "/metrics"},    // the proxy, by an allowed name
	} {
		r := exec(argv...)
		if strings.Contains(r.Stdout, "cordon_") || strings.Contains(r.Stdout, " 200") {
			t.Errorf("from the sandbox %v = %d %q: the endpoint answered", argv, r.Code, r.Stdout)
		}
	}
	final := scrapeMetrics(t, addr)
	for _, m := range final["cordon_crossings_total"].GetMetric() {
		t.Logf("cordon_crossings_total%v = %v", m.GetLabel(), m.GetCounter().GetValue())
	}
	t.Logf("accepted: %v before the escape, %v after", accepted, metricValue(final, "cordon_metrics_connections_accepted_total"))
	if got := metricValue(final, "cordon_metrics_connections_accepted_total"); got != accepted+1 {
		t.Errorf("the endpoint accepted %v connections, want %v: only the host's own scrape, none from the sandbox", got, accepted+1)
	}
	// The two attempts through the proxy were refused by its address checks.
	if got := metricValue(final, "cordon_crossings_total", "broker=egress", "decision=deny", "reason_class=address"); got != 2 {
		t.Errorf("egress denials of class address = %v, want 2 (IP literal, denied range)", got)
	}
	if r := d.cli("sandbox", "stop", "m1"); r.Code != 0 {
		t.Fatalf("stop: %s", r.Stderr)
	}
	end := scrapeMetrics(t, addr)
	if metricValue(end, "cordon_sandbox_stops_total") != 1 || metricValue(end, "cordon_sandboxes", "state=stopped") != 1 || metricValue(end, "cordon_sandboxes", "state=running") != 0 {
		t.Errorf("after stop: stops %v, stopped %v, running %v; want 1, 1, 0", metricValue(end, "cordon_sandbox_stops_total"),
			metricValue(end, "cordon_sandboxes", "state=stopped"), metricValue(end, "cordon_sandboxes", "state=running"))
	}
	d.cli("sandbox", "rm", "m1")
}

// TestDaemonMetricsAddressRefused: the daemon refuses to start with a
// metrics address on every interface or without a host, before serving.
func TestDaemonMetricsAddressRefused(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	for _, a := range []string{":9464", "0.0.0.0:9464", "[::]:9464", "metrics.example:9464"} {
		r := cordon(t, hooksBin, st, "daemon", "--socket", t.TempDir()+"/d.sock", "--metrics-address", a)
		if r.Code == 0 || !strings.Contains(r.Stderr, "--metrics-address") {
			t.Errorf("daemon --metrics-address %s = %d %q, want a usage refusal", a, r.Code, r.Stderr)
		}
	}
}
