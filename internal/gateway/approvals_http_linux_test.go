package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/proc"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// The agent's side of an approval, through the real brokers the gateway
// process runs and the real privileged side with a real store: each
// crossing is refused with its protocol's error naming the approval,
// passes once the operator approves it (from the store, as `cordon
// approvals approve` does), and only once; what the upstream saw and
// what the store holds are checked from outside the brokers.

func approvalHandlers(t *testing.T, text string, cfg ChildConfig) (map[string]http.Handler, *store.Store) {
	t.Helper()
	st := testStore(t)
	_, c := approvalServer(t, st, text, time.Minute)
	cfg.Identity = apprID
	h, err := proc.BuildHandlers(cfg, c.callers(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sh, err := state.New(state.Options{Authority: c})
	if err != nil {
		t.Fatal(err)
	}
	h["state"] = sh
	return h, st
}

func TestModelApprovalOverHTTP(t *testing.T) {
	for _, tc := range []struct{ name, text string }{{"annotated", approvalPolicy}, {"control", controlPolicy}} {
		t.Run(tc.name, func(t *testing.T) {
			// It answers only the custodied key: a 200 below is a call
			// that carried it.
			up := testkit.NewModelUpstream(t, "sk-ant-api03-secretsecretsecret", "hi")
			calls := func() int { return len(up.Seen()) }
			h, st := approvalHandlers(t, tc.text, ChildConfig{
				Model: model.Config{
					Routes: []model.RouteConfig{{Name: "claude", API: "anthropic", Upstream: up.URL(), Credential: "key", Models: []string{"claude-*"}}},
					Limits: model.Limits{MaxRequestBytes: 1 << 20, MaxResponseBytes: 1 << 20, MaxConcurrentStreams: 4},
				},
				Secrets: map[string][]byte{"key": []byte("sk-ant-api03-secretsecretsecret")},
			})
			srv := testkit.ServeAs(t, h["model"], apprID)
			post := func(text string) (int, map[string]any) {
				body := `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"` + text + `"}]}`
				resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var m map[string]any
				json.NewDecoder(resp.Body).Decode(&m)
				return resp.StatusCode, m
			}
			if tc.name == "control" {
				if code, _ := post("hello"); code != 200 || calls() != 1 {
					t.Fatalf("control: status %d, upstream calls %d; want 200 and 1", code, calls())
				}
				return
			}
			code, m := post("hello")
			e, _ := m["error"].(map[string]any)
			id, _ := e["approval_id"].(string)
			if code != http.StatusConflict || e["type"] != "approval_pending" || !store.ValidApprovalID(id) || e["expires"] == nil {
				t.Fatalf("pending answer: %d %v", code, m)
			}
			if calls() != 0 {
				t.Fatalf("the upstream was called %d times before approval", calls())
			}
			// Another body is another approval.
			if code, m := post("something else"); code != http.StatusConflict || m["error"].(map[string]any)["approval_id"] == id {
				t.Fatalf("other body: %d %v", code, m)
			}
			decide(t, st, id, true)
			if code, m := post("hello"); code != 200 || calls() != 1 {
				t.Fatalf("approved: %d %v, upstream calls %d", code, m, calls())
			}
			if code, m := post("hello"); code != http.StatusConflict || m["error"].(map[string]any)["approval_id"] == id || calls() != 1 {
				t.Fatalf("reuse: %d %v, upstream calls %d", code, m, calls())
			}
			// Receipts: the pending refusals and the one call, which names
			// the approval.
			rcs, _ := st.Receipts(context.Background(), store.ReceiptFilter{})
			var allowed, pending int
			for _, rc := range rcs {
				switch {
				case rc.Decision == crossing.Allow && rc.Approval == id:
					allowed++
				case rc.Decision == crossing.Deny && strings.HasPrefix(rc.Reason, "approval pending: apr_"):
					pending++
				}
			}
			if allowed != 1 || pending != 3 {
				t.Fatalf("receipts: %d allowed naming %s, %d pending; want 1 and 3: %+v", allowed, id, pending, rcs)
			}
		})
	}
}

func TestEgressApprovalOverHTTP(t *testing.T) {
	up := testkit.NewTarget(t, "ok")
	port, _ := strconv.Atoi(up.Port())
	h, st := approvalHandlers(t, approvalPolicy, ChildConfig{Egress: egress.Config{
		Allow:             []egress.Rule{{Host: "api.example.com", Ports: []int{port}}},
		UnsafeAllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolve:           map[string][]netip.Addr{"api.example.com": {netip.MustParseAddr("127.0.0.1")}},
	}})
	srv := testkit.ServeAs(t, h["egress"], apprID)
	authority := "api.example.com:" + strconv.Itoa(port)

	// CONNECT: refused with 403 and the approval's id.
	connect := func() *http.Response {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := connect()
	id := resp.Header.Get("X-Cordon-Approval")
	if resp.StatusCode != 403 || resp.Header.Get("X-Cordon-Reason") != "approval-pending" || !store.ValidApprovalID(id) || resp.Header.Get("X-Cordon-Approval-Expires") == "" {
		t.Fatalf("CONNECT before approval: %d %v", resp.StatusCode, resp.Header)
	}
	decide(t, st, id, true)
	if resp := connect(); resp.StatusCode != 200 {
		t.Fatalf("CONNECT after approval: %d %v", resp.StatusCode, resp.Header)
	}
	if a, _ := st.Approval(context.Background(), id); a.State != store.ApprovalConsumed {
		t.Fatalf("approval after the CONNECT: %s, want consumed", a.State)
	}
	// Used once: the next connection asks again.
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: srv.Listener.Addr().String()})}
	defer tr.CloseIdleConnections()
	get := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://"+authority+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp = get()
	id2 := resp.Header.Get("X-Cordon-Approval")
	if resp.StatusCode != 403 || id2 == "" || id2 == id || up.Hits() != 0 {
		t.Fatalf("second connection: %d %v, upstream calls %d", resp.StatusCode, resp.Header, up.Hits())
	}
	decide(t, st, id2, true)
	if resp := get(); resp.StatusCode != 200 || up.Hits() != 1 {
		t.Fatalf("approved forward: %d, upstream calls %d", resp.StatusCode, up.Hits())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rcs, _ := st.Receipts(context.Background(), store.ReceiptFilter{})
		n := 0
		for _, rc := range rcs {
			if rc.Decision == crossing.Allow && rc.Approval == id2 {
				n++
			}
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipts naming the approval: %d, want 1: %+v", n, rcs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStateApprovalOverHTTP(t *testing.T) {
	h, st := approvalHandlers(t, approvalPolicy, ChildConfig{})
	srv := testkit.ServeAs(t, h["state"], apprID)
	put := func(v string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/state/notes/a", strings.NewReader(v))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, m := put("v1")
	e, _ := m["error"].(map[string]any)
	id, _ := e["approval_id"].(string)
	if code != http.StatusConflict || e["type"] != "approval_pending" || !store.ValidApprovalID(id) {
		t.Fatalf("pending answer: %d %v", code, m)
	}
	sc := StateScope(apprID)
	if _, _, err := st.GetState(context.Background(), sc, "notes/a", nil); err == nil {
		t.Fatal("written before approval")
	}
	// Another value is another approval; denied, it is refused.
	code, m = put("v2")
	other, _ := m["error"].(map[string]any)["approval_id"].(string)
	if code != http.StatusConflict || other == id {
		t.Fatalf("other value: %d %v", code, m)
	}
	decide(t, st, other, false)
	if code, m := put("v2"); code != http.StatusForbidden || m["error"].(map[string]any)["type"] != "approval_denied" {
		t.Fatalf("denied: %d %v", code, m)
	}
	decide(t, st, id, true)
	if code, m := put("v1"); code/100 != 2 {
		t.Fatalf("approved: %d %v", code, m)
	}
	e1, _, err := st.GetState(context.Background(), sc, "notes/a", nil)
	if err != nil || e1.Version != 1 {
		t.Fatalf("after approval: %+v %v", e1, err)
	}
	if code, _ := put("v1"); code != http.StatusConflict {
		t.Fatalf("reuse: %d, want 409", code)
	}
	if e, _, _ := st.GetState(context.Background(), sc, "notes/a", nil); e.Version != 1 {
		t.Fatalf("written again without approval: version %d", e.Version)
	}
}
