package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Every typed refusal crosses the channel as its kind and comes back as
// the same error; an error that is none of them, and a kind the client
// does not know, are crossing.ErrUnavailable (fail closed).
func TestErrorTableRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k.kind] || k.kind == KindUnavailable {
			t.Fatalf("kind %q is listed twice or shadows unavailable", k.kind)
		}
		seen[k.kind] = true
		e := ErrorOf(fmt.Errorf("wrapped: %w", k.err))
		if e.Kind != k.kind {
			t.Errorf("ErrorOf(%v).Kind = %q, want %q", k.err, e.Kind, k.kind)
		}
		if back := e.Err(); !errors.Is(back, k.err) {
			t.Errorf("Error{%q}.Err() = %v, want %v", k.kind, back, k.err)
		}
	}
	if e := ErrorOf(errors.New("disk on fire")); e.Kind != KindUnavailable || !errors.Is(e.Err(), crossing.ErrUnavailable) {
		t.Errorf("an untyped error = %+v, %v; want unavailable", e, e.Err())
	}
	if err := (&Error{Kind: "allow", Message: "x"}).Err(); !errors.Is(err, crossing.ErrUnavailable) {
		t.Errorf("an unknown kind = %v, want ErrUnavailable", err)
	}
	if ErrorOf(nil) != nil || (*Error)(nil).Err() != nil {
		t.Error("nil does not round-trip as nil")
	}
}

// The client names its channel's broker on every request, decodes the
// answer's body also when it is a refusal, and fails a call whose answer
// never comes once the channel closes.
func TestClientEnvelope(t *testing.T) {
	a, b := net.Pipe()
	c := NewClient(a, "egress")
	go func() {
		buf := make([]byte, MaxMessage)
		n, err := b.Read(buf)
		if err != nil {
			return
		}
		var req Request
		_ = json.Unmarshal(buf[:n], &req)
		resp, _ := json.Marshal(Response{ID: req.ID, Error: &Error{Kind: "policy", Message: req.Broker + "/" + req.Op},
			Body: json.RawMessage(`{"n":7}`)})
		b.Write(resp)
		b.Close()
	}()
	var out struct{ N int }
	err := c.Call(context.Background(), "reserve", struct{}{}, &out)
	if !errors.Is(err, crossing.ErrPolicyDenied) || err.Error() != "denied by policy: egress/reserve" || out.N != 7 {
		t.Fatalf("Call = %v, body %+v; want the policy refusal naming egress/reserve, with its body", err, out)
	}
	if err := c.Call(context.Background(), "reserve", nil, nil); !errors.Is(err, crossing.ErrUnavailable) {
		t.Fatalf("Call on a closed channel = %v, want ErrUnavailable", err)
	}
}

// The hand-built encodings equal encoding/json's.
func TestAppendEqualsMarshal(t *testing.T) {
	body, _ := json.Marshal(map[string]any{"want": map[string]int{"requests": 1}, "note": "<a&b>\"\u2028"})
	for _, r := range []Request{{ID: 1, Broker: "model", Op: "reserve", Body: body}, {Broker: "tool", Op: OpReady}, {ID: 1<<64 - 1, Broker: "x\"<", Op: ""}} {
		want, _ := json.Marshal(r)
		if got := AppendRequest(nil, r); string(got) != string(want) {
			t.Errorf("AppendRequest = %s, want %s", got, want)
		}
	}
	for _, r := range []Response{{ID: 2, Body: body}, {ID: 3, Error: &Error{Kind: "policy", Message: "no <&> \x01"}}, {ID: 4, Error: &Error{Kind: "budget"}, Body: body}} {
		want, _ := json.Marshal(r)
		if got := AppendResponse(nil, r); string(got) != string(want) {
			t.Errorf("AppendResponse = %s, want %s", got, want)
		}
	}
}
