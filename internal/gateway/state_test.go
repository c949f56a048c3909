package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

const statePolicyText = `
@id("state-read")
permit(principal, action == Action::"state.read", resource);
@id("state-write")
permit(principal, action == Action::"state.write", resource)
when { resource.name like "notes/*" || resource == State::"*" };
@id("no-private")
forbid(principal, action == Action::"state.read", resource == State::"private/plan");
@id("no-reset-when-locked")
forbid(principal, action == Action::"state.write", resource == State::"*")
when { context.purpose == "locked" };
`

var testState = &StatePolicy{QuotaBytes: 1 << 20, QuotaEntries: 4, MaxValueBytes: 1 << 10}

// stateClient serves an authority for id (and sp) on st and returns the
// gateway's client of it.
func stateClient(t *testing.T, st *store.Store, id crossing.Identity, sp *StatePolicy) (*Authority, *testClient) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "state.cedar")
	if err := os.WriteFile(f, []byte(statePolicyText), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Authority{Store: st, ID: id, Policy: set, State: sp}
	return srv, connect(t, srv)
}

var (
	idA = crossing.Identity{Workload: "w", Tenant: "acme", Purpose: "coding", SandboxID: "sb-a"}
	idB = crossing.Identity{Workload: "w", Tenant: "acme", Purpose: "other", SandboxID: "sb-b"}
)

func TestStateAuthorityPutGet(t *testing.T) {
	st := testStore(t)
	srv, c := stateClient(t, st, idA, testState)
	ctx := context.Background()
	resp, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("hello")})
	if err != nil || !resp.Created || resp.Entry == nil || resp.Entry.Version != 1 || resp.Receipt == 0 ||
		resp.Entry.Provenance != (state.Provenance{SandboxID: "sb-a", Written: resp.Entry.Updated, Receipt: resp.Receipt, Trust: state.TrustAgent}) {
		t.Fatalf("put = %+v %v", resp, err)
	}
	got, err := c.State(ctx, state.Request{Op: state.OpGet, Key: "notes/a"})
	if err != nil || string(got.Entry.Value) != "hello" || got.Entry.Version != 1 || got.Receipt <= resp.Receipt {
		t.Fatalf("get = %+v %v", got, err)
	}
	// Receipts: this side's identity and policy decision, the digests.
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	if len(rcs) != 2 {
		t.Fatalf("receipts = %+v", rcs)
	}
	put, get := rcs[0], rcs[1]
	if put.Identity != idA || put.Action != "put" || put.Target != "notes/a" || put.Decision != crossing.Allow || put.BytesIn != 5 ||
		put.Policy == nil || put.Policy.Digest != srv.Policy.Digest() || put.Policy.Determining[0] != "state-write" ||
		!strings.HasPrefix(put.RequestDigest, "sha256:") || !strings.Contains(put.Reason, "version 1") {
		t.Fatalf("put receipt = %+v", put)
	}
	if get.ResultDigest != put.RequestDigest || get.BytesOut != 5 || get.Policy.Determining[0] != "state-read" {
		t.Fatalf("get receipt = %+v", get)
	}
}

// Another scope's entry and an absent one get the same refusal, with the
// same details; the denial receipts say the same too.
func TestStateAuthorityForeignIsAbsent(t *testing.T) {
	st := testStore(t)
	_, a := stateClient(t, st, idA, testState)
	_, b := stateClient(t, st, idB, testState)
	ctx := context.Background()
	if _, err := a.State(ctx, state.Request{Op: state.OpPut, Key: "notes/secret", Value: []byte("A's")}); err != nil {
		t.Fatal(err)
	}
	foreign, ferr := b.State(ctx, state.Request{Op: state.OpGet, Key: "notes/secret"})
	absent, aerr := b.State(ctx, state.Request{Op: state.OpGet, Key: "notes/never"})
	if !errors.Is(ferr, state.ErrNotFound) || ferr.Error() != aerr.Error() {
		t.Fatalf("foreign = %v, absent = %v", ferr, aerr)
	}
	fj, _ := json.Marshal(foreign)
	aj, _ := json.Marshal(absent)
	if string(fj) != string(aj) {
		t.Fatalf("foreign answer %s, absent answer %s", fj, aj)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{SandboxID: "sb-b"})
	if len(rcs) != 2 || rcs[0].Reason != rcs[1].Reason || rcs[0].Decision != crossing.Deny {
		t.Fatalf("denial receipts = %+v", rcs)
	}
	// B's list, export and reset see and touch nothing of A's.
	l, err := b.State(ctx, state.Request{Op: state.OpList})
	if err != nil || len(l.Entries) != 0 || l.Usage.Entries != 0 {
		t.Fatalf("B's list = %+v %v", l, err)
	}
	if r, err := b.State(ctx, state.Request{Op: state.OpReset}); err != nil || r.Deleted != 0 {
		t.Fatalf("B's reset = %+v %v", r, err)
	}
	if got, err := a.State(ctx, state.Request{Op: state.OpGet, Key: "notes/secret"}); err != nil || string(got.Entry.Value) != "A's" {
		t.Fatalf("A's entry after B's reset = %+v %v", got, err)
	}
}

func TestStateAuthorityPolicy(t *testing.T) {
	st := testStore(t)
	_, c := stateClient(t, st, idA, testState)
	ctx := context.Background()
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "todo/x", Value: []byte("x")}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("write outside notes/ = %v, want denied", err)
	}
	if _, err := c.State(ctx, state.Request{Op: state.OpGet, Key: "private/plan"}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("forbidden read = %v", err)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	if len(rcs) != 2 || rcs[1].Decision != crossing.Deny || rcs[1].Policy == nil || rcs[1].Policy.Determining[0] != "no-private" {
		t.Fatalf("denial receipts = %+v", rcs)
	}
	// Each names what denied it: the forbid, or no permit.
	if rcs[0].Rule != "cedar: no permit matched" || rcs[1].Rule != "cedar: forbidden by no-private" {
		t.Errorf("denial rules = %q, %q; want no permit, then the forbid", rcs[0].Rule, rcs[1].Rule)
	}
	// Reset is a write on the whole scope: policy can forbid it.
	locked := crossing.Identity{Workload: "w", Tenant: "acme", Purpose: "locked", SandboxID: "sb-l"}
	_, lc := stateClient(t, st, locked, testState)
	if _, err := lc.State(ctx, state.Request{Op: state.OpPut, Key: "notes/keep", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.State(ctx, state.Request{Op: state.OpReset}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("forbidden reset = %v", err)
	}
	// A gateway cannot write a state receipt of its own.
	before, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	for _, d := range []string{crossing.Allow, crossing.Deny} {
		if err := c.Record(ctx, crossing.Receipt{Broker: state.Name, Action: "put", Target: "notes/forged", Decision: d}); err == nil {
			t.Fatalf("a forged %s state receipt was recorded", d)
		}
	}
	if after, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name}); len(after) != len(before) {
		t.Fatalf("receipts %d -> %d after forgery attempts", len(before), len(after))
	}
	// No state policy: every operation is refused.
	_, none := stateClient(t, st, idB, nil)
	if _, err := none.State(ctx, state.Request{Op: state.OpList}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("no managed state = %v", err)
	}
}

func TestStateAuthorityRefusals(t *testing.T) {
	st := testStore(t)
	_, c := stateClient(t, st, idA, testState)
	ctx := context.Background()
	put := func(key string, v string, r state.Request) (state.Response, error) {
		r.Op, r.Key, r.Value = state.OpPut, key, []byte(v)
		return c.State(ctx, r)
	}
	if _, err := put("notes/a", "1", state.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := put("notes/a", "2", state.Request{IfMatch: 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := put("notes/a", "3", state.Request{IfMatch: 1})
	if !errors.Is(err, state.ErrPrecondition) || resp.Current != 2 {
		t.Fatalf("stale = %+v %v", resp, err)
	}
	resp, err = put("notes/new", "3", state.Request{IfExists: true})
	if !errors.Is(err, state.ErrPrecondition) || resp.Current != 0 {
		t.Fatalf("If-Match * on absent = %+v %v", resp, err)
	}
	resp, err = put("notes/a", strings.Repeat("x", 1025), state.Request{})
	if !errors.Is(err, state.ErrTooLarge) || resp.Limit != 1024 {
		t.Fatalf("too large = %+v %v", resp, err)
	}
	for _, k := range []string{"notes/b", "notes/c", "notes/d"} {
		if _, err := put(k, "x", state.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err = put("notes/e", "x", state.Request{})
	if !errors.Is(err, state.ErrQuota) || resp.Quota != "entries" || resp.Limit != 4 || resp.Used != 4 || resp.Needed != 5 {
		t.Fatalf("quota = %+v %v", resp, err)
	}
	if _, err := c.State(ctx, state.Request{Op: state.OpDelete, Key: "notes/zz"}); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("delete absent = %v", err)
	}
	// What a compromised gateway could send: the privileged side checks
	// it again.
	for _, r := range []state.Request{
		{Op: state.OpGet, Key: "../w2/notes/a"},
		{Op: state.OpGet, Key: ""},
		{Op: state.OpGet, Key: "*"},
		{Op: state.OpGet, Key: "a", IfMatch: 1},
		{Op: state.OpGet, Key: "a", Value: []byte("x")},
		{Op: state.OpPut, Key: "notes/a", IfMatch: 1, IfAbsent: true},
		{Op: state.OpPut, Key: "notes/a", IfMatch: -1},
		{Op: state.OpDelete, Key: "notes/a", IfAbsent: true},
		{Op: state.OpList, Limit: state.MaxListLimit + 1},
		{Op: state.OpList, Prefix: "a\x00"},
		{Op: state.OpList, Key: "notes/a"},
		{Op: state.OpExport, Prefix: "notes/"},
		{Op: state.OpReset, After: "a"},
		{Op: "drop_table"},
	} {
		if _, err := c.State(ctx, r); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("State(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	// Only put carries a value, and only within its bound: the message
	// itself is bounded too.
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: make([]byte, state.MaxValueBytesLimit+1)}); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("over the hard bound = %v", err)
	}
}

func TestStateAuthorityExportAndReset(t *testing.T) {
	st := testStore(t)
	sp := &StatePolicy{QuotaBytes: 1 << 20, QuotaEntries: 1000, MaxValueBytes: state.MaxValueBytesLimit}
	_, c := stateClient(t, st, idA, sp)
	ctx := context.Background()
	// Three values of the largest size: one per export page, and each
	// page still fits in one authority message.
	big := strings.Repeat("v", state.MaxValueBytesLimit)
	for _, k := range []string{"notes/1", "notes/2", "notes/3"} {
		if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: k, Value: []byte(big)}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	var keys []string
	after := ""
	for page := 0; ; page++ {
		resp, err := c.State(ctx, state.Request{Op: state.OpExport, After: after})
		if err != nil || resp.Scope == nil || resp.Scope.Purpose != "coding" || resp.Usage.Entries != 3 {
			t.Fatalf("export page %d: %+v %v", page, resp.Scope, err)
		}
		for _, e := range resp.Entries {
			if string(e.Value) != big {
				t.Fatalf("export %s: %d bytes", e.Key, len(e.Value))
			}
			keys = append(keys, e.Key)
		}
		if !resp.More {
			break
		}
		after = resp.Entries[len(resp.Entries)-1].Key
	}
	if strings.Join(keys, ",") != "notes/1,notes/2,notes/3" {
		t.Fatalf("exported %v", keys)
	}
	r, err := c.State(ctx, state.Request{Op: state.OpReset})
	if err != nil || r.Deleted != 3 || r.Receipt == 0 {
		t.Fatalf("reset = %+v %v", r, err)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name})
	last := rcs[len(rcs)-1]
	if last.Action != "reset" || last.Target != state.ScopeTarget || !strings.Contains(last.Reason, "3 entries removed") || last.Policy.Determining[0] != "state-write" {
		t.Fatalf("reset receipt = %+v", last)
	}
}

// seqpacketPair is the real transport of the authority: one datagram per
// message, bounded by the socket's send buffer.
func seqpacketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "seqpacket")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns[0], conns[1]
}

// The largest state messages — a put and a get of the largest value, an
// export page holding it, a full listing page of the longest keys — each
// fit in one datagram of the default send buffer.
func TestStateMessagesFitOneDatagram(t *testing.T) {
	st := testStore(t)
	srv := &Authority{Store: st, ID: idA, State: &StatePolicy{QuotaBytes: 1 << 30, QuotaEntries: 10000, MaxValueBytes: state.MaxValueBytesLimit}}
	c := connectWith(t, srv, seqpacketPair)
	// A datagram too large for the socket is never delivered: fail, not
	// hang.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// fits checks the margin: what crossed, encoded, under 200 KiB.
	fits := func(what string, v any) {
		t.Helper()
		if b, _ := json.Marshal(v); len(b) > 200<<10 {
			t.Errorf("%s: a %d-byte authority message", what, len(b))
		}
	}
	big := make([]byte, state.MaxValueBytesLimit)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "notes/big", Value: big}); err != nil {
		t.Fatalf("put of the largest value: %v", err)
	}
	fits("put", call{ID: 1, Op: "state_put", State: &state.Request{Op: state.OpPut, Key: "notes/big", Value: big}})
	got, err := c.State(ctx, state.Request{Op: state.OpGet, Key: "notes/big"})
	if err != nil || !bytes.Equal(got.Entry.Value, big) {
		t.Fatalf("get of the largest value: %v", err)
	}
	fits("get", reply{ID: 1, StateResp: &got})
	if got, err = c.State(ctx, state.Request{Op: state.OpExport}); err != nil || len(got.Entries) != 1 {
		t.Fatalf("export page of the largest value: %v", err)
	}
	fits("export", reply{ID: 1, StateResp: &got})
	// One byte more than any configuration allows is refused by the
	// privileged side, not lost on the socket.
	if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: "notes/big", Value: append(big, 0)}); !errors.Is(err, state.ErrTooLarge) {
		t.Fatalf("put over the bound: %v", err)
	}
	if _, _, err := st.ResetState(ctx, StateScope(idA), nil); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", state.MaxKeyBytes-4)
	for i := range state.MaxListLimit + state.ExportPageEntries {
		v := make([]byte, 700) // export pages: ExportPageBytes of values
		if _, err := c.State(ctx, state.Request{Op: state.OpPut, Key: fmt.Sprintf("%s%04d", long, i), Value: v}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if got, err = c.State(ctx, state.Request{Op: state.OpList, Limit: state.MaxListLimit}); err != nil || len(got.Entries) != state.MaxListLimit {
		t.Fatalf("full listing page: %d entries, %v", len(got.Entries), err)
	}
	fits("list", reply{ID: 1, StateResp: &got})
	if got, err = c.State(ctx, state.Request{Op: state.OpExport}); err != nil || len(got.Entries) < 90 {
		t.Fatalf("full export page: %d entries, %v", len(got.Entries), err)
	}
	fits("export", reply{ID: 1, StateResp: &got})
}
