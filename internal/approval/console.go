package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// DecidedBy is what the console records as the decider of an approval.
const DecidedBy = "console"

const (
	// DefaultListen is the console's listen address when none is given.
	DefaultListen = "127.0.0.1:0"
	// DefaultSessionTTL bounds a browser session after login.
	DefaultSessionTTL = 12 * time.Hour

	cookieName   = "cordon_console"
	csrfField    = "csrf"
	maxSessions  = 32
	maxFormBytes = 4 << 10
	// receiptsShown and decidedShown bound the page.
	receiptsShown = 50
	decidedShown  = 20
	pendingShown  = 200
)

//go:embed console.html
var pageSource string

//go:embed console.css
var styleSheet []byte

var page = template.Must(template.New("console").Funcs(template.FuncMap{
	"json": func(raw []byte) string { return DisplayJSON(raw) },
	"text": DisplayText,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return ExpiresText(t)
	},
}).Parse(pageSource))

// securityHeaders go on every response. The pages are plain HTML forms:
// no script runs, no frame may embed them, nothing is cached, and no
// referrer leaves the console's origin.
//
// Referrer-Policy is same-origin, not no-referrer: under no-referrer a
// browser sends "Origin: null" even on a same-origin form POST (Fetch,
// "serializing a request origin"), which would defeat the origin check.
// same-origin sends nothing to any other origin, and the CSP leaves a page
// nothing to fetch from one anyway. /login answers with no-referrer so the
// token's URL is not even sent back to the console.
var securityHeaders = map[string]string{
	"Content-Security-Policy":      "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":              "DENY",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "same-origin",
	"Cache-Control":                "no-store",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

// ErrNotLoopback: the console was asked to listen on an address other
// hosts, or other network namespaces, could reach.
var ErrNotLoopback = errors.New("console: listen address must be a loopback IP address")

// ConsoleOptions configure a Console.
type ConsoleOptions struct {
	// Listen is a loopback "ip:port" (127.0.0.0/8 or ::1); port 0 picks a
	// free one. Empty means DefaultListen. Host names are refused.
	Listen string
	// SessionTTL bounds a session; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// Logger receives one line per decision; nil discards.
	Logger *slog.Logger
}

// ConsoleStore is the slice of the store the console uses; *store.Store
// implements it. Approvals lists approvals oldest first (the newest Limit
// when set), reporting expired ones as store.ApprovalExpired.
// DecideApproval approves or denies one pending, unexpired approval,
// recording who decided, in one transaction; an unknown id fails with
// store.ErrApprovalNotFound and an approval in any other state with
// store.ErrApprovalDecided (errors.Is). Receipts lists receipts oldest
// first (the newest Limit when set). The console never requests,
// consumes or revokes an approval, and writes nothing else.
type ConsoleStore interface {
	Approvals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error)
	DecideApproval(ctx context.Context, id string, approve bool, by string) (store.Approval, error)
	Receipts(ctx context.Context, f store.ReceiptFilter) ([]crossing.Receipt, error)
}

var _ ConsoleStore = (*store.Store)(nil)

// Console is the approval web console. Create it with NewConsole, run it
// with Serve, and give the operator LoginURL.
type Console struct {
	st       ConsoleStore
	ln       net.Listener
	host     string // the only Host header accepted: the listener's ip:port
	origin   string // "http://" + host
	tokenSum [sha256.Size]byte
	loginURL string
	ttl      time.Duration
	log      *slog.Logger
	srv      *http.Server
	mux      *http.ServeMux

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*session // by SHA-256 of the cookie value
}

type session struct {
	csrf    string
	created time.Time
	expires time.Time
	flash   string // shown once on the next page
}

// NewConsole listens on opts.Listen (loopback only) and generates the
// login token. Nothing is served until Serve.
func NewConsole(st ConsoleStore, opts ConsoleOptions) (*Console, error) {
	if st == nil {
		return nil, errors.New("console: no store")
	}
	listen := opts.Listen
	if listen == "" {
		listen = DefaultListen
	}
	if err := checkLoopback(listen); err != nil {
		return nil, err
	}
	ttl := opts.SessionTTL
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	token, err := randomHex(32)
	if err != nil {
		return nil, fmt.Errorf("console: login token: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w", listen, err)
	}
	host := ln.Addr().String()
	c := &Console{
		st:       st,
		ln:       ln,
		host:     host,
		origin:   "http://" + host,
		tokenSum: sha256.Sum256([]byte(token)),
		loginURL: "http://" + host + "/login?token=" + token,
		ttl:      ttl,
		log:      log,
		sessions: map[[sha256.Size]byte]*session{},
	}
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET /{$}", c.index)
	c.mux.HandleFunc("GET /console.css", c.css)
	c.mux.HandleFunc("POST /approvals/{id}/{verb}", c.decide)
	c.mux.HandleFunc("POST /logout", c.logout)
	c.srv = &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return c, nil
}

// checkLoopback accepts only an IP literal in 127.0.0.0/8 or ::1 with a
// port: a host name could resolve anywhere.
func checkLoopback(listen string) error {
	h, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrNotLoopback, listen, err)
	}
	ip, err := netip.ParseAddr(h)
	if err != nil || ip.Zone() != "" || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("%w: %q (use 127.0.0.1:PORT)", ErrNotLoopback, listen)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("console: listen address %q: bad port", listen)
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Addr is the listener's address, "127.0.0.1:PORT".
func (c *Console) Addr() string { return c.host }

// LoginURL is the URL that logs a browser in. It carries the login token:
// whoever has it can decide approvals until the console stops.
func (c *Console) LoginURL() string { return c.loginURL }

// Serve serves until ctx is done, then shuts down (waiting a few seconds
// for requests in flight).
func (c *Console) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- c.srv.Serve(c.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := c.srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Close stops the console at once.
func (c *Console) Close() error {
	err := c.srv.Close()
	if cerr := c.ln.Close(); err == nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

// ServeHTTP checks, in order: the Host header (DNS rebinding), the login
// token or the session cookie, and for a POST the origin and the CSRF
// token; only then does it route.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	if r.URL.Path == "/login" {
		w.Header().Set("Referrer-Policy", "no-referrer")
	}
	if r.Host != c.host {
		http.Error(w, "misdirected request: this console answers only to "+c.host, http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path == "/login" {
		c.login(w, r)
		return
	}
	sess := c.session(r)
	if sess == nil {
		http.Error(w, "unauthorized: open the login URL printed by `cordon approvals console`", http.StatusUnauthorized)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
	if r.Method == http.MethodPost {
		if why := c.crossOrigin(r); why != "" {
			c.log.Warn("console refused a POST", "path", r.URL.Path, "why", why,
				"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
			http.Error(w, "forbidden: "+why, http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad request: unreadable form", http.StatusBadRequest)
			return
		}
		got := r.PostForm.Get(csrfField)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			http.Error(w, "forbidden: missing or wrong CSRF token; reload the console and try again", http.StatusForbidden)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// crossOrigin says why a POST does not come from a page of this console,
// or "" when it does. Origin must name this console; when a browser sends
// none, Referer must. Fetch metadata, when present, must say same-origin.
func (c *Console) crossOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return "request from another site (" + site + ")"
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o != c.origin {
			return "foreign origin"
		}
		return ""
	}
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil || ref.Scheme != "http" || ref.Host != c.host {
		return "no Origin or Referer from this console"
	}
	return ""
}

// login exchanges the login token for a session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	sum := sha256.Sum256([]byte(r.URL.Query().Get("token")))
	if subtle.ConstantTimeCompare(sum[:], c.tokenSum[:]) != 1 {
		http.Error(w, "unauthorized: wrong or missing login token", http.StatusUnauthorized)
		return
	}
	id, err := randomHex(32)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	csrf, err := randomHex(32)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	now := time.Now()
	c.mu.Lock()
	c.prune(now)
	c.sessions[sha256.Sum256([]byte(id))] = &session{csrf: csrf, created: now, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    id,
		Path:     "/",
		Expires:  now.Add(c.ttl),
		MaxAge:   int(c.ttl / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the request's session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.mu.Lock()
		delete(c.sessions, sha256.Sum256([]byte(ck.Value)))
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "logged out; open the login URL again to come back\n")
}

// prune drops expired sessions and, past maxSessions, the oldest ones.
// c.mu is held.
func (c *Console) prune(now time.Time) {
	for k, s := range c.sessions {
		if !now.Before(s.expires) {
			delete(c.sessions, k)
		}
	}
	for len(c.sessions) >= maxSessions {
		var oldest [sha256.Size]byte
		var t time.Time
		for k, s := range c.sessions {
			if t.IsZero() || s.created.Before(t) {
				oldest, t = k, s.created
			}
		}
		delete(c.sessions, oldest)
	}
}

// sessionKey carries the request's session (a *session) in its context.
type sessionKey struct{}

// csrfOf returns the CSRF token of the request's session.
func csrfOf(r *http.Request) string {
	if s, ok := r.Context().Value(sessionKey{}).(*session); ok {
		return s.csrf
	}
	return ""
}

// session returns the request's live session, or nil. The returned value
// is a copy; use takeFlash and setFlash to change it.
func (c *Console) session(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil || len(ck.Value) != 64 {
		return nil
	}
	key := sha256.Sum256([]byte(ck.Value))
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[key]
	if s == nil {
		return nil
	}
	if !time.Now().Before(s.expires) {
		delete(c.sessions, key)
		return nil
	}
	cp := *s
	return &cp
}

func (c *Console) setFlash(r *http.Request, msg string) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.mu.Lock()
		if s := c.sessions[sha256.Sum256([]byte(ck.Value))]; s != nil {
			s.flash = msg
		}
		c.mu.Unlock()
	}
}

func (c *Console) takeFlash(r *http.Request) string {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[sha256.Sum256([]byte(ck.Value))]
	if s == nil {
		return ""
	}
	msg := s.flash
	s.flash = ""
	return msg
}

// pageData is what console.html renders.
type pageData struct {
	CSRF     string
	Flash    string
	Error    string
	Now      time.Time
	Pending  []store.Approval
	Decided  []store.Approval
	Receipts []crossing.Receipt
}

func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := pageData{CSRF: csrfOf(r), Flash: c.takeFlash(r), Now: time.Now()}
	var err error
	if d.Pending, err = c.st.Approvals(ctx, store.ApprovalFilter{State: store.ApprovalPending, Limit: pendingShown}); err != nil {
		c.fail(w, "list pending approvals", err)
		return
	}
	all, err := c.st.Approvals(ctx, store.ApprovalFilter{Limit: decidedShown + len(d.Pending)})
	if err != nil {
		c.fail(w, "list approvals", err)
		return
	}
	for _, a := range slices.Backward(all) {
		if a.State != store.ApprovalPending && len(d.Decided) < decidedShown {
			d.Decided = append(d.Decided, a)
		}
	}
	rs, err := c.st.Receipts(ctx, store.ReceiptFilter{Limit: receiptsShown})
	if err != nil {
		c.fail(w, "list receipts", err)
		return
	}
	slices.Reverse(rs) // newest first
	d.Receipts = rs
	c.render(w, http.StatusOK, d)
}

func (c *Console) render(w http.ResponseWriter, code int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := page.Execute(w, d); err != nil {
		c.log.Warn("render console page", "err", err)
	}
}

func (c *Console) fail(w http.ResponseWriter, op string, err error) {
	c.log.Warn("console", "op", op, "err", err)
	http.Error(w, "store unavailable: "+op, http.StatusServiceUnavailable)
}

func (c *Console) css(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	_, _ = w.Write(styleSheet)
}

// decide approves or denies one approval. Refusals (an unknown or forged
// id, an approval no longer pending) are answered with the page and a
// 404 or 409; they never change anything.
func (c *Console) decide(w http.ResponseWriter, r *http.Request) {
	id, verb := r.PathValue("id"), r.PathValue("verb")
	var approve bool
	switch verb {
	case "approve":
		approve = true
	case "deny":
	default:
		http.NotFound(w, r)
		return
	}
	a, err := c.st.DecideApproval(r.Context(), id, approve, DecidedBy)
	code := http.StatusOK
	switch {
	case err == nil:
		c.log.Info("approval decided", "approval", a.ID, "decision", a.State, "by", DecidedBy,
			"workload", a.Workload, "target", a.Target, "digest", a.Digest)
		c.setFlash(r, fmt.Sprintf("%s %s (%s %s for %s)", a.State, a.ID, DisplayText(a.Action), DisplayText(a.Target), DisplayText(a.Workload)))
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	case errors.Is(err, store.ErrApprovalNotFound):
		code = http.StatusNotFound
	case errors.Is(err, store.ErrApprovalDecided):
		code = http.StatusConflict
	default:
		c.fail(w, "decide approval", err)
		return
	}
	d := pageData{CSRF: csrfOf(r), Error: err.Error(), Now: time.Now()}
	c.render(w, code, d)
}
