package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The client's body decodes as the collector's ExportTraceServiceRequest
// and carries the headers; a redirect is not followed (the token never
// reaches the second host: control, the first host got it); an answer
// that is not 2xx is an error; no error quotes the endpoint URL (a
// dial error names the host and port, for the operator's log).
func TestOTLPClient(t *testing.T) {
	var got atomic.Pointer[collpb.ExportTraceServiceRequest]
	var auth atomic.Value
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collpb.ExportTraceServiceRequest
		if r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &req) != nil {
			w.WriteHeader(400)
			return
		}
		auth.Store(r.Header.Get("Authorization"))
		got.Store(&req)
	}))
	defer ok.Close()
	var second atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			second.Add(1)
		}
	}))
	defer elsewhere.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		http.Redirect(w, r, elsewhere.URL+"/v1/traces", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer failing.Close()

	rs := []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "session", TraceId: make([]byte, 16), SpanId: make([]byte, 8)}}}}}}
	send := func(endpoint string) error {
		c, err := newClient(Settings{Endpoint: endpoint + "/v1/traces", Headers: map[string]string{"Authorization": "Bearer tok"}}, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop(context.Background())
		return c.UploadTraces(context.Background(), rs)
	}
	if err := send(ok.URL); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if r := got.Load(); r == nil || len(r.ResourceSpans) != 1 || r.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "session" || auth.Load() != "Bearer tok" {
		t.Fatalf("collector got %v with auth %v", r, auth.Load())
	}
	auth.Store("")
	err := send(redirect.URL)
	if err == nil || second.Load() != 0 || auth.Load() != "Bearer tok" {
		t.Fatalf("redirect: err %v, token at the second host %d times, first host auth %v", err, second.Load(), auth.Load())
	}
	if err := send(failing.URL); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: %v", err)
	}
	for _, u := range []string{redirect.URL, failing.URL, "http://127.0.0.1:1"} {
		if err := send(u); err == nil || strings.Contains(err.Error(), "/v1/traces") {
			t.Fatalf("error for %s = %v; want one that does not quote the endpoint URL", u, err)
		}
	}
	if _, err := newClient(Settings{Endpoint: ok.URL}, func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_CERTIFICATE" {
			return "/nonexistent.pem"
		}
		return ""
	}); err == nil {
		t.Fatal("a CA bundle that cannot be read was accepted")
	}
}
