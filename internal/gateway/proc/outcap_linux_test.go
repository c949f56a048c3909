package proc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

// fakeAuthority answers the model broker's channel: every reservation is
// granted, and what was asked is kept.
type fakeAuthority struct {
	mu   sync.Mutex
	want []crossing.Amount
}

func (f *fakeAuthority) Call(_ context.Context, op string, in, out any) error {
	if op != crossing.OpReserve {
		return nil
	}
	r := in.(crossing.ReserveRequest)
	f.mu.Lock()
	f.want = append(f.want, r.Want)
	f.mu.Unlock()
	out.(*crossing.ReserveResponse).Res = crossing.Reservation{ID: 1, Broker: "model", Held: r.Want}
	return nil
}

// limits.default_max_output_tokens reaches the model broker: a config
// that sets it, built as the run builds the gateway process's
// configuration and sent as over the config pipe, makes the broker cap
// (and reserve) an OpenAI request that sets no cap at that value,
// observed at the upstream and at the authority. Control: without the
// key the cap is the broker's default, 4096.
func TestDefaultOutputCapFromConfig(t *testing.T) {
	for _, tc := range []struct {
		name, limits string
		want         int64
	}{
		{"configured", "limits:\n  default_max_output_tokens: 777\n", 777},
		{"default", "", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				MaxCompletionTokens int64 `json:"max_completion_tokens"`
			}
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &got)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
			}))
			defer up.Close()
			yaml := "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\n" +
				"models:\n  - {name: gpt, api: openai, upstream: '" + up.URL + "', credential: k, models: ['gpt-*']}\n" +
				"secrets:\n  k: {env: K}\n" + tc.limits
			c, err := config.Parse([]byte(yaml), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			// As the root side sends it: JSON over the config pipe.
			b, err := json.Marshal(Config{Model: c.ModelConfig(), Egress: c.EgressConfig(), Secrets: map[string][]byte{"k": []byte("sk-test-0123456789abcdef")}})
			if err != nil {
				t.Fatal(err)
			}
			var cfg Config
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			auth := &fakeAuthority{}
			h, err := BuildHandlers(cfg, map[string]crossing.Caller{"model": auth, "egress": auth}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			srv := testkit.ServeAs(t, h["model"], crossing.Identity{Workload: "demo", SandboxID: "sb"})
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o","messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got.MaxCompletionTokens != tc.want {
				t.Errorf("upstream saw max_completion_tokens %d, want %d", got.MaxCompletionTokens, tc.want)
			}
			if len(auth.want) != 1 || auth.want[0].OutputTokens != tc.want {
				t.Errorf("reserved %+v, want %d output tokens", auth.want, tc.want)
			}
		})
	}
}
