package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/gateway/proc"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/testkit"
)

// The policy of TestExplainIsTheRuntime: policy permits what the
// configuration does not offer, and forbids some of what it does, so
// each half decides some rows alone.
const explainPolicyText = `
@id("models") permit(principal, action == Action::"model.invoke", resource);
@id("no-evil") forbid(principal, action == Action::"model.invoke", resource == Model::"claude-evil");
@id("egress") permit(principal, action == Action::"egress.connect", resource);
@id("no-blocked") forbid(principal, action == Action::"egress.connect", resource == Host::"blocked.example.com");
@id("state") permit(principal, action in [Action::"state.read", Action::"state.write"], resource);
@id("no-private") forbid(principal, action == Action::"state.write", resource) when { resource.name like "private/*" };
@id("tools") permit(principal, action == Action::"tool.call", resource);
@id("no-secret") forbid(principal, action == Action::"tool.call", resource == Tool::"fs/read_secret");
`

// TestExplainIsTheRuntime: for a table of requests, what explain decides
// (the configuration's checks, then policy) is what the runtime does when
// the crossing is made through the brokers and the privileged side —
// observed at the upstream, the store and the agent's answer.
func TestExplainIsTheRuntime(t *testing.T) {
	// The model provider answers only the custodied key; the egress
	// target counts what reached it. The runtime's verdict is checked
	// against what each of them saw.
	up := testkit.NewModelUpstream(t, "sk-ant-api03-secretsecretsecret", "hi")
	target := testkit.NewTarget(t, "ok")
	port, _ := strconv.Atoi(target.Port())

	f := filepath.Join(t.TempDir(), "explain.cedar")
	if err := os.WriteFile(f, []byte(explainPolicyText), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ChildConfig{
		Identity: apprID,
		Model: model.Config{
			Routes: []model.RouteConfig{{Name: "claude", API: "anthropic", Upstream: up.URL(), Credential: "key", Models: []string{"claude-*"}}},
			Limits: model.Limits{MaxRequestBytes: 1 << 20, MaxResponseBytes: 1 << 20, MaxConcurrentStreams: 4},
		},
		Secrets: map[string][]byte{"key": []byte("sk-ant-api03-secretsecretsecret")},
		Egress: egress.Config{
			Allow:             []egress.Rule{{Host: "api.example.com", Ports: []int{port}}, {Host: "blocked.example.com", Ports: []int{port}}},
			UnsafeAllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Resolve:           map[string][]netip.Addr{"api.example.com": {netip.MustParseAddr("127.0.0.1")}, "blocked.example.com": {netip.MustParseAddr("127.0.0.1")}},
		},
	}
	tools := &ToolPolicy{Servers: map[string]bool{"fs": true}, Allow: map[string][]string{"fs": {"read_*"}}, ApprovalTTL: time.Minute}
	sp := &StatePolicy{QuotaBytes: 1 << 20, QuotaEntries: 100, MaxValueBytes: 1 << 10}

	st := testStore(t)
	srv := &Authority{Store: st, ID: apprID, Policy: set, Tools: tools, State: sp}
	c := connect(t, srv)
	h, err := proc.BuildHandlers(cfg, c.callers(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sh, err := state.New(state.Options{Authority: c})
	if err != nil {
		t.Fatal(err)
	}
	modelSrv, egressSrv, stateSrv := testkit.ServeAs(t, h["model"], apprID), testkit.ServeAs(t, h["egress"], apprID), testkit.ServeAs(t, sh, apprID)
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: egressSrv.Listener.Addr().String()})}
	defer tr.CloseIdleConnections()
	if _, _, _, err := st.PutState(context.Background(), StateScope(apprID), store.StateWrite{Key: "notes/a", Value: []byte("x"), SandboxID: "seed"},
		store.StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 100}, nil); err != nil {
		t.Fatal(err)
	}

	// runtime makes the crossing and reports whether it went through.
	runtime := func(t *testing.T, r AdmitRequest) bool {
		switch r.Action {
		case policy.ActionModelInvoke:
			body := `{"model":"` + r.Resource + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
			before := len(up.Seen())
			resp, err := http.Post(modelSrv.URL+"/v1/messages", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok, reached := resp.StatusCode == 200, len(up.Seen()) > before
			if ok != reached {
				t.Fatalf("the agent got %d, the upstream was reached: %v", resp.StatusCode, reached)
			}
			return ok
		case policy.ActionEgressConnect:
			req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(r.Resource, strconv.Itoa(r.Port))+"/", nil)
			before := target.Hits()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok, reached := resp.StatusCode == 200 && resp.Header.Get("X-Cordon-Reason") == "", target.Hits() > before
			if ok != reached {
				t.Fatalf("the agent got %d (%s), the target was reached: %v", resp.StatusCode, resp.Header.Get("X-Cordon-Reason"), reached)
			}
			return ok
		case policy.ActionStateRead, policy.ActionStateWrite:
			method := map[string]string{state.OpGet: http.MethodGet, state.OpPut: http.MethodPut, state.OpDelete: http.MethodDelete}[r.Operation]
			req, _ := http.NewRequest(method, stateSrv.URL+"/v1/state/"+r.Resource, strings.NewReader("v"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode/100 == 2
		case policy.ActionToolCall:
			server, name, _ := strings.Cut(r.Resource, "/")
			began, err := c.Begin(context.Background(), tool.Begin{Server: server, Tool: name, Arguments: json.RawMessage(`{}`)})
			return err == nil && began.Status == tool.StatusGo
		}
		t.Fatalf("no runtime for %s", r.Action)
		return false
	}
	// explain decides as cordon policy explain does.
	explain := func(r AdmitRequest) (bool, Admission, bool) {
		adm := Admit(cfg, tools, sp, r)
		allow, _ := set.Decide(policy.Request{Workload: apprID.Workload, Tenant: apprID.Tenant, Purpose: apprID.Purpose, Action: r.Action,
			Resource: policy.Resource{Type: map[string]string{policy.ActionModelInvoke: "Model", policy.ActionEgressConnect: "Host",
				policy.ActionToolCall: "Tool", policy.ActionStateRead: "State", policy.ActionStateWrite: "State"}[r.Action], ID: r.Resource},
			Context: policy.Context{Port: r.Port}})
		return adm.Allow && allow, adm, allow
	}
	for _, tt := range []struct {
		name       string
		r          AdmitRequest
		want       bool
		configDeny bool // the configuration alone refuses it (policy permits)
	}{
		{"model allowed", AdmitRequest{Action: policy.ActionModelInvoke, Resource: "claude-x"}, true, false},
		{"model without a route", AdmitRequest{Action: policy.ActionModelInvoke, Resource: "gpt-4o"}, false, true},
		{"model forbidden by policy", AdmitRequest{Action: policy.ActionModelInvoke, Resource: "claude-evil"}, false, false},
		{"model id too long", AdmitRequest{Action: policy.ActionModelInvoke, Resource: "claude-" + strings.Repeat("x", 300)}, false, true},
		{"egress allowed", AdmitRequest{Action: policy.ActionEgressConnect, Resource: "api.example.com", Port: port}, true, false},
		{"egress host not in the allow-list", AdmitRequest{Action: policy.ActionEgressConnect, Resource: "other.example.com", Port: port}, false, true},
		{"egress port not in the allow-list", AdmitRequest{Action: policy.ActionEgressConnect, Resource: "api.example.com", Port: port + 1}, false, true},
		{"egress ip literal", AdmitRequest{Action: policy.ActionEgressConnect, Resource: "127.0.0.1", Port: port}, false, true},
		{"egress forbidden by policy", AdmitRequest{Action: policy.ActionEgressConnect, Resource: "blocked.example.com", Port: port}, false, false},
		{"state read", AdmitRequest{Action: policy.ActionStateRead, Resource: "notes/a", Operation: state.OpGet}, true, false},
		{"state write", AdmitRequest{Action: policy.ActionStateWrite, Resource: "notes/b", Operation: state.OpPut}, true, false},
		{"state write forbidden by policy", AdmitRequest{Action: policy.ActionStateWrite, Resource: "private/x", Operation: state.OpPut}, false, false},
		{"state bad key", AdmitRequest{Action: policy.ActionStateWrite, Resource: "a..b", Operation: state.OpPut}, false, true},
		{"tool offered", AdmitRequest{Action: policy.ActionToolCall, Resource: "fs/read_file"}, true, false},
		{"tool not offered", AdmitRequest{Action: policy.ActionToolCall, Resource: "fs/write_file"}, false, true},
		{"tool of no server", AdmitRequest{Action: policy.ActionToolCall, Resource: "shell/run"}, false, true},
		{"tool forbidden by policy", AdmitRequest{Action: policy.ActionToolCall, Resource: "fs/read_secret"}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, adm, pol := explain(tt.r)
			if got != tt.want || (tt.configDeny && (adm.Allow || !pol)) {
				t.Fatalf("explain(%+v) = %v (config %+v, policy %v), want %v", tt.r, got, adm, pol, tt.want)
			}
			if rt := runtime(t, tt.r); rt != got {
				t.Fatalf("runtime(%+v) = %v, explain = %v (config %+v, policy %v)", tt.r, rt, got, adm, pol)
			}
		})
	}
}
