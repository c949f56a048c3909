// Package metrics is cordon's Prometheus endpoint: the daemon's counters,
// gauges and histograms (sandboxes by state and level, lifecycle starts,
// stops and failures, crossings by broker, decision and reason class,
// budget use, gateway latency, store and log sizes, the Go runtime) and
// the HTTP server that serves them on an opt-in address
// (`cordon daemon --metrics-address`).
//
// Plane: root. It runs in the daemon, in the host's network namespace;
// it reads receipts after their transaction commits (a store observer)
// and the daemon's records at scrape time.
//
// It must never:
//   - be reachable from a sandbox: it listens only in the host network
//     namespace (every sandbox has its own), on a loopback address unless
//     the operator names another host explicitly, and never on all
//     interfaces;
//   - carry a label value from untrusted input: every label is one of a
//     small fixed set computed here (broker, decision, reason class,
//     budget kind, state, level, failure kind); targets, hosts, model
//     names, reasons and workload names are never labels;
//   - carry a secret: it sees receipts, which hold none, and exports only
//     counts, sizes and durations.
package metrics
