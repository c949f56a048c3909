package custody

import (
	"io"
	"syscall"
	"testing"
	"time"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestCPUThroughput(t *testing.T) {
	r := NewRedactor(toBytes(benchValues))
	in := benchInput(1<<20, benchValues)
	for _, name := range []string{"writer", "redact"} {
		best := time.Hour
		for rep := 0; rep < 5; rep++ {
			c0 := cpuTime()
			for k := 0; k < 20; k++ {
				if name == "writer" {
					w := r.Writer(io.Discard)
					for i := 0; i < len(in); i += 64 {
						w.Write(in[i:min(i+64, len(in))])
					}
					w.Close()
				} else {
					r.Redact(in)
				}
			}
			if d := (cpuTime() - c0) / 20; d < best {
				best = d
			}
		}
		t.Logf("%s: %v CPU per MiB = %.0f MB/s", name, best, float64(len(in))/best.Seconds()/1e6)
	}
}
