package probeops

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The marker ops write only into a directory holding the probe's token:
// against a provider that isolates nothing, a bind target is a host path
// the probe did not create.
func TestMarkOwnedNeedsTheToken(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	if err := markOwned("tok", marker); err == nil {
		t.Fatal("markOwned wrote into a directory without a token")
	}
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := markOwned("tok", marker); err == nil {
		t.Fatal("markOwned wrote into a directory with another token")
	}
	if _, err := os.Lstat(marker); err == nil {
		t.Fatal("a refused marker exists")
	}
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := markOwned("tok", marker); err != nil {
		t.Fatalf("markOwned with the token: %v", err)
	}
	if _, err := os.Lstat(marker); err != nil {
		t.Fatalf("marker: %v", err)
	}
}

// http expands a leading $NAME from the environment and carries the
// agent's placeholder key.
func TestHTTPOpExpandsTheGatewayVariable(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.WriteHeader(418)
		w.Write([]byte("teapot"))
	}))
	defer srv.Close()
	t.Setenv("PROBE_BASE", srv.URL)
	t.Setenv("ANTHROPIC_API_KEY", "placeholder")
	data, err := httpOp([]string{"POST", "$PROBE_BASE/v1/messages", "{}"}, false)
	if err != nil || data != "418 teapot" {
		t.Fatalf("httpOp = %q, %v", data, err)
	}
	t.Setenv("PROBE_STATE", srv.URL+"/v1/state")
	if _, err := httpOp([]string{"POST", "$PROBE_STATE:reset"}, false); err != nil || got.URL.Path != "/v1/state:reset" {
		t.Fatalf("$PROBE_STATE:reset reached %q: %v", got.URL.Path, err)
	}
	if _, err := httpOp([]string{"POST", "$PROBE_BASE/v1/messages", "{}"}, false); err != nil {
		t.Fatal(err)
	}
	if got.URL.Path != "/v1/messages" || got.Header.Get("x-api-key") != "placeholder" || !strings.HasPrefix(got.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("request %s %v", got.URL.Path, got.Header)
	}
}
