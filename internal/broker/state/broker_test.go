package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

// fakeAuthority is an in-memory privileged side: one scope, versions, a
// quota of entries, and switches for refusals.
type fakeAuthority struct {
	mu       sync.Mutex
	entries  map[string]Entry
	version  int64
	receipt  int64
	quota    int
	calls    []Request
	deny     bool  // policy denies everything
	down     bool  // the store is unavailable
	failPage int   // export: fail this page (1-based); 0 never
	pages    int   // export pages served
	err      error // returned as is, when set
}

func newFakeAuthority() *fakeAuthority {
	return &fakeAuthority{entries: map[string]Entry{}, quota: 100}
}

func (f *fakeAuthority) State(_ context.Context, r Request) (Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r)
	switch {
	case f.err != nil:
		return Response{}, f.err
	case f.down:
		return Response{}, fmt.Errorf("%w: disk on fire", crossing.ErrUnavailable)
	case f.deny:
		return Response{}, fmt.Errorf("%w: forbidden by secret-policy-id", crossing.ErrPolicyDenied)
	}
	f.receipt++
	out := Response{Receipt: f.receipt}
	e, ok := f.entries[r.Key]
	switch r.Op {
	case OpGet:
		if !ok {
			return Response{}, ErrNotFound
		}
		out.Entry = &e
	case OpPut:
		if r.IfMatch != 0 && (!ok || e.Version != r.IfMatch) || r.IfExists && !ok || r.IfAbsent && ok {
			return Response{Current: e.Version}, fmt.Errorf("%w: stale", ErrPrecondition)
		}
		if !ok && len(f.entries) >= f.quota {
			return Response{Quota: "entries", Limit: int64(f.quota), Used: int64(f.quota), Needed: int64(f.quota) + 1}, fmt.Errorf("%w: entries", ErrQuota)
		}
		f.version++
		now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
		n := Entry{Key: r.Key, Version: f.version, Size: int64(len(r.Value)), Created: now, Updated: now, Value: r.Value,
			Provenance: Provenance{SandboxID: "sb-1", Written: now, Receipt: f.receipt, Trust: TrustAgent}}
		f.entries[r.Key] = n
		n.Value = nil
		out.Entry, out.Created = &n, !ok
	case OpDelete:
		if !ok {
			return Response{}, ErrNotFound
		}
		delete(f.entries, r.Key)
	case OpList, OpExport:
		f.pages++
		if r.Op == OpExport && f.pages == f.failPage {
			return Response{}, fmt.Errorf("%w: gone", crossing.ErrUnavailable)
		}
		var keys []string
		for k := range f.entries {
			if k > r.After && strings.HasPrefix(k, r.Prefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		limit := r.Limit
		if r.Op == OpExport {
			limit = 2 // small pages, to test paging
			out.Scope = &Scope{Tenant: "acme", Workload: "w", Purpose: "p"}
		}
		for i, k := range keys {
			if i == limit {
				out.More = true
				break
			}
			e := f.entries[k]
			if r.Op == OpList {
				e.Value = nil
			}
			out.Entries = append(out.Entries, e)
		}
		out.Usage = &Usage{Entries: int64(len(f.entries)), QuotaEntries: int64(f.quota)}
	case OpReset:
		out.Deleted = int64(len(f.entries))
		f.entries = map[string]Entry{}
	}
	return out, nil
}

var testID = crossing.Identity{Workload: "w", Tenant: "acme", Purpose: "p", SandboxID: "sb-1"}

func newTestBroker(t *testing.T, l Authority) *Broker {
	t.Helper()
	b, err := New(Options{Authority: l})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// do serves one request with the sandbox's identity bound.
func do(b http.Handler, method, target string, body []byte, hdr ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	r = r.WithContext(crossing.WithIdentity(r.Context(), testID))
	w := httptest.NewRecorder()
	b.ServeHTTP(w, r)
	return w
}

type errBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Quota   string `json:"quota"`
		Limit   int64  `json:"limit"`
		Current string `json:"current_etag"`
	} `json:"error"`
}

func decodeErr(t *testing.T, w *httptest.ResponseRecorder) errBody {
	t.Helper()
	var e errBody
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return e
}

func TestNoIdentityRefused(t *testing.T) {
	l := newFakeAuthority()
	b := newTestBroker(t, l)
	w := httptest.NewRecorder()
	b.ServeHTTP(w, httptest.NewRequest("GET", "/v1/state/a", nil))
	if w.Code != http.StatusForbidden || len(l.calls) != 0 {
		t.Fatalf("no identity: %d, %d authority calls", w.Code, len(l.calls))
	}
}

func TestPutGetDelete(t *testing.T) {
	l := newFakeAuthority()
	b := newTestBroker(t, l)
	value := []byte("\x00binary\xff value")
	w := do(b, "PUT", "/v1/state/notes/a", value, "Content-Type", "text/plain")
	if w.Code != http.StatusCreated || w.Header().Get("ETag") != `"1"` || w.Header().Get("X-Cordon-Receipt") != "1" {
		t.Fatalf("create: %d %v %s", w.Code, w.Header(), w.Body)
	}
	var e Entry
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Key != "notes/a" || e.Version != 1 || e.Value != nil || e.Provenance.Trust != TrustAgent {
		t.Fatalf("create body %s: %v", w.Body, err)
	}
	if l.calls[0].Key != "notes/a" || !bytes.Equal(l.calls[0].Value, value) {
		t.Fatalf("authority got %+v", l.calls[0])
	}
	w = do(b, "PUT", "/v1/state/notes/a", []byte("v2"), "If-Match", `"1"`)
	if w.Code != http.StatusOK || w.Header().Get("ETag") != `"2"` || l.calls[1].IfMatch != 1 {
		t.Fatalf("replace: %d %v %+v", w.Code, w.Header(), l.calls[1])
	}
	w = do(b, "GET", "/v1/state/notes/a", nil)
	h := w.Header()
	if w.Code != http.StatusOK || w.Body.String() != "v2" || h.Get("ETag") != `"2"` || h.Get("Content-Type") != "application/octet-stream" ||
		h.Get("X-Cordon-Written-By") != "sb-1" || h.Get("X-Cordon-Trust") != "untrusted" || h.Get("Last-Modified") != "Wed, 06 May 2026 07:08:09 GMT" ||
		h.Get("Cache-Control") != "no-store" {
		t.Fatalf("get: %d %v %q", w.Code, h, w.Body)
	}
	if w = do(b, "HEAD", "/v1/state/notes/a", nil); w.Code != http.StatusOK || h.Get("Content-Length") != "2" {
		t.Fatalf("head: %d %v", w.Code, w.Header())
	}
	if w = do(b, "DELETE", "/v1/state/notes/a", nil, "If-Match", `"2"`); w.Code != http.StatusNoContent || l.calls[len(l.calls)-1].IfMatch != 2 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if w = do(b, "DELETE", "/v1/state/notes/a", nil); w.Code != http.StatusNotFound {
		t.Fatalf("delete absent: %d", w.Code)
	}
	// An empty value is a value.
	if w = do(b, "PUT", "/v1/state/empty", nil); w.Code != http.StatusCreated {
		t.Fatalf("empty put: %d %s", w.Code, w.Body)
	}
	if w = do(b, "GET", "/v1/state/empty", nil); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("empty get: %d %q", w.Code, w.Body)
	}
}

// rawResponse sends one request (with Connection: close) over a real
// connection and returns every byte of the response.
func rawResponse(t *testing.T, srv *httptest.Server, req string) []byte {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A key nobody wrote and a key only another scope wrote get the same
// bytes: status, headers (no Date) and body; nothing names the key.
func TestAbsentAnswersAreIdentical(t *testing.T) {
	l := newFakeAuthority() // the privileged side answers ErrNotFound for both
	srv := testkit.ServeAs(t, newTestBroker(t, l), testID)
	a := rawResponse(t, srv, "GET /v1/state/theirs/secret-plan HTTP/1.1\r\nHost: 127.0.0.1:83\r\nConnection: close\r\n\r\n")
	n := rawResponse(t, srv, "GET /v1/state/never/written HTTP/1.1\r\nHost: 127.0.0.1:83\r\nConnection: close\r\n\r\n")
	if !bytes.Equal(a, n) || !bytes.HasPrefix(a, []byte("HTTP/1.1 404 ")) || bytes.Contains(a, []byte("Date:")) {
		t.Fatalf("absent answers differ or carry a date:\n%s\n---\n%s", a, n)
	}
	if bytes.Contains(a, []byte("secret-plan")) {
		t.Fatalf("the answer names the key:\n%s", a)
	}
}

func TestRefusalsBeforeTheAuthority(t *testing.T) {
	big := bytes.Repeat([]byte("x"), MaxValueBytesLimit+1)
	for _, c := range []struct {
		method, target string
		body           []byte
		hdr            []string
		status         int
		kind           string
	}{
		{"GET", "/v1/state/", nil, nil, 400, kindInvalid},
		{"PUT", "/v1/state/", nil, nil, 400, kindInvalid},
		{"DELETE", "/v1/state/", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state//a", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a/", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a/../b", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a..b", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/./a", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a%2Fb", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/%61", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a*b", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a:b", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/" + strings.Repeat("k", MaxKeyBytes+1), nil, nil, 400, kindInvalid},
		{"GET", "/v1/state/a?x=1", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?limit=0", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?limit=201", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?limit=01", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?prefix=a&prefix=b", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?prefix=%00", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state?sort=desc", nil, nil, 400, kindInvalid},
		{"GET", "/v1/state:export?after=a", nil, nil, 400, kindInvalid},
		{"GET", "/v2/state/a", nil, nil, 404, kindNoEndpoint},
		{"GET", "/v1/statex", nil, nil, 404, kindNoEndpoint},
		{"POST", "/v1/state/a", nil, nil, 405, kindMethod},
		{"PUT", "/v1/state", nil, nil, 405, kindMethod},
		{"GET", "/v1/state:reset", nil, nil, 405, kindMethod},
		{"DELETE", "/v1/state:export", nil, nil, 405, kindMethod},
		{"POST", "/v1/state:reset", []byte("x"), nil, 400, kindInvalid},
		{"PUT", "/v1/state/a", big, nil, 413, kindTooLarge},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `W/"1"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `"01"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `"0"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `"1", "2"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `"1"`, "If-Match", `"2"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Match", `"1"`, "If-None-Match", "*"}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-None-Match", `"1"`}, 400, kindInvalid},
		{"PUT", "/v1/state/a", nil, []string{"If-Unmodified-Since", "Wed, 06 May 2026 07:08:09 GMT"}, 400, kindInvalid},
		{"DELETE", "/v1/state/a", nil, []string{"If-None-Match", "*"}, 400, kindInvalid},
		{"GET", "/v1/state/a", nil, []string{"If-Match", `"1"`}, 400, kindInvalid},
		{"POST", "/v1/state:reset", nil, []string{"If-Match", "*"}, 400, kindInvalid},
	} {
		l := newFakeAuthority()
		w := do(newTestBroker(t, l), c.method, c.target, c.body, c.hdr...)
		if w.Code != c.status || decodeErr(t, w).Error.Type != c.kind || len(l.calls) != 0 {
			t.Errorf("%s %s %v = %d %s (%d authority calls), want %d %s and no call", c.method, c.target, c.hdr, w.Code, w.Body, len(l.calls), c.status, c.kind)
		}
		if c.status == 405 && w.Header().Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.target)
		}
	}
}

// A chunked body over the bound is refused without reading it all.
func TestChunkedValueTooLarge(t *testing.T) {
	l := newFakeAuthority()
	r := httptest.NewRequest("PUT", "/v1/state/a", io.MultiReader(bytes.NewReader(make([]byte, MaxValueBytesLimit)), strings.NewReader("!")))
	r.ContentLength = -1
	r = r.WithContext(crossing.WithIdentity(r.Context(), testID))
	w := httptest.NewRecorder()
	newTestBroker(t, l).ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge || len(l.calls) != 0 {
		t.Fatalf("chunked over the bound: %d, %d calls", w.Code, len(l.calls))
	}
}

func TestAuthorityRefusals(t *testing.T) {
	l := newFakeAuthority()
	l.quota = 1
	b := newTestBroker(t, l)
	do(b, "PUT", "/v1/state/a", []byte("1"))
	do(b, "PUT", "/v1/state/a", []byte("2"))
	w := do(b, "PUT", "/v1/state/a", []byte("3"), "If-Match", `"1"`)
	if e := decodeErr(t, w); w.Code != http.StatusPreconditionFailed || e.Error.Type != kindPrecondition || e.Error.Current != `"2"` {
		t.Fatalf("stale: %d %s", w.Code, w.Body)
	}
	w = do(b, "PUT", "/v1/state/b", []byte("x"), "If-None-Match", "*")
	if e := decodeErr(t, w); w.Code != http.StatusInsufficientStorage || e.Error.Type != kindQuota || e.Error.Quota != "entries" || e.Error.Limit != 1 {
		t.Fatalf("quota: %d %s", w.Code, w.Body)
	}
	if !l.calls[len(l.calls)-1].IfAbsent {
		t.Fatal("If-None-Match: * not passed on")
	}
	l.deny = true
	w = do(b, "GET", "/v1/state/a", nil)
	if e := decodeErr(t, w); w.Code != http.StatusForbidden || e.Error.Type != kindDenied || strings.Contains(w.Body.String(), "secret-policy-id") {
		t.Fatalf("policy: %d %s", w.Code, w.Body)
	}
	l.deny, l.down = false, true
	w = do(b, "PUT", "/v1/state/a", []byte("x"))
	if e := decodeErr(t, w); w.Code != http.StatusServiceUnavailable || e.Error.Type != kindUnavailable || strings.Contains(w.Body.String(), "fire") {
		t.Fatalf("unavailable: %d %s", w.Code, w.Body)
	}
	l.down, l.err = false, fmt.Errorf("%w: 70000 bytes, the limit is 65536", ErrTooLarge)
	w = do(b, "PUT", "/v1/state/a", []byte("x"))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("configured bound: %d %s", w.Code, w.Body)
	}
	// An authority that answers a get without an entry is a failure, not an
	// empty value.
	l.err = nil
	b2 := newTestBroker(t, authorityFunc(func(context.Context, Request) (Response, error) { return Response{}, nil }))
	if w := do(b2, "GET", "/v1/state/a", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("get without an entry: %d", w.Code)
	}
}

type authorityFunc func(context.Context, Request) (Response, error)

func (f authorityFunc) State(ctx context.Context, r Request) (Response, error) { return f(ctx, r) }

func TestListAndReset(t *testing.T) {
	l := newFakeAuthority()
	b := newTestBroker(t, l)
	for _, k := range []string{"notes/a", "notes/b", "notes/c", "todo"} {
		do(b, "PUT", "/v1/state/"+k, []byte(k))
	}
	w := do(b, "GET", "/v1/state?prefix=notes/&limit=2", nil)
	var got listing
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	if len(got.Entries) != 2 || !got.More || got.Next != "notes/b" || got.Usage.Entries != 4 || got.Entries[0].Value != nil {
		t.Fatalf("list = %+v", got)
	}
	if c := l.calls[len(l.calls)-1]; c.Prefix != "notes/" || c.Limit != 2 {
		t.Fatalf("list request = %+v", c)
	}
	w = do(b, "GET", "/v1/state?prefix=notes/&after=notes/b", nil)
	got = listing{}
	json.Unmarshal(w.Body.Bytes(), &got)
	if len(got.Entries) != 1 || got.More || got.Next != "" || l.calls[len(l.calls)-1].Limit != DefaultListLimit {
		t.Fatalf("page 2 = %+v", got)
	}
	w = do(b, "POST", "/v1/state:reset", nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"deleted":4`) {
		t.Fatalf("reset: %d %s", w.Code, w.Body)
	}
	w = do(b, "GET", "/v1/state", nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"entries":[]`) {
		t.Fatalf("empty list: %s", w.Body)
	}
}

type exportDoc struct {
	Scope   Scope   `json:"scope"`
	Usage   Usage   `json:"usage"`
	Entries []Entry `json:"entries"`
}

func TestExportPages(t *testing.T) {
	l := newFakeAuthority()
	b := newTestBroker(t, l)
	want := map[string]string{}
	for i := range 5 {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("value \x00 %d", i)
		want[k] = v
		do(b, "PUT", "/v1/state/"+k, []byte(v))
	}
	w := do(b, "GET", "/v1/state:export", nil)
	var doc exportDoc
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || w.Code != 200 {
		t.Fatalf("export: %d %v\n%s", w.Code, err, w.Body)
	}
	got := map[string]string{}
	for _, e := range doc.Entries {
		got[e.Key] = string(e.Value)
	}
	if d := cmp.Diff(want, got); d != "" || doc.Scope.Workload != "w" || l.pages != 3 {
		t.Fatalf("export (-want +got):\n%s scope %+v pages %d", d, doc.Scope, l.pages)
	}
	// Empty scope: a whole, empty document.
	l2 := newFakeAuthority()
	w = do(newTestBroker(t, l2), "GET", "/v1/state:export", nil)
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Entries) != 0 {
		t.Fatalf("empty export: %v %s", err, w.Body)
	}
}

// A page that fails after the document started cuts the connection: the
// client never gets a well-formed partial export.
func TestExportCutShort(t *testing.T) {
	l := newFakeAuthority()
	b := newTestBroker(t, l)
	for i := range 5 {
		// Big enough that the first page leaves before the second fails.
		do(b, "PUT", fmt.Sprintf("/v1/state/k%d", i), bytes.Repeat([]byte("v"), 10000))
	}
	l.failPage = 2
	srv := testkit.ServeAs(t, b, testID)
	resp, err := http.Get(srv.URL + "/v1/state:export")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err == nil || !bytes.Contains(body, []byte(`"entries":[`)) {
		t.Fatalf("cut export: status %d, read error %v, %d bytes; want a started body that ends in an error", resp.StatusCode, err, len(body))
	}
	// A first page that fails is an ordinary error answer.
	l.pages, l.failPage = 0, 1
	if w := do(b, "GET", "/v1/state:export", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first page failed: %d %s", w.Code, w.Body)
	}
}

func TestETag(t *testing.T) {
	for _, v := range []int64{1, 42, 1<<63 - 1} {
		if n, ok := ParseETag(ETag(v)); !ok || n != v {
			t.Errorf("ParseETag(ETag(%d)) = %d, %v", v, n, ok)
		}
	}
	for _, s := range []string{``, `""`, `"-1"`, `"0"`, `"007"`, `"1`, `1"`, `W/"1"`, `"9223372036854775808"`, `"1 "`, `"+1"`} {
		if n, ok := ParseETag(s); ok {
			t.Errorf("ParseETag(%q) = %d, want refused", s, n)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"a", "notes/a", "A-b_c.d/e", "x.y", strings.Repeat("k", MaxKeyBytes), ".hidden", "a/.b"} {
		if err := ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "/a", "a/", "a//b", ".", "a/./b", "..", "a..b", "a/../b", "a b", "a\x00", "é", "a%2f", "*", strings.Repeat("k", MaxKeyBytes+1)} {
		if err := ValidKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidKey(%q) = %v, want ErrInvalid", k, err)
		}
	}
	if ValidKey(ScopeTarget) == nil {
		t.Fatal("the scope's policy target is a valid key")
	}
}
