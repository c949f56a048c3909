package record

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
)

// FuzzFromStatement: any predicate (a record handed in by anyone) gives a
// record or an error, never a panic; a record accepted re-encodes to a
// statement that is accepted again.
func FuzzFromStatement(f *testing.F) {
	b, _ := json.Marshal(Sample())
	f.Add(b)
	f.Add([]byte(`{"schema":"cordon.conformance/v1"}`))
	f.Fuzz(func(t *testing.T, pred []byte) {
		r := &Record{}
		if json.Unmarshal(pred, r) != nil {
			r = Sample()
		}
		st, err := r.Statement()
		if err != nil {
			return
		}
		st.Predicate = pred
		got, err := FromStatement(st)
		if err != nil {
			return
		}
		st2, err := got.Statement()
		if err != nil {
			t.Fatalf("accepted record has no statement: %v", err)
		}
		if _, err := FromStatement(st2); err != nil {
			t.Fatalf("re-encoded record refused: %v", err)
		}
	})
}

// FuzzDiffEnvelopes: diffing a logged record with any given bytes never
// panics, and any difference is reported.
func FuzzDiffEnvelopes(f *testing.F) {
	env, _ := json.Marshal(attest.Envelope{PayloadType: attest.PayloadType, Payload: "eyJhIjpbMSwyXX0=", Signatures: []attest.Signature{{KeyID: "k", Sig: "AAAA"}}})
	f.Add(env, []byte(strings.Replace(string(env), "eyJh", "eyJi", 1)))
	f.Add(env, []byte(`{"payload":"!!"}`))
	f.Add([]byte(`{"a":[1,{"b":"c"}]}`), []byte(`{"a":[1,{"b":"d"}]`))
	f.Fuzz(func(t *testing.T, logged, given []byte) {
		cs := DiffEnvelopes(logged, given)
		if string(logged) != string(given) && len(cs) == 0 {
			t.Fatalf("no change reported between %q and %q", logged, given)
		}
		_ = PathAt(logged, len(given)%(len(logged)+1), "$")
	})
}
