package hostmgr

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cordon-project/cordon/internal/metrics"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/store"
)

// TestDaemonLifecycleMetrics: the daemon tells its Lifecycle hook each
// create, start and stop it carries out, a refused start by its failure
// kind; the metrics read the sandboxes' states from its records.
func TestDaemonLifecycleMetrics(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state"), store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := metrics.New(metrics.Options{Records: st})
	newDaemon := func(p *fake.Provider) *Daemon {
		d, err := New(Options{StateDir: filepath.Join(dir, "state"), Store: st, Provider: p, VolumeDir: filepath.Join(dir, "volumes"), Lifecycle: m.Lifecycle})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newDaemon(&fake.Provider{})
	argv := []string{"/bin/sh", "-c", "sleep 30"}
	for _, name := range []string{"m1", "m2"} {
		if err := d.testCall(t, "create", CreateArgs{Name: name, Spec: Spec{Level: "SHARED", Argv: argv}}, nil, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := d.testCall(t, "start", NameArgs{Name: name}, nil, nil); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	if err := d.testCall(t, "stop", NameArgs{Name: "m1"}, nil, nil); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Stopping a stopped sandbox is not a second stop.
	if err := d.testCall(t, "stop", NameArgs{Name: "m1"}, nil, nil); err != nil {
		t.Fatalf("stop again: %v", err)
	}
	// A start the evidence refuses is a failure of kind evidence_insufficient.
	over := newDaemon(&fake.Provider{ClaimLevel: sandbox.DedicatedContainer})
	if err := over.testCall(t, "create", CreateArgs{Name: "m3", Spec: Spec{Argv: argv}}, nil, nil); err != nil {
		t.Fatalf("create m3: %v", err)
	}
	if err := over.testCall(t, "start", NameArgs{Name: "m3"}, nil, nil); err == nil {
		t.Fatal("start m3 on the overstating fake succeeded")
	}
	t.Cleanup(func() { _ = d.testCall(t, "stop", NameArgs{Name: "m2"}, nil, nil) })

	want := `
# HELP cordon_sandbox_starts_total Sandboxes the daemon started (admitted and running).
# TYPE cordon_sandbox_starts_total counter
cordon_sandbox_starts_total 2
# HELP cordon_sandbox_stops_total Sandboxes the daemon stopped.
# TYPE cordon_sandbox_stops_total counter
cordon_sandbox_stops_total 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "cordon_sandbox_starts_total", "cordon_sandbox_stops_total"); err != nil {
		t.Error(err)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			var ls []string
			for _, lp := range mt.GetLabel() {
				ls = append(ls, lp.GetValue())
			}
			v := mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			got[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	for k, want := range map[string]float64{
		"cordon_sandbox_failures_total{evidence_insufficient,start}": 1, // labels in name order: kind, op
		"cordon_sandbox_failures_total{internal,create}":             0,
		"cordon_sandboxes{running}":                                  1,
		"cordon_sandboxes{stopped}":                                  2,
		"cordon_sandboxes_admitted{SHARED}":                          1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}
