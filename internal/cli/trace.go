package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// tracer times the phases of a run. With CORDON_TRACE=1 in cordon's own
// environment it prints them as one JSON line on stderr when the run ends
// (bench/ uses it for the per-phase breakdown). The cost when off is a few
// time.Now calls.
type tracer struct {
	on     bool
	last   time.Time
	phases []sandbox.Phase
}

func newTracer(start time.Time) *tracer {
	return &tracer{on: os.Getenv("CORDON_TRACE") == "1", last: start}
}

func (t *tracer) mark(name string) {
	now := time.Now()
	t.phases = append(t.phases, sandbox.Phase{Name: name, Dur: now.Sub(t.last)})
	t.last = now
}

// sub records a sandbox's own phases in place of one mark.
func (t *tracer) sub(sb sandbox.Sandbox, prefix string) {
	var sum time.Duration
	for _, p := range sb.Phases() {
		t.phases = append(t.phases, sandbox.Phase{Name: prefix + "." + p.Name, Dur: p.Dur, Nested: p.Nested})
		if !p.Nested {
			sum += p.Dur
		}
	}
	now := time.Now()
	if rest := now.Sub(t.last) - sum; rest > 0 {
		t.phases = append(t.phases, sandbox.Phase{Name: prefix + ".other", Dur: rest})
	}
	t.last = now
}

func (t *tracer) flush(w io.Writer) {
	if !t.on {
		return
	}
	fmt.Fprint(w, `{"cordon_trace":[`)
	for i, p := range t.phases {
		if i > 0 {
			fmt.Fprint(w, ",")
		}
		fmt.Fprintf(w, `{"phase":%q,"us":%d,"nested":%v}`, p.Name, p.Dur.Microseconds(), p.Nested)
	}
	fmt.Fprintln(w, "]}")
}
