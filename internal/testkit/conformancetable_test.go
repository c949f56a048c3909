package testkit_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"

	// The probes register themselves, as in the cordon binary.
	_ "github.com/cordon-project/cordon/internal/conformance/probes"
)

// conformanceHeader heads docs/testing.md's table of the conformance
// probes (`cordon conformance run`) by class.
const conformanceHeader = "| Class | Conformance probes |"

// noProbeYet marks a class no registered probe covers yet; it is refused
// once everyClassHasAProbe is true, and whenever the class has a
// registered probe (the table must then name it).
const noProbeYet = "(none yet)"

// everyClassHasAProbe: the contract needs a probe of every class, and
// every class has one: a class without a registered probe fails (the
// control shows the lenient mode the probe branches landed under).
const everyClassHasAProbe = true

var probeID = regexp.MustCompile("^`([a-z_]+(?:\\.[a-z0-9][a-z0-9-]*)+)`$")

// checkConformanceTable checks the table against the registered probes:
// every class has exactly one row; every ID listed is registered, in that
// class; every registered probe is listed; a class is marked noProbeYet
// only when it has no registered probe (and never when strict).
func checkConformanceTable(doc string, probes []conformance.Probe, strict bool) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, conformanceHeader)
	if start < 0 || start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "| ---") {
		return []string{"no conformance probe table (header " + conformanceHeader + ")"}
	}
	registered := map[string]conformance.Probe{}
	perClass := map[record.Class]int{}
	for _, p := range probes {
		registered[p.ID] = p
		perClass[p.Class]++
	}
	rows := map[record.Class]bool{}
	listed := map[string]bool{}
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		line := i + 1
		cells := strings.Split(strings.Trim(lines[i], "|"), "|")
		if len(cells) != 2 {
			bad("line %d: %d cells, want 2", line, len(cells))
			continue
		}
		class := record.Class(strings.TrimSpace(cells[0]))
		ids := strings.TrimSpace(cells[1])
		if !slices.Contains(record.Classes(), class) {
			bad("line %d: class %q is not one of %v", line, class, record.Classes())
			continue
		}
		if rows[class] {
			bad("line %d: class %s has a second row", line, class)
		}
		rows[class] = true
		if ids == noProbeYet {
			switch {
			case strict:
				bad("line %d: class %s has no conformance probe", line, class)
			case perClass[class] > 0:
				bad("line %d: class %s says %s, but %d of its probes are registered: list them", line, class, noProbeYet, perClass[class])
			}
			continue
		}
		for _, cell := range strings.Split(ids, ",") {
			m := probeID.FindStringSubmatch(strings.TrimSpace(cell))
			if m == nil {
				bad("line %d: %q is not a `probe.id`", line, strings.TrimSpace(cell))
				continue
			}
			p, ok := registered[m[1]]
			switch {
			case !ok:
				bad("line %d: probe %s is not registered (cordon conformance list)", line, m[1])
			case p.Class != class:
				bad("line %d: probe %s is in class %s, not %s", line, m[1], p.Class, class)
			}
			listed[m[1]] = true
		}
	}
	for _, c := range record.Classes() {
		switch {
		case !rows[c]:
			bad("class %s has no row", c)
		case perClass[c] == 0 && strict:
			bad("class %s has no registered conformance probe", c)
		}
	}
	for _, p := range probes {
		if !listed[p.ID] {
			bad("registered probe %s (%s) is not listed", p.ID, p.Class)
		}
	}
	return errs
}
