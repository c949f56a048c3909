package model

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

// The Proxy benchmarks run agent → broker → in-process upstream over
// loopback HTTP; the Direct ones run agent → upstream, for the comparison.
// allocs/op counts the whole process (client, broker, upstream). The
// Handler benchmarks call ServeHTTP with an in-memory transport: the
// broker's own cost.

const benchBody = `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Write a haiku about sandboxes."}]}`

func benchUpstream(b *testing.B, stream bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, e := range anthropicStream {
				io.WriteString(w, e)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, anthropicReply)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
}

func benchRun(b *testing.B, url, body string) {
	c := benchClient()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	start := cpuTime()
	for b.Loop() {
		resp, err := c.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	// CPU time of the whole process per call: steadier than ns/op on a
	// shared two-core machine; Proxy minus Direct is the broker's cost.
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchProxy(b *testing.B, up string) string {
	b.Helper()
	led := newFakeAuthority()
	bk, err := New(Options{
		Routes:    []Route{{Name: "claude", API: APIAnthropic, Upstream: mustURL(up), Credential: "anthropic", Models: []string{"claude-*"}}},
		Limits:    testLimits(),
		Authority: &benchAuthority{led},
		Secrets:   fakeSecrets{"anthropic": anthropicKey},
	})
	if err != nil {
		b.Fatal(err)
	}
	return testkit.ServeAs(b, bk, testID).URL
}

// benchAuthority keeps budgets but no receipts (a benchmark would otherwise
// measure a growing slice).
type benchAuthority struct{ *fakeAuthority }

func (benchAuthority) Record(context.Context, crossing.Receipt) error { return nil }

func BenchmarkProxyNonStreaming(b *testing.B) {
	benchRun(b, benchProxy(b, benchUpstream(b, false).URL)+"/v1/messages", benchBody)
}

func BenchmarkDirectNonStreaming(b *testing.B) {
	benchRun(b, benchUpstream(b, false).URL+"/v1/messages", benchBody)
}

func BenchmarkProxyStreaming(b *testing.B) {
	body := strings.Replace(benchBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	benchRun(b, benchProxy(b, benchUpstream(b, true).URL)+"/v1/messages", body)
}

func BenchmarkDirectStreaming(b *testing.B) {
	body := strings.Replace(benchBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	benchRun(b, benchUpstream(b, true).URL+"/v1/messages", body)
}

// memTransport answers every request from memory.
type memTransport struct {
	ct   string
	body string
}

func (t memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{
		StatusCode: 200, Header: http.Header{"Content-Type": {t.ct}},
		Body: io.NopCloser(strings.NewReader(t.body)), ContentLength: -1, Request: r,
	}, nil
}

func benchHandler(b *testing.B, body string, tr memTransport) {
	benchHandlerAt(b, "/v1/messages", body, tr)
}

func benchHandlerAt(b *testing.B, path, body string, tr memTransport) {
	bk, err := New(Options{
		Routes: []Route{
			{Name: "claude", API: APIAnthropic, Upstream: mustURL("https://api.anthropic.com"), Credential: "anthropic", Models: []string{"claude-*"}},
			{Name: "gemini", API: APIGemini, Upstream: mustURL("https://generativelanguage.googleapis.com"), Credential: "gemini", Models: []string{"gemini-2.5-*"}},
		},
		Limits:    testLimits(),
		Authority: &benchAuthority{newFakeAuthority()},
		Secrets:   fakeSecrets{"anthropic": anthropicKey, "gemini": geminiKey},
		Transport: tr,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := crossing.WithIdentity(context.Background(), testID)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", path, strings.NewReader(body)).WithContext(ctx)
		rec := httptest.NewRecorder()
		bk.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

func BenchmarkHandlerNonStreaming(b *testing.B) {
	benchHandler(b, benchBody, memTransport{"application/json", anthropicReply})
}

func BenchmarkHandlerStreaming(b *testing.B) {
	body := strings.Replace(benchBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	benchHandler(b, body, memTransport{"text/event-stream", strings.Join(anthropicStream, "")})
}

const benchGeminiBody = `{"contents":[{"role":"user","parts":[{"text":"Write a haiku about sandboxes."}]}],"generationConfig":{"maxOutputTokens":1024}}`

func BenchmarkHandlerGeminiNonStreaming(b *testing.B) {
	benchHandlerAt(b, "/v1beta/models/gemini-2.5-flash:generateContent", benchGeminiBody, memTransport{"application/json", geminiReply})
}

func BenchmarkHandlerGeminiStreaming(b *testing.B) {
	benchHandlerAt(b, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", benchGeminiBody,
		memTransport{"text/event-stream", strings.Join(geminiStream, "")})
}

// The Parallel benchmarks run 64 concurrent agents against an upstream
// that takes 20 ms per call, as a provider does: Proxy ns/op against
// Direct ns/op is the broker's share of throughput.
func benchParallel(b *testing.B, url string) {
	c := benchClient()
	b.ReportAllocs()
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(url, "application/json", strings.NewReader(benchBody))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

func slowUpstream(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, anthropicReply)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func BenchmarkProxyParallel20ms(b *testing.B) {
	benchParallel(b, benchProxy(b, slowUpstream(b).URL)+"/v1/messages")
}

func BenchmarkDirectParallel20ms(b *testing.B) {
	benchParallel(b, slowUpstream(b).URL+"/v1/messages")
}
