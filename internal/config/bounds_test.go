package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestCheckBoundedOnHostileShapes checks that a configuration of the size
// a daemon client can send (its frame holds about 190 KB of YAML, which
// root parses) costs the checker a bounded amount of memory whatever its
// shape: keys repeated many times (yaml.v3 builds one error string per
// equal pair), one huge mapping (it compares every pair of keys), deep
// nesting (each level repeats the path above it). Each is refused with
// one problem at its place. Control: the same shapes below the bounds are
// checked as usual (the duplicate keys are listed, the deep value's type
// is refused), so it is the bound that stops the hostile ones.
func TestCheckBoundedOnHostileShapes(t *testing.T) {
	const size = 190_000
	repeated := func(distinct int) string {
		var b strings.Builder
		b.WriteString("version: cordon/v1\n")
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "k%d: 1\n", i%distinct)
		}
		return b.String()
	}
	deep := func(levels, keyLen int) string {
		k := strings.Repeat("x", keyLen)
		return "version: " + strings.Repeat("{"+k+": ", levels) + "1" + strings.Repeat("}", levels) + "\n"
	}
	for _, c := range []struct {
		name, in, want string
	}{
		{"few keys repeated", repeated(26), `repeated too often`},
		{"one key repeated", repeated(1), `key "k0" repeated too often`},
		{"a huge mapping", repeated(1 << 30), "a mapping of"},
		{"deep nesting", deep(size/19, 15), "nested more than 64 levels deep"},
		{"deep sequences", "version: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n", "nested more than 64 levels deep"},
	} {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		probs := Check([]byte(c.in), "x.yaml")
		runtime.ReadMemStats(&m1)
		if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 256<<20 {
			t.Errorf("%s: Check of %d bytes allocated %d MB, want a bounded amount", c.name, len(c.in), alloc>>20)
		}
		if len(probs) != 1 || probs[0].Line == 0 || !strings.Contains(probs[0].Msg, c.want) {
			t.Errorf("%s: Check = %d problems (%v), want one containing %q at a line", c.name, len(probs), first(probs), c.want)
		}
	}
	// Many refused values in one list and many semantic problems in
	// another: each semantic problem used to be compared with every
	// refusal (18 s of CPU for 190 KB). The check lists them (capped) with
	// a bounded number of path comparisons.
	var b strings.Builder
	b.WriteString("version: cordon/v1\nworkload: w\ntenant: t\npurpose: p\nmodels: [")
	for b.Len() < size/2 {
		b.WriteString("1,")
	}
	b.WriteString("1]\negress:\n  allow:\n")
	for b.Len() < size {
		b.WriteString("  - {host: 1.2.3.4}\n")
	}
	before := refusalLookups.Load()
	probs := Check([]byte(b.String()), "x.yaml")
	checks := refusalLookups.Load() - before
	if len(probs) != maxErrors+1 || !containsMsg(probs, "models: cannot use") {
		t.Errorf("refused list and semantic problems: %d problems (%v), want %d", len(probs), first(probs), maxErrors+1)
	}
	if checks > 1_000_000 {
		t.Errorf("refused list and semantic problems: %d refusal comparisons, want a bounded number", checks)
	}
	// Controls: within the bounds, the usual problems.
	if probs := Check([]byte("version: cordon/v1\na: 1\na: 1\n"), "x.yaml"); !containsMsg(probs, `duplicate key "a"`) {
		t.Errorf("control: duplicate keys = %v, want the duplicate listed", probs)
	}
	if probs := Check([]byte(deep(60, 1)), "x.yaml"); !containsMsg(probs, "version: cannot use !!map") {
		t.Errorf("control: 60 levels = %v, want the type problem", probs)
	}
}

func first(ps []*Error) string {
	if len(ps) == 0 {
		return "none"
	}
	return ps[0].Error()
}

func containsMsg(ps []*Error, s string) bool {
	for _, p := range ps {
		if strings.Contains(p.Error(), s) {
			return true
		}
	}
	return false
}
