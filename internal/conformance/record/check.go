package record

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/cordon-project/cordon/internal/attest"
)

// Check re-judges a decoded record from its own probes, as a verifier
// must: a signature says who signed, not that the claim follows from the
// evidence. Each probe's verdict must be one its facts allow (a pass
// needs an observed fact, no contradicting fact, and outside the allowed
// class an observed positive control), and the claim and maturity labels
// must be what Judge makes of the probes. It also refuses a predicate
// that is not the record as cordon encodes it (a duplicate key, a key in
// another case, an escape cordon never writes), so that every JSON
// parser reads the same record the signature covers.
func (r *Record) Check(predicate []byte) error {
	bad := func(field, format string, args ...any) error {
		return &attest.FieldError{Field: "statement.predicate" + field, Problem: fmt.Sprintf(format, args...), Err: attest.ErrMalformed}
	}
	if predicate != nil {
		c, err := json.Marshal(r)
		if err != nil || string(c) != string(predicate) {
			return bad("", "not the record as cordon encodes it (a duplicate or differently spelled key, or another encoding): parsers could read different records")
		}
	}
	for i, p := range r.Probes {
		if p.Verdict != Pass {
			continue
		}
		var facts, controls int
		for j, f := range p.Facts {
			if !f.OK {
				return bad(fmt.Sprintf(".probes[%d].verdict", i), "%s is pass, but its fact %d (%s) is not ok", p.ID, j, f.Name)
			}
			if f.Control {
				controls++
			} else {
				facts++
			}
		}
		if facts == 0 {
			return bad(fmt.Sprintf(".probes[%d].verdict", i), "%s is pass, but it observed nothing from outside", p.ID)
		}
		if controls == 0 && p.Class != Allowed {
			return bad(fmt.Sprintf(".probes[%d].verdict", i), "%s is pass, but no positive control was observed", p.ID)
		}
	}
	want := r.judge()
	if !reflect.DeepEqual(want, r.Claim) {
		return bad(".claim", "the probes admit %s (ceiling %s), the record claims %s (ceiling %s)", want.Admitted, want.Ceiling, r.Claim.Admitted, r.Claim.Ceiling)
	}
	m := judgeMaturity(r)
	if m.Is != r.Maturity.Is {
		return bad(".maturity.is", "the probes support maturity %q, the record says %q", m.Is, r.Maturity.Is)
	}
	for i, l := range r.Maturity.Labels {
		for _, w := range m.Labels {
			if l.Label == w.Label && l.Holds != w.Holds {
				return bad(fmt.Sprintf(".maturity.labels[%d].holds", i), "%s: the probes say %v, the record says %v", l.Label, w.Holds, l.Holds)
			}
		}
	}
	return nil
}
