package authority

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/policy"
)

var testPolicy = &Policy{QuotaBytes: 1 << 20, QuotaEntries: 4, MaxValueBytes: 1 << 10}

// FuzzStateAsk feeds the privileged side's check arbitrary state
// requests, as a compromised gateway could send them: what it accepts
// asks policy about the key itself (a valid one) or about the whole
// scope, with the action the operation needs.
func FuzzStateAsk(f *testing.F) {
	f.Add([]byte(`{"op":"get","key":"notes/a"}`))
	f.Add([]byte(`{"op":"put","key":"notes/a","value":"aGk=","if_match":3}`))
	f.Add([]byte(`{"op":"delete","key":"../b","if_absent":true}`))
	f.Add([]byte(`{"op":"list","prefix":"notes/","after":"notes/a","limit":200}`))
	f.Add([]byte(`{"op":"reset","key":"*"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r state.Request
		if json.Unmarshal(b, &r) != nil {
			return
		}
		action, target, err := testPolicy.Ask(r)
		if err != nil {
			if !errors.Is(err, state.ErrInvalid) {
				t.Fatalf("Ask(%s) = %v, want ErrInvalid", b, err)
			}
			return
		}
		switch r.Op {
		case state.OpGet, state.OpPut, state.OpDelete:
			if target != r.Key || state.ValidKey(r.Key) != nil {
				t.Fatalf("%s: target %q", b, target)
			}
			if (r.Op == state.OpGet) != (action == policy.ActionStateRead) {
				t.Fatalf("%s: action %s", b, action)
			}
		case state.OpList, state.OpExport, state.OpReset:
			if target != state.ScopeTarget || r.Key != "" || (r.Op == state.OpReset) != (action == policy.ActionStateWrite) {
				t.Fatalf("%s: %s on %q", b, action, target)
			}
		default:
			t.Fatalf("%s: unknown op accepted", b)
		}
		if r.Op != state.OpPut && len(r.Value) > 0 {
			t.Fatalf("%s: a value on %s", b, r.Op)
		}
	})
}
