package model

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

// pendingAuthority holds every model call for an approval, as the privileged
// side does when policy requires one and none is given.
type pendingAuthority struct {
	*fakeAuthority
	mu   sync.Mutex
	asks []crossing.Ask
}

var pendingRef = &crossing.ApprovalRef{ID: "apr_0123456789abcdef01234567", State: "pending", Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}

func (l *pendingAuthority) Reserve(ctx context.Context, _ crossing.Identity, _ string, _ crossing.Amount, _ int64) (crossing.Reservation, crossing.BudgetState, error) {
	a, _ := crossing.AskFrom(ctx)
	l.mu.Lock()
	l.asks = append(l.asks, a)
	l.mu.Unlock()
	return crossing.Reservation{Approval: pendingRef}, crossing.BudgetState{}, fmt.Errorf("%w: waits", crossing.ErrApprovalPending)
}

// A model call held for approval: 409 in the provider's error shape with
// the approval's id and expiry, nothing sent upstream, a deny receipt
// naming the approval; the question carries the exact body's digest.
func TestApprovalPendingAnswer(t *testing.T) {
	up := testkit.NewModelUpstream(t, anthropicKey, "x")
	led := &pendingAuthority{fakeAuthority: newFakeAuthority()}
	s := newSetup(t, up.URL(), func(o *Options) { o.Authority = led })
	for _, tc := range []struct{ path, body, typePath string }{
		{"/v1/messages", `{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "anthropic"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "openai"},
	} {
		resp, body := s.post(t, tc.path, tc.body)
		var m struct {
			Type  string `json:"type"`
			Error struct {
				Type       string `json:"type"`
				Code       string `json:"code"`
				Message    string `json:"message"`
				ApprovalID string `json:"approval_id"`
				Expires    string `json:"expires"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &m); err != nil || resp.StatusCode != http.StatusConflict || m.Error.Type != "approval_pending" ||
			m.Error.ApprovalID != pendingRef.ID || m.Error.Expires != "2030-01-02T03:04:05Z" || resp.Header.Get("X-Cordon-Approval") != pendingRef.ID ||
			!strings.Contains(m.Error.Message, pendingRef.ID) {
			t.Fatalf("%s: %d %s (%v)", tc.path, resp.StatusCode, body, err)
		}
		if tc.typePath == "anthropic" && m.Type != "error" || tc.typePath == "openai" && m.Error.Code != "approval_pending" {
			t.Fatalf("%s: not the provider's error shape: %s", tc.path, body)
		}
		led.mu.Lock()
		a := led.asks[len(led.asks)-1]
		led.mu.Unlock()
		if a.RequestDigest != digest([]byte(tc.body)) || a.RequestBytes != int64(len(tc.body)) || a.Operation == "" {
			t.Fatalf("%s: the policy question %+v does not name the exact request", tc.path, a)
		}
		rc := led.lastReceipt(t)
		if rc.Decision != crossing.Deny || !strings.Contains(rc.Reason, pendingRef.ID) || rc.Approval != "" {
			t.Fatalf("%s: receipt %+v", tc.path, rc)
		}
	}
	if n := len(up.Seen()); n != 0 {
		t.Fatalf("the upstream was called %d times", n)
	}
}
