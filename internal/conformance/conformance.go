package conformance

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

// Probe is one claim tested against the live system.
type Probe struct {
	// ID names the probe: its class, then dot-separated lowercase words
	// ("bypass.net.direct-tcp").
	ID     string
	Class  record.Class
	Clause string // the contract clause it evidences
	Title  string // one line for humans
	// Destructive probes stress a host-wide resource (memory, pids,
	// disk): they run only when the run's admitted evidence verified the
	// resource boundary, never on a provider that did not.
	Destructive bool
	// Daemon probes need a cordon daemon (Env.Daemon).
	Daemon bool
	// Launcher marks a denial made by cordon's own launcher before any
	// provider runs (e.g. closing inherited descriptors): it holds under
	// every provider, including one that isolates nothing, so a pass
	// says nothing about the provider under test.
	Launcher bool
	// Timeout bounds the probe (0: DefaultTimeout); at the deadline the
	// runner stops what the probe started.
	Timeout time.Duration
	Run     func(ctx context.Context, e *Env) Outcome
}

// DefaultTimeout bounds a probe that sets no Timeout.
const DefaultTimeout = 60 * time.Second

// Outcome is what a probe observed; the runner judges it.
type Outcome struct {
	// Facts were observed by the trusted side, from outside.
	Facts []record.Fact
	// Hint is what the program inside printed: shown, never judged.
	Hint string
	// NotEvidenced, when set, says why this provider or host cannot
	// support the probe.
	NotEvidenced string
	// Err says the probe itself broke (a fixture failed, a run did not
	// start): the verdict is fail.
	Err error
}

var (
	mu     sync.Mutex
	probes = map[string]Probe{}
	idRe   = regexp.MustCompile(`^[a-z_]+(\.[a-z0-9][a-z0-9-]*)+$`)
)

// Register adds a probe; it panics on a malformed or duplicate probe, so
// that a mistake fails every test of the package.
func Register(p Probe) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !idRe.MatchString(p.ID):
		panic(fmt.Sprintf("conformance: probe id %q: want class.words (lowercase, dot-separated)", p.ID))
	case !slices.Contains(record.Classes(), p.Class):
		panic(fmt.Sprintf("conformance: probe %s: unknown class %q", p.ID, p.Class))
	case p.Clause == "" || p.Title == "" || p.Run == nil:
		panic(fmt.Sprintf("conformance: probe %s: clause, title and run are required", p.ID))
	}
	if _, dup := probes[p.ID]; dup {
		panic("conformance: duplicate probe " + p.ID)
	}
	probes[p.ID] = p
}

// All lists the registered probes in class order, then by ID.
func All() []Probe {
	mu.Lock()
	defer mu.Unlock()
	order := map[record.Class]int{}
	for i, c := range record.Classes() {
		order[c] = i
	}
	out := make([]Probe, 0, len(probes))
	for _, p := range probes {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return order[out[i].Class] < order[out[j].Class]
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Judge turns what a probe observed into its verdict and one-line
// reason. The rule is the runner's, never a probe's: a broken probe
// fails; a probe the provider cannot support is not evidenced; any fact
// that contradicts the claim fails; a pass needs at least one observed
// fact and, outside the allowed class, a positive control observed to
// work.
func Judge(p Probe, o Outcome) (record.Verdict, string) {
	if o.Err != nil {
		return record.Fail, "the probe broke: " + o.Err.Error()
	}
	if o.NotEvidenced != "" {
		return record.NotEvidenced, o.NotEvidenced
	}
	var facts, controls int
	for _, f := range o.Facts {
		if !f.OK {
			if f.Control {
				return record.Fail, fmt.Sprintf("positive control %s: got %s, want %s", f.Name, f.Got, f.Want)
			}
			return record.Fail, fmt.Sprintf("%s: got %s, want %s", f.Name, f.Got, f.Want)
		}
		if f.Control {
			controls++
		} else {
			facts++
		}
	}
	switch {
	case facts == 0:
		return record.Fail, "the probe observed nothing from outside"
	case controls == 0 && p.Class != record.Allowed:
		return record.Fail, "no positive control: nothing shows the boundary is what denied the attempt"
	}
	return record.Pass, ""
}
