package record

import (
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// Sample is a small synthetic record (one passing probe per class, on a
// made-up host), for tests of what reads records (verify, report) and for
// the documentation. It was observed nowhere: never sign it with a real
// key.
func Sample() *Record {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	r := &Record{
		Schema: Schema,
		RunID:  "00112233445566778899aabb",
		Cordon: Build{Version: "dev", Module: "github.com/cordon-project/cordon", Commit: "unknown", GoVersion: "go1.26",
			Platform: "linux/amd64", BinarySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
		Provider: Provider{Name: "linux-native", Version: "1", Capability: sandbox.Capability{Schema: sandbox.CapabilitySchema,
			Provider: "linux-native", Version: "1", MaxLevel: level.DedicatedContainer, Features: map[string]string{"landlock_abi": "7"}}},
		Host: Host{Host: evidence.Host{Kernel: "6.18.0", BootID: "8c1d0e4e-0000-4000-8000-000000000000",
			Cgroups: map[string]string{"memory": "v1", "pids": "v1"}, LandlockABI: 7, Seccomp: true}, Arch: "amd64", CgroupMode: "v1 hybrid"},
		Bindings:    Bindings{Config: None, PolicySet: None, Rootfs: None},
		Claim:       Claim{Requested: level.DedicatedContainer.String(), Profile: "SAFE_GUIDED"},
		TCB:         append([]string{}, SuiteTCB...),
		Assumptions: append([]string{}, SuiteAssumptions...),
		NonClaims:   append([]string{}, SuiteNonClaims...),
		Window:      Window{Started: t0},
	}
	var ps []ProbeResult
	for i, c := range Classes() {
		ps = append(ps, ProbeResult{ID: string(c) + ".sample", Class: c, Clause: "§2 item 5", Title: "sample " + string(c) + " probe",
			Verdict: Pass, Started: t0.Add(time.Duration(i) * time.Second), Duration: time.Second,
			Facts: []Fact{
				{Name: "attempt", OK: true, Want: "denied", Got: "denied", Source: "host listener"},
				{Name: "control", OK: true, Want: "reached", Got: "reached", Source: "host", Control: true},
			}})
	}
	r.Finish(ps, t0.Add(time.Minute))
	return r
}
