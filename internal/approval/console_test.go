package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// hostileArgs are arguments an agent chose: markup that must be shown as
// text and never run, and a bidi override that must be shown as an escape.
const hostileArgs = `{"path":"/work/<script>document.title='pwned'</script>.txt","content":"<img src=x onerror=\"document.title='pwned'\"> & </pre> \"quoted\" ` + "\u202e" + `txt.exe","mode":420}`

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.DefaultPool)
	if err != nil {
		t.Fatalf("store.Open = %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func pending(t *testing.T, st *store.Store, workload, args string) store.Approval {
	t.Helper()
	sum := sha256.Sum256([]byte(workload + "\x00" + args))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	a, err := st.RequestApproval(context.Background(), store.Approval{Workload: workload, SandboxID: "sb-" + workload,
		Action: "tool.call", Target: "fs/write_file", Digest: digest, Arguments: json.RawMessage(args)}, time.Hour)
	if err != nil {
		t.Fatalf("RequestApproval = %v", err)
	}
	return a
}

// startConsole serves a console on 127.0.0.1 until the test ends.
func startConsole(t *testing.T, st *store.Store) *Console {
	t.Helper()
	c, err := NewConsole(st, ConsoleOptions{Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	if err != nil {
		t.Fatalf("NewConsole = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return c
}

// tlog writes the console's log to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// client is a browser stand-in: a cookie jar, no redirects followed.
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login logs cl in and returns the page's CSRF token.
func login(t *testing.T, c *Console, cl *http.Client) string {
	t.Helper()
	resp, err := cl.Get(c.LoginURL())
	if err != nil {
		t.Fatalf("GET login = %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("GET login = %s to %q, want 303 to /", resp.Status, resp.Header.Get("Location"))
	}
	ck := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("Set-Cookie %q lacks %s", ck, want)
		}
	}
	code, body := get(t, cl, c, "/", nil)
	if code != http.StatusOK {
		t.Fatalf("GET / after login = %d, want 200", code)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

func get(t *testing.T, cl *http.Client, c *Console, path string, edit func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+c.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	return do(t, cl, req)
}

func post(t *testing.T, cl *http.Client, c *Console, path string, form url.Values, edit func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+c.Addr()+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+c.Addr())
	if edit != nil {
		edit(req)
	}
	return do(t, cl, req)
}

func do(t *testing.T, cl *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s = %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for k, v := range securityHeaders {
		if k == "Referrer-Policy" && req.URL.Path == "/login" {
			v = "no-referrer"
		}
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s %s: header %s = %q, want %q", req.Method, req.URL.Path, k, got, v)
		}
	}
	return resp.StatusCode, string(b)
}

func TestNewConsoleRefusesNonLoopback(t *testing.T) {
	st := openStore(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "localhost:0", "10.1.2.3:0", "example.com:80", "127.0.0.1", "[fe80::1%lo]:0", "[::ffff:10.0.0.1]:0"} {
		c, err := NewConsole(st, ConsoleOptions{Listen: addr})
		if err == nil {
			c.Close()
			t.Errorf("NewConsole(%q) = nil error, want a refusal", addr)
		} else if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("NewConsole(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
	c, err := NewConsole(st, ConsoleOptions{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("NewConsole(127.0.0.1:0) = %v", err)
	}
	defer c.Close()
	if !strings.HasPrefix(c.Addr(), "127.0.0.1:") || !strings.HasPrefix(c.LoginURL(), "http://"+c.Addr()+"/login?token=") {
		t.Errorf("Addr %q, LoginURL %q", c.Addr(), c.LoginURL())
	}
}

func TestConsoleAuth(t *testing.T) {
	st := openStore(t)
	a := pending(t, st, "wl", hostileArgs)
	c := startConsole(t, st)
	token := strings.TrimPrefix(c.LoginURL(), "http://"+c.Addr()+"/login?token=")
	wrong := []byte(token)
	wrong[0] ^= 1

	for _, tc := range []struct {
		name string
		path string
		want int
	}{
		{"no cookie", "/", http.StatusUnauthorized},
		{"no cookie, stylesheet", "/console.css", http.StatusUnauthorized},
		{"no token", "/login", http.StatusUnauthorized},
		{"wrong token", "/login?token=" + string(wrong), http.StatusUnauthorized},
		{"short token", "/login?token=" + token[:10], http.StatusUnauthorized},
	} {
		code, body := get(t, client(t), c, tc.path, nil)
		if code != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, code, tc.want)
		}
		if strings.Contains(body, a.ID) {
			t.Errorf("%s: GET %s shows approval %s", tc.name, tc.path, a.ID)
		}
	}
	// A forged cookie is no session.
	cl := client(t)
	code, _ := get(t, cl, c, "/", func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: cookieName, Value: strings.Repeat("ab", 32)})
	})
	if code != http.StatusUnauthorized {
		t.Errorf("GET / with a forged cookie = %d, want 401", code)
	}
	// And no POST goes anywhere without a session.
	if code, _ := post(t, cl, c, "/approvals/"+a.ID+"/approve", url.Values{csrfField: {"x"}}, nil); code != http.StatusUnauthorized {
		t.Errorf("POST approve without a session = %d, want 401", code)
	}
	login(t, c, cl)
	if code, body := get(t, cl, c, "/", nil); code != http.StatusOK || !strings.Contains(body, a.ID) {
		t.Errorf("GET / with a session = %d (shows %s: %v), want 200 and the approval", code, a.ID, strings.Contains(body, a.ID))
	}
	wantPending(t, st, a.ID)
}

func TestConsoleRefusesForgedDecisions(t *testing.T) {
	st := openStore(t)
	a := pending(t, st, "wl", `{"x":1}`)
	c := startConsole(t, st)
	cl := client(t)
	csrf := login(t, c, cl)
	approve := "/approvals/" + a.ID + "/approve"
	good := url.Values{csrfField: {csrf}}

	for _, tc := range []struct {
		name  string
		form  url.Values
		edit  func(*http.Request)
		wants []int
	}{
		{"no CSRF token", url.Values{}, nil, []int{http.StatusForbidden}},
		{"wrong CSRF token", url.Values{csrfField: {strings.Repeat("0", 64)}}, nil, []int{http.StatusForbidden}},
		{"foreign Origin", good, func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, []int{http.StatusForbidden}},
		{"other loopback port", good, func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:1") }, []int{http.StatusForbidden}},
		{"null Origin", good, func(r *http.Request) { r.Header.Set("Origin", "null") }, []int{http.StatusForbidden}},
		{"no Origin, foreign Referer", good, func(r *http.Request) {
			r.Header.Del("Origin")
			r.Header.Set("Referer", "http://evil.example/"+c.Addr())
		}, []int{http.StatusForbidden}},
		{"no Origin, no Referer", good, func(r *http.Request) { r.Header.Del("Origin") }, []int{http.StatusForbidden}},
		{"cross-site fetch", good, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, []int{http.StatusForbidden}},
		{"DNS rebinding Host", good, func(r *http.Request) { r.Host = "evil.example:" + strings.Split(c.Addr(), ":")[1] }, []int{http.StatusForbidden, http.StatusMisdirectedRequest}},
		{"localhost Host", good, func(r *http.Request) { r.Host = "localhost:" + strings.Split(c.Addr(), ":")[1] }, []int{http.StatusForbidden, http.StatusMisdirectedRequest}},
	} {
		code, _ := post(t, cl, c, approve, tc.form, tc.edit)
		found := false
		for _, w := range tc.wants {
			found = found || code == w
		}
		if !found {
			t.Errorf("%s: POST approve = %d, want one of %v", tc.name, code, tc.wants)
		}
		wantPending(t, st, a.ID)
	}

	// A GET to the approve URL changes nothing.
	if code, _ := get(t, cl, c, approve, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET approve = %d, want 405", code)
	}
	wantPending(t, st, a.ID)
	// A wrong Host header gets nothing, not even the login.
	if code, _ := get(t, client(t), c, strings.TrimPrefix(c.LoginURL(), "http://"+c.Addr()), func(r *http.Request) { r.Host = "rebind.example" }); code != http.StatusMisdirectedRequest {
		t.Errorf("GET login with a foreign Host = %d, want 421", code)
	}

	// Forged and unknown ids and verbs are refused with a status, never a crash.
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/approvals/apr_000000000000000000000000/approve", http.StatusNotFound},
		{"/approvals/apr_%3Cscript%3E/approve", http.StatusNotFound},
		{"/approvals/" + strings.Repeat("x", 2000) + "/deny", http.StatusNotFound},
		{"/approvals/" + a.ID + "/revoke", http.StatusNotFound},
		{"/approvals/" + a.ID + "/approve/extra", http.StatusNotFound},
	} {
		code, body := post(t, cl, c, tc.path, good, nil)
		if code != tc.want {
			t.Errorf("POST %.60s = %d, want %d", tc.path, code, tc.want)
		}
		if strings.Contains(body, "<script>") {
			t.Errorf("POST %.60s reflects markup unescaped", tc.path)
		}
	}
	wantPending(t, st, a.ID)

	// The real thing works once; replaying it is a typed refusal.
	if code, _ := post(t, cl, c, approve, good, nil); code != http.StatusSeeOther {
		t.Fatalf("POST approve = %d, want 303", code)
	}
	got, err := st.Approval(context.Background(), a.ID)
	if err != nil || got.State != store.ApprovalApproved || got.DecidedBy != DecidedBy {
		t.Fatalf("after approve: %+v, %v; want approved by %s", got, err, DecidedBy)
	}
	for _, path := range []string{approve, "/approvals/" + a.ID + "/deny"} {
		code, body := post(t, cl, c, path, good, nil)
		if code != http.StatusConflict || !strings.Contains(body, "approval "+a.ID+" is already approved") {
			t.Errorf("replayed POST %s = %d, want 409 naming the state", path, code)
		}
	}
	if _, err := st.ConsumeApproval(context.Background(), a.Workload, a.Digest); err != nil {
		t.Fatalf("ConsumeApproval = %v", err)
	}
	if code, body := post(t, cl, c, approve, good, nil); code != http.StatusConflict || !strings.Contains(body, "already consumed") {
		t.Errorf("POST approve after consume = %d, want 409 already consumed", code)
	}
}

func TestConsoleShowsReceipts(t *testing.T) {
	st := openStore(t)
	rc := crossing.Receipt{Time: time.Now(), Identity: crossing.Identity{Workload: "wl", SandboxID: "sb-1"}, Broker: "tool",
		Action: "tool.call", Target: "fs/<b>write</b>", Decision: crossing.Allow, Reason: "approved", Approval: "apr_0123456789abcdef01234567"}
	if _, err := st.RecordReceipt(context.Background(), rc); err != nil {
		t.Fatalf("RecordReceipt = %v", err)
	}
	c := startConsole(t, st)
	cl := client(t)
	login(t, c, cl)
	_, body := get(t, cl, c, "/", nil)
	for _, want := range []string{"apr_0123456789abcdef01234567", "fs/&lt;b&gt;write&lt;/b&gt;", "wl", "approved", ">tool<", ">allow<"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "<b>write") {
		t.Errorf("receipt target rendered as markup")
	}
}

func wantPending(t *testing.T, st *store.Store, id string) {
	t.Helper()
	a, err := st.Approval(context.Background(), id)
	if err != nil || a.State != store.ApprovalPending {
		t.Fatalf("approval %s: state %q, %v; want still pending", id, a.State, err)
	}
}

func TestConsoleLogout(t *testing.T) {
	st := openStore(t)
	c := startConsole(t, st)
	cl := client(t)
	csrf := login(t, c, cl)
	if code, _ := post(t, cl, c, "/logout", url.Values{}, nil); code != http.StatusForbidden {
		t.Errorf("POST logout without CSRF = %d, want 403", code)
	}
	if code, _ := post(t, cl, c, "/logout", url.Values{csrfField: {csrf}}, nil); code != http.StatusOK {
		t.Errorf("POST logout = %d, want 200", code)
	}
	if code, _ := get(t, cl, c, "/", nil); code != http.StatusUnauthorized {
		t.Errorf("GET / after logout = %d, want 401", code)
	}
}

// The console decides approvals of every action, not only tool calls:
// a state write and an egress connection are listed with their action,
// target and exact request, and approved like a tool call.
func TestConsoleDecidesEveryAction(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	var ids []string
	for i, a := range []store.Approval{
		{Action: "state.write", Target: "notes/a", Arguments: json.RawMessage(`{"operation":"put","key":"notes/a","value":"v"}`)},
		{Action: "egress.connect", Target: "api.example.com", Arguments: json.RawMessage(`{"host":"api.example.com","port":443}`)},
		{Action: "model.invoke", Target: "claude-x", Arguments: json.RawMessage(`{"model":"claude-x","request_digest":"sha256:00"}`)},
	} {
		a.Workload, a.SandboxID = "wl", "sb"
		sum := sha256.Sum256([]byte{byte(i)})
		a.Digest = "sha256:" + hex.EncodeToString(sum[:])
		got, err := st.RequestApproval(ctx, a, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
	}
	c := startConsole(t, st)
	cl := client(t)
	csrf := login(t, c, cl)
	code, body := get(t, cl, c, "/", nil)
	for _, want := range []string{"state.write", "notes/a", "egress.connect", "api.example.com", "model.invoke", "claude-x"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET / = %d, does not show %q", code, want)
		}
	}
	for _, id := range ids {
		if code, _ := post(t, cl, c, "/approvals/"+id+"/approve", url.Values{csrfField: {csrf}}, nil); code != http.StatusSeeOther && code != http.StatusOK {
			t.Fatalf("approve %s = %d", id, code)
		}
		if a, _ := st.Approval(ctx, id); a.State != store.ApprovalApproved || a.DecidedBy != "console" {
			t.Fatalf("after the console approved it: %+v", a)
		}
	}
}
