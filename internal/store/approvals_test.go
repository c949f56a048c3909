package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a settable clock for approval expiry.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openApprovals(t *testing.T) (*Store, *fakeClock) {
	t.Helper()
	s := openTest(t, t.TempDir(), testPool)
	c := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	s.now = c.now
	return s, c
}

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	ttl     = 10 * time.Minute
)

func request(workload, digest string) Approval {
	return Approval{Workload: workload, SandboxID: "sb-" + workload, Action: "tool.call", Target: "fs/write_file",
		Digest: digest, Arguments: json.RawMessage(`{"path":"/w/a.txt","content":"<b>hi</b>"}`)}
}

func mustRequest(t *testing.T, s *Store, a Approval) Approval {
	t.Helper()
	got, err := s.RequestApproval(context.Background(), a, ttl)
	if err != nil {
		t.Fatalf("RequestApproval(%s, %s) = %v", a.Workload, a.Digest, err)
	}
	return got
}

func mustDecide(t *testing.T, s *Store, id string, approve bool) Approval {
	t.Helper()
	got, err := s.DecideApproval(context.Background(), id, approve, "test")
	if err != nil {
		t.Fatalf("DecideApproval(%s, %v) = %v", id, approve, err)
	}
	return got
}

func wantState(t *testing.T, s *Store, id, state string) {
	t.Helper()
	a, err := s.Approval(context.Background(), id)
	if err != nil {
		t.Fatalf("Approval(%s) = %v", id, err)
	}
	if a.State != state {
		t.Errorf("Approval(%s).State = %q, want %q", id, a.State, state)
	}
}

func TestRequestApprovalFields(t *testing.T) {
	s, c := openApprovals(t)
	in := request("wl", digestA)
	in.ID, in.State = "apr_000000000000000000000000", ApprovalApproved // ignored
	got := mustRequest(t, s, in)
	if !ValidApprovalID(got.ID) || got.ID == in.ID {
		t.Errorf("RequestApproval: id %q, want a fresh apr_<24 hex>", got.ID)
	}
	want := request("wl", digestA)
	want.ID, want.State, want.Created, want.Expires = got.ID, ApprovalPending, c.now(), c.now().Add(ttl)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RequestApproval mismatch (-want +got):\n%s", diff)
	}
	read, err := s.Approval(context.Background(), got.ID)
	if err != nil {
		t.Fatalf("Approval(%s) = %v", got.ID, err)
	}
	if diff := cmp.Diff(got, read); diff != "" {
		t.Errorf("Approval(%s) differs from what RequestApproval returned (-want +got):\n%s", got.ID, diff)
	}
}

func TestRequestApprovalInvalid(t *testing.T) {
	s, _ := openApprovals(t)
	for _, tc := range []struct {
		name string
		edit func(*Approval)
		ttl  time.Duration
	}{
		{"no workload", func(a *Approval) { a.Workload = "" }, ttl},
		{"no action", func(a *Approval) { a.Action = "" }, ttl},
		{"bad digest", func(a *Approval) { a.Digest = "sha256:xyz" }, ttl},
		{"uppercase digest", func(a *Approval) { a.Digest = strings.ToUpper(digestA) }, ttl},
		{"bad json", func(a *Approval) { a.Arguments = json.RawMessage(`{"a":`) }, ttl},
		{"huge arguments", func(a *Approval) {
			a.Arguments = json.RawMessage(`"` + strings.Repeat("x", maxApprovalArguments) + `"`)
		}, ttl},
		{"zero ttl", func(*Approval) {}, 0},
	} {
		a := request("wl", digestA)
		tc.edit(&a)
		if got, err := s.RequestApproval(context.Background(), a, tc.ttl); err == nil {
			t.Errorf("%s: RequestApproval = %+v, want an error", tc.name, got)
		}
	}
}

func TestRequestApprovalIdempotent(t *testing.T) {
	s, c := openApprovals(t)
	first := mustRequest(t, s, request("wl", digestA))
	c.advance(time.Minute)
	again := mustRequest(t, s, request("wl", digestA))
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second RequestApproval is not the first (-want +got):\n%s", diff)
	}
	// Still the same once approved: the retry goes on to consume it.
	mustDecide(t, s, first.ID, true)
	if again = mustRequest(t, s, request("wl", digestA)); again.ID != first.ID || again.State != ApprovalApproved {
		t.Errorf("RequestApproval after approve = %s %s, want %s approved", again.ID, again.State, first.ID)
	}
	all, err := s.Approvals(context.Background(), ApprovalFilter{})
	if err != nil || len(all) != 1 {
		t.Errorf("Approvals = %d approvals, %v; want 1", len(all), err)
	}
}

func TestRequestApprovalDistinct(t *testing.T) {
	s, _ := openApprovals(t)
	a := mustRequest(t, s, request("wl", digestA))
	b := mustRequest(t, s, request("wl", digestB))
	other := mustRequest(t, s, request("other", digestA))
	if a.ID == b.ID || a.ID == other.ID || b.ID == other.ID {
		t.Errorf("ids %s %s %s: a different digest or workload must get a different approval", a.ID, b.ID, other.ID)
	}
	mustDecide(t, s, a.ID, true)
	// Approving digest A authorizes neither digest B nor another workload.
	for _, k := range []struct{ workload, digest string }{{"wl", digestB}, {"other", digestA}} {
		if _, err := s.ConsumeApproval(context.Background(), k.workload, k.digest); !errors.Is(err, ErrApprovalPending) {
			t.Errorf("ConsumeApproval(%s, %s) = %v, want ErrApprovalPending", k.workload, k.digest, err)
		}
	}
	if _, err := s.ConsumeApproval(context.Background(), "nobody", digestA); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("ConsumeApproval(nobody) = %v, want ErrApprovalNotFound", err)
	}
	wantState(t, s, a.ID, ApprovalApproved)
}

func TestConsumeApprovalSingleUse(t *testing.T) {
	s, c := openApprovals(t)
	ctx := context.Background()
	a := mustRequest(t, s, request("wl", digestA))
	if got, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalPending) || got.ID != a.ID {
		t.Fatalf("ConsumeApproval before a decision = %s, %v; want %s, ErrApprovalPending", got.ID, err, a.ID)
	}
	mustDecide(t, s, a.ID, true)
	c.advance(time.Second)
	got, err := s.ConsumeApproval(ctx, "wl", digestA)
	if err != nil {
		t.Fatalf("ConsumeApproval = %v", err)
	}
	if got.ID != a.ID || got.State != ApprovalConsumed || !got.Consumed.Equal(c.now()) || got.DecidedBy != "test" {
		t.Errorf("ConsumeApproval = %+v, want %s consumed at %v decided by test", got, a.ID, c.now())
	}
	if got, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("second ConsumeApproval = %+v, %v; want ErrApprovalNotFound", got, err)
	}
	// A consumed approval can be neither decided nor revoked again.
	for name, op := range map[string]func() (Approval, error){
		"approve": func() (Approval, error) { return s.DecideApproval(ctx, a.ID, true, "test") },
		"deny":    func() (Approval, error) { return s.DecideApproval(ctx, a.ID, false, "test") },
		"revoke":  func() (Approval, error) { return s.RevokeApproval(ctx, a.ID, "test") },
	} {
		_, err := op()
		var se *ApprovalStateError
		if !errors.Is(err, ErrApprovalDecided) || !errors.As(err, &se) || se.State != ApprovalConsumed || se.ID != a.ID {
			t.Errorf("%s after consume = %v, want *ApprovalStateError{%s, consumed}", name, err, a.ID)
		}
		if want := "approval " + a.ID + " is already consumed"; err != nil && err.Error() != want {
			t.Errorf("%s after consume: %q, want %q", name, err, want)
		}
	}
	// A retry of the same request asks again: a new approval.
	if again := mustRequest(t, s, request("wl", digestA)); again.ID == a.ID || again.State != ApprovalPending {
		t.Errorf("RequestApproval after consume = %s %s, want a new pending approval", again.ID, again.State)
	}
	wantState(t, s, a.ID, ApprovalConsumed)
}

func TestConsumeApprovalConcurrent(t *testing.T) {
	s, _ := openApprovals(t)
	a := mustRequest(t, s, request("wl", digestA))
	mustDecide(t, s, a.ID, true)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 16 {
		wg.Go(func() {
			if _, err := s.ConsumeApproval(context.Background(), "wl", digestA); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d concurrent ConsumeApproval calls succeeded, want exactly 1", won)
	}
}

func TestApprovalExpiry(t *testing.T) {
	s, c := openApprovals(t)
	ctx := context.Background()
	pending := mustRequest(t, s, request("wl", digestA))
	c.advance(time.Second)
	approved := mustRequest(t, s, request("wl", digestB))
	mustDecide(t, s, approved.ID, true)
	c.advance(ttl)

	for _, id := range []string{pending.ID, approved.ID} {
		wantState(t, s, id, ApprovalExpired)
	}
	if _, err := s.DecideApproval(ctx, pending.ID, true, "test"); !errors.Is(err, ErrApprovalExpired) || !errors.Is(err, ErrApprovalDecided) {
		t.Errorf("DecideApproval(expired) = %v, want ErrApprovalExpired", err)
	}
	if _, err := s.RevokeApproval(ctx, approved.ID, "test"); !errors.Is(err, ErrApprovalExpired) {
		t.Errorf("RevokeApproval(expired) = %v, want ErrApprovalExpired", err)
	}
	if _, err := s.ConsumeApproval(ctx, "wl", digestB); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("ConsumeApproval(expired approved) = %v, want ErrApprovalNotFound", err)
	}
	if _, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("ConsumeApproval(expired pending) = %v, want ErrApprovalNotFound", err)
	}
	for _, tc := range []struct {
		state string
		want  []string
	}{
		{ApprovalPending, nil},
		{ApprovalApproved, nil},
		{ApprovalExpired, []string{pending.ID, approved.ID}},
	} {
		got, err := s.Approvals(ctx, ApprovalFilter{State: tc.state})
		if err != nil {
			t.Fatalf("Approvals(%s) = %v", tc.state, err)
		}
		if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
			t.Errorf("Approvals(%s) ids (-want +got):\n%s", tc.state, diff)
		}
	}

	// A retry after expiry asks again, and the old approval stays expired
	// even once its row has been marked.
	fresh := mustRequest(t, s, request("wl", digestB))
	if fresh.ID == approved.ID || fresh.State != ApprovalPending || !fresh.Expires.Equal(c.now().Add(ttl)) {
		t.Errorf("RequestApproval after expiry = %+v, want a new pending approval", fresh)
	}
	mustDecide(t, s, fresh.ID, true)
	wantState(t, s, approved.ID, ApprovalExpired)
	if got, err := s.ConsumeApproval(ctx, "wl", digestB); err != nil || got.ID != fresh.ID {
		t.Errorf("ConsumeApproval = %s, %v; want %s", got.ID, err, fresh.ID)
	}
}

func TestApprovalDeny(t *testing.T) {
	s, c := openApprovals(t)
	ctx := context.Background()
	a := mustRequest(t, s, request("wl", digestA))
	c.advance(time.Second)
	got, err := s.DecideApproval(ctx, a.ID, false, "cli uid 0")
	if err != nil {
		t.Fatalf("DecideApproval(deny) = %v", err)
	}
	if got.State != ApprovalDenied || got.DecidedBy != "cli uid 0" || !got.Decided.Equal(c.now()) {
		t.Errorf("DecideApproval(deny) = %+v, want denied by cli uid 0 at %v", got, c.now())
	}
	if got, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalDenied) || got.ID != a.ID {
		t.Errorf("ConsumeApproval(denied) = %s, %v; want %s, ErrApprovalDenied", got.ID, err, a.ID)
	}
	var se *ApprovalStateError
	if _, err := s.DecideApproval(ctx, a.ID, true, "test"); !errors.As(err, &se) || se.State != ApprovalDenied {
		t.Errorf("approve after deny = %v, want *ApprovalStateError{denied}", err)
	}
	// The denial stands until it expires.
	c.advance(ttl)
	if _, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("ConsumeApproval(denial expired) = %v, want ErrApprovalNotFound", err)
	}
	wantState(t, s, a.ID, ApprovalDenied)
}

func TestApprovalRevoke(t *testing.T) {
	s, _ := openApprovals(t)
	ctx := context.Background()
	a := mustRequest(t, s, request("wl", digestA))
	mustDecide(t, s, a.ID, true)
	got, err := s.RevokeApproval(ctx, a.ID, "cli uid 0")
	if err != nil {
		t.Fatalf("RevokeApproval = %v", err)
	}
	if got.State != ApprovalRevoked || got.RevokedBy != "cli uid 0" || got.DecidedBy != "test" {
		t.Errorf("RevokeApproval = %+v, want revoked by cli uid 0, still decided by test", got)
	}
	if _, err := s.ConsumeApproval(ctx, "wl", digestA); !errors.Is(err, ErrApprovalNotFound) {
		t.Errorf("ConsumeApproval(revoked) = %v, want ErrApprovalNotFound", err)
	}
	if _, err := s.DecideApproval(ctx, a.ID, true, "test"); !errors.Is(err, ErrApprovalDecided) {
		t.Errorf("approve after revoke = %v, want ErrApprovalDecided", err)
	}
	if _, err := s.RevokeApproval(ctx, a.ID, "test"); !errors.Is(err, ErrApprovalDecided) {
		t.Errorf("second revoke = %v, want ErrApprovalDecided", err)
	}
}

func TestRevokeApprovalsOfSandbox(t *testing.T) {
	s, c := openApprovals(t)
	ctx := context.Background()
	pending := mustRequest(t, s, request("wl", digestA))
	approved := mustRequest(t, s, request("wl", digestB))
	mustDecide(t, s, approved.ID, true)
	consumedReq := request("wl", "sha256:"+strings.Repeat("c", 64))
	consumed := mustRequest(t, s, consumedReq)
	mustDecide(t, s, consumed.ID, true)
	if _, err := s.ConsumeApproval(ctx, "wl", consumedReq.Digest); err != nil {
		t.Fatalf("ConsumeApproval = %v", err)
	}
	otherSandbox := mustRequest(t, s, request("other", digestA))
	c.advance(time.Second)

	n, err := s.RevokeApprovals(ctx, "sb-wl")
	if err != nil || n != 2 {
		t.Errorf("RevokeApprovals(sb-wl) = %d, %v; want 2", n, err)
	}
	wantState(t, s, pending.ID, ApprovalRevoked)
	wantState(t, s, approved.ID, ApprovalRevoked)
	wantState(t, s, consumed.ID, ApprovalConsumed)
	wantState(t, s, otherSandbox.ID, ApprovalPending)
	if a, _ := s.Approval(ctx, approved.ID); a.RevokedBy != "sandbox stopped" {
		t.Errorf("RevokedBy = %q, want %q", a.RevokedBy, "sandbox stopped")
	}
	if n, err := s.RevokeApprovals(ctx, "sb-wl"); err != nil || n != 0 {
		t.Errorf("second RevokeApprovals = %d, %v; want 0", n, err)
	}
}

func TestApprovalForgedIDs(t *testing.T) {
	s, _ := openApprovals(t)
	ctx := context.Background()
	real := mustRequest(t, s, request("wl", digestA))
	for _, id := range []string{
		"",
		"apr_",
		"apr_000000000000000000000000", // well formed, unknown
		strings.ToUpper(real.ID),
		real.ID + "0",
		real.ID[:len(real.ID)-1],
		"apr_' OR 1=1 --aaaaaaaaaaaaa",
		"apr_%00000000000000000000000",
		"../../etc/passwd",
		strings.Repeat("a", 10000),
		"apr_\x00\xff",
	} {
		if _, err := s.Approval(ctx, id); !errors.Is(err, ErrApprovalNotFound) {
			t.Errorf("Approval(%q) = %v, want ErrApprovalNotFound", id, err)
		}
		if _, err := s.DecideApproval(ctx, id, true, "test"); !errors.Is(err, ErrApprovalNotFound) {
			t.Errorf("DecideApproval(%q) = %v, want ErrApprovalNotFound", id, err)
		}
		if _, err := s.RevokeApproval(ctx, id, "test"); !errors.Is(err, ErrApprovalNotFound) {
			t.Errorf("RevokeApproval(%q) = %v, want ErrApprovalNotFound", id, err)
		}
	}
	if _, err := s.DecideApproval(ctx, "apr_000000000000000000000000", true, "t"); err == nil || err.Error() != "approval apr_000000000000000000000000 not found" {
		t.Errorf("DecideApproval(unknown) message = %v", err)
	}
	wantState(t, s, real.ID, ApprovalPending)
}

func TestSetApprovalReceipt(t *testing.T) {
	s, _ := openApprovals(t)
	ctx := context.Background()
	a := mustRequest(t, s, request("wl", digestA))
	if err := s.SetApprovalReceipt(ctx, a.ID, 7); err == nil {
		t.Errorf("SetApprovalReceipt(pending) = nil, want an error")
	}
	mustDecide(t, s, a.ID, true)
	if _, err := s.ConsumeApproval(ctx, "wl", digestA); err != nil {
		t.Fatalf("ConsumeApproval = %v", err)
	}
	if err := s.SetApprovalReceipt(ctx, a.ID, 7); err != nil {
		t.Fatalf("SetApprovalReceipt = %v", err)
	}
	if err := s.SetApprovalReceipt(ctx, a.ID, 8); err == nil {
		t.Errorf("second SetApprovalReceipt = nil, want an error")
	}
	if got, _ := s.Approval(ctx, a.ID); got.ReceiptID != 7 {
		t.Errorf("ReceiptID = %d, want 7", got.ReceiptID)
	}
}

func TestApprovalsFilter(t *testing.T) {
	s, c := openApprovals(t)
	ctx := context.Background()
	var want []string
	for i, d := range []string{digestA, digestB, "sha256:" + strings.Repeat("c", 64)} {
		want = append(want, mustRequest(t, s, request("wl", d)).ID)
		c.advance(time.Duration(i+1) * time.Second)
	}
	other := mustRequest(t, s, request("other", digestA))
	mustDecide(t, s, want[1], false)
	for _, tc := range []struct {
		f    ApprovalFilter
		want []string
	}{
		{ApprovalFilter{}, append(want[:3:3], other.ID)},
		{ApprovalFilter{Workload: "wl"}, want},
		{ApprovalFilter{Workload: "wl", State: ApprovalPending}, []string{want[0], want[2]}},
		{ApprovalFilter{State: ApprovalDenied}, []string{want[1]}},
		{ApprovalFilter{Limit: 2}, []string{want[2], other.ID}},
	} {
		got, err := s.Approvals(ctx, tc.f)
		if err != nil {
			t.Fatalf("Approvals(%+v) = %v", tc.f, err)
		}
		if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
			t.Errorf("Approvals(%+v) ids (-want +got):\n%s", tc.f, diff)
		}
	}
	if _, err := s.Approvals(ctx, ApprovalFilter{State: "bogus"}); err == nil {
		t.Errorf("Approvals(state bogus) = nil error, want one")
	}
}

func ids(as []Approval) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.ID)
	}
	return out
}
