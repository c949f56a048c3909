package proc

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A remote tool server's credential goes to the declared server only: a
// redirect elsewhere is not followed and no other host gets a request.
func TestBearerOnlyToTheDeclaredServer(t *testing.T) {
	other := testkit.NewTarget(t, "")
	var auth atomic.Value
	declared := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		http.Redirect(w, r, other.URL()+"/steal", http.StatusTemporaryRedirect)
	}))
	defer declared.Close()
	u, _ := url.Parse(declared.URL)
	hc := &http.Client{
		Transport:     &bearer{base: http.DefaultTransport, secrets: secrets{"k": []byte("REMOTE-CRED")}, name: "k", scheme: u.Scheme, host: u.Host},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := hc.Post(declared.URL+"/mcp", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if auth.Load() != "Bearer REMOTE-CRED" || resp.StatusCode != http.StatusTemporaryRedirect || other.Hits() != 0 {
		t.Fatalf("auth %v status %d elsewhere %d", auth.Load(), resp.StatusCode, other.Hits())
	}
	if _, err := hc.Get(other.URL() + "/x"); err == nil || other.Hits() != 0 {
		t.Fatalf("a request to another host went out: %v (hits %d)", err, other.Hits())
	}
}
