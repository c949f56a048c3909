// Package wire is what the gateway benchmark's driver and load generator
// say to each other: one JSON phase per line in, one JSON result per line
// out.
package wire

// Phase is one measured phase.
type Phase struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Stream bool   `json:"stream,omitempty"`
	C      int    `json:"c"`
	MiB    int    `json:"mib,omitempty"`
	Dur    string `json:"dur"`
	Warmup string `json:"warmup,omitempty"`
}

// Stats are milliseconds.
type Stats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Result is the load generator's report of one phase.
type Result struct {
	Name       string  `json:"name"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ElapsedS   float64 `json:"elapsed_s"`
	RPS        float64 `json:"rps"`
	Latency    Stats   `json:"latency_ms"`
	TTFB       *Stats  `json:"ttfb_ms,omitempty"`
	// Steps are medians and p99s of the parts of a request: for model
	// calls, "eof_after_last_byte" (the last body byte to the end of the
	// body); for egress downloads, the httptrace steps.
	Steps  map[string]Stats `json:"steps_ms,omitempty"`
	Bytes  int64            `json:"bytes,omitempty"`
	Series []float64        `json:"mib_s_each_second,omitempty"`
	MiBs   float64          `json:"mib_s,omitempty"`
	CPUms  float64          `json:"client_cpu_ms"`
	Start  int64            `json:"start_unix_ns"`
	End    int64            `json:"end_unix_ns"`
}
