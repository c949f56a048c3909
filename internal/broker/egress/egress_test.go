package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/google/go-cmp/cmp"
)

// testBroker builds a Broker whose resolver and dialer fail the test
// unless the options replace them.
func testBroker(t *testing.T, o Options) (*Broker, *fakeAuthority) {
	t.Helper()
	l, _ := o.Authority.(*fakeAuthority)
	if l == nil {
		l = newFakeAuthority(crossing.Amount{})
		o.Authority = l
	}
	if o.Resolver == nil {
		o.Resolver = &fakeResolver{t: t}
	}
	if o.Dialer == nil {
		o.Dialer = (&recordingDialer{t: t}).dial
	}
	b, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b, l
}

func realDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func TestNewValidates(t *testing.T) {
	l := newFakeAuthority(crossing.Amount{})
	for name, o := range map[string]Options{
		"no authority":  {},
		"bad rule":      {Authority: l, Allow: []Rule{{Host: "10.0.0.1"}}},
		"bad resolve":   {Authority: l, Resolve: map[string][]netip.Addr{"127.1": addrs("127.0.0.1")}},
		"invalid addr":  {Authority: l, Resolve: map[string][]netip.Addr{"a.example": {{}}}},
		"negative idle": {Authority: l, IdleTimeout: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%s) = nil error, want an error", name)
		}
	}
}

func TestConnectTLSEndToEnd(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.Host)
	}))
	defer ts.Close()
	d := &recordingDialer{t: t, target: ts.Listener.Addr().String()}
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "api.example.com"}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Dialer:            d.dial,
	})
	proxy := startProxy(t, b)
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
		TLSClientConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://api.example.com/x")
	if err != nil {
		t.Fatalf("GET through proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if string(body) != "hello api.example.com" {
		t.Errorf("body = %q, want %q", body, "hello api.example.com")
	}
	rc := l.receipt(t)
	if rc.Decision != crossing.Allow || rc.Reason != "" || rc.Action != "connect" || rc.Target != "api.example.com:443" || rc.Broker != "egress" {
		t.Errorf("receipt = %+v, want allow connect api.example.com:443", rc)
	}
	if rc.BytesIn == 0 || rc.BytesOut == 0 || rc.Usage != (crossing.Amount{Connections: 1, EgressBytes: rc.BytesIn + rc.BytesOut}) {
		t.Errorf("receipt bytes in %d out %d usage %+v", rc.BytesIn, rc.BytesOut, rc.Usage)
	}
	if diff := cmp.Diff(testID, rc.Identity); diff != "" {
		t.Errorf("receipt identity (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:443"}, d.dialed()); diff != "" {
		t.Errorf("dialed (-want +got):\n%s", diff)
	}
	if n := l.outstanding(); n != 0 {
		t.Errorf("%d reservations outstanding after close, want 0", n)
	}
	if u := l.used(); u.Connections != 1 || u.EgressBytes != rc.Usage.EgressBytes {
		t.Errorf("authority used %+v, want the receipt's usage %+v", u, rc.Usage)
	}
}

func TestConnectPlainPort(t *testing.T) {
	echo, port := echoServer(t)
	d := &recordingDialer{t: t, target: echo}
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "*.example.com", Ports: []int{port}}},
		Resolve:           map[string][]netip.Addr{"db.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Dialer:            d.dial,
	})
	proxy := startProxy(t, b)
	resp, c := connect(t, proxy, "DB.Example.com.:"+strconv.Itoa(port))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d, want 200", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q, %v", buf, err)
	}
	c.Close()
	rc := l.receipt(t)
	if rc.Decision != crossing.Allow || rc.Target != "db.example.com:"+strconv.Itoa(port) || rc.BytesIn != 4 || rc.BytesOut != 4 {
		t.Errorf("receipt = %+v", rc)
	}
	if want := []string{"127.0.0.1:" + strconv.Itoa(port)}; !cmp.Equal(want, d.dialed()) {
		t.Errorf("dialed %v, want %v", d.dialed(), want)
	}
}

func connectReq(authority string) *http.Request {
	return &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: authority}, Host: authority,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
}

func getReq(target string, mod func(*http.Request)) func() *http.Request {
	return func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if mod != nil {
			mod(r)
		}
		return r
	}
}

// TestRefusals: every refusal answers with its status and reason, dials
// nothing, resolves only what the allowlist allows, records a deny
// receipt and leaves no reservation held.
func TestRefusals(t *testing.T) {
	conn := func(a string) func() *http.Request { return func() *http.Request { return connectReq(a) } }
	resolveTo := func(a ...string) func(*Options, *fakeResolver) {
		return func(_ *Options, r *fakeResolver) { r.answers = [][]netip.Addr{addrs(a...)} }
	}
	tests := []struct {
		name      string
		req       func() *http.Request
		setup     func(*Options, *fakeResolver)
		authority func(*fakeAuthority)
		noID      bool
		status    int
		reason    string
		lookups   int
	}{
		{name: "no identity", req: conn("api.example.com:443"), noID: true, status: 500, reason: ReasonNoIdentity},
		{name: "host not allowed", req: conn("evil.example.net:443"), status: 403, reason: ReasonHostNotAllowed},
		{name: "wildcard excludes apex", req: conn("example.org:443"), status: 403, reason: ReasonHostNotAllowed},
		{name: "suffix is not a subdomain", req: conn("badexample.org:443"), status: 403, reason: ReasonHostNotAllowed},
		{name: "port not allowed", req: conn("api.example.com:8443"), status: 403, reason: ReasonPortNotAllowed},
		{name: "default port is 443 only", req: conn("api.example.com:80"), status: 403, reason: ReasonPortNotAllowed},
		{name: "ipv4 literal", req: conn("127.0.0.1:443"), status: 403, reason: ReasonIPLiteral},
		{name: "metadata literal", req: conn("169.254.169.254:80"), status: 403, reason: ReasonIPLiteral},
		{name: "ipv6 literal", req: conn("[::1]:443"), status: 403, reason: ReasonIPLiteral},
		{name: "bare ipv6 literal", req: conn("::1:443"), status: 403, reason: ReasonIPLiteral},
		{name: "mapped literal", req: conn("[::ffff:127.0.0.1]:443"), status: 403, reason: ReasonIPLiteral},
		{name: "decimal literal", req: conn("2130706433:443"), status: 403, reason: ReasonIPLiteral},
		{name: "hex literal", req: conn("0x7f.1:443"), status: 403, reason: ReasonIPLiteral},
		{name: "short literal", req: conn("127.1:443"), status: 403, reason: ReasonIPLiteral},
		{name: "octal literal", req: conn("0177.0.0.1:443"), status: 403, reason: ReasonIPLiteral},
		{name: "trailing dot literal", req: conn("127.0.0.1.:443"), status: 403, reason: ReasonIPLiteral},
		{name: "non-ascii host", req: conn("bücher.example.org:443"), status: 400, reason: ReasonBadHost},
		{name: "percent host", req: conn("ex%41mple.org:443"), status: 400, reason: ReasonBadHost},
		{name: "no port", req: conn("api.example.com"), status: 400, reason: ReasonBadRequest},
		{name: "signed port", req: conn("api.example.com:+443"), status: 400, reason: ReasonBadRequest},
		{name: "http2 connect", req: func() *http.Request { r := connectReq("api.example.com:443"); r.ProtoMajor = 2; return r }, status: 400, reason: ReasonBadRequest},
		{name: "loopback without unsafe", req: conn("api.example.com:443"), setup: resolveTo("127.0.0.1"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "metadata address", req: conn("api.example.com:443"), setup: resolveTo("169.254.169.254"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "mapped loopback", req: conn("api.example.com:443"), setup: resolveTo("::ffff:127.0.0.1"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "nat64 loopback", req: conn("api.example.com:443"), setup: resolveTo("64:ff9b::7f00:1"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "6to4 loopback", req: conn("api.example.com:443"), setup: resolveTo("2002:7f00:1::"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "ipv6 loopback", req: conn("api.example.com:443"), setup: resolveTo("::1"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "private", req: conn("api.example.com:443"), setup: resolveTo("10.0.0.7"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "mixed answer", req: conn("api.example.com:443"), setup: resolveTo("93.184.216.34", "192.168.0.1"), status: 403, reason: ReasonAddressDenied, lookups: 1},
		{name: "static loopback without unsafe", req: conn("api.example.com:443"), setup: func(o *Options, _ *fakeResolver) {
			o.Resolve = map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")}
		}, status: 403, reason: ReasonAddressDenied},
		{name: "resolve failure", req: conn("api.example.com:443"), setup: func(_ *Options, r *fakeResolver) { r.err = errors.New("no such host") }, status: 403, reason: ReasonResolveFailed, lookups: 1},
		{name: "empty answer", req: conn("api.example.com:443"), setup: func(_ *Options, r *fakeResolver) { r.answers = [][]netip.Addr{nil} }, status: 403, reason: ReasonResolveFailed, lookups: 1},
		{name: "connection budget", req: conn("api.example.com:443"), setup: resolveTo("93.184.216.34"), authority: func(l *fakeAuthority) {
			l.limits.Connections, l.settled.Connections = 3, 3
		}, status: 403, reason: ReasonBudgetExceeded, lookups: 1},
		{name: "authority unavailable", req: conn("api.example.com:443"), setup: resolveTo("93.184.216.34"), authority: func(l *fakeAuthority) {
			l.fail = fmt.Errorf("open store: %w", crossing.ErrUnavailable)
		}, status: 503, reason: ReasonAuthorityUnavailable, lookups: 1},
		{name: "connection limit", req: conn("api.example.com:443"), setup: func(o *Options, _ *fakeResolver) { o.MaxConnections = 1 }, status: 403, reason: ReasonConnectionLimit},
		{name: "origin form", req: getReq("/path", nil), status: 400, reason: ReasonBadRequest},
		{name: "https absolute form", req: getReq("https://api.example.com/", nil), status: 400, reason: ReasonBadRequest},
		{name: "userinfo", req: getReq("http://u:p@api.example.com/", nil), status: 400, reason: ReasonBadRequest},
		{name: "host mismatch", req: getReq("http://api.example.com/", func(r *http.Request) { r.Host = "evil.example.net" }), status: 400, reason: ReasonHostMismatch},
		{name: "host header mismatch", req: getReq("http://api.example.com/", func(r *http.Request) { r.Header.Set("Host", "evil.example.net") }), status: 400, reason: ReasonHostMismatch},
		{name: "host port mismatch", req: getReq("http://api.example.com/", func(r *http.Request) { r.Host = "api.example.com:8080" }), status: 400, reason: ReasonHostMismatch},
		{name: "absolute ip literal", req: getReq("http://169.254.169.254/latest/meta-data/", nil), status: 403, reason: ReasonIPLiteral},
		{name: "absolute not allowed", req: getReq("http://evil.example.net/", nil), status: 403, reason: ReasonHostNotAllowed},
		{name: "absolute port 80 not listed", req: getReq("http://api.example.com/", nil), status: 403, reason: ReasonPortNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &fakeResolver{t: t}
			l := newFakeAuthority(crossing.Amount{})
			o := Options{
				Allow:     []Rule{{Host: "api.example.com"}, {Host: "*.example.org"}},
				Resolver:  res,
				Authority: l,
			}
			if tt.setup != nil {
				tt.setup(&o, res)
			}
			if tt.authority != nil {
				tt.authority(l)
			}
			b, _ := testBroker(t, o)
			if o.MaxConnections > 0 {
				b.active[testID.Workload] = o.MaxConnections
			}
			r := tt.req()
			if !tt.noID {
				r = r.WithContext(crossing.WithIdentity(context.Background(), testID))
			}
			w := httptest.NewRecorder()
			b.ServeHTTP(w, r)
			if w.Code != tt.status || w.Header().Get("X-Cordon-Reason") != tt.reason {
				t.Errorf("ServeHTTP(%s %s) = %d %q, want %d %q", r.Method, r.URL, w.Code, w.Header().Get("X-Cordon-Reason"), tt.status, tt.reason)
			}
			if !strings.Contains(w.Body.String(), tt.reason) {
				t.Errorf("body %q does not name the reason", w.Body.String())
			}
			if n := res.callCount(); n != tt.lookups {
				t.Errorf("resolver called %d times (%v), want %d", n, res.calls, tt.lookups)
			}
			if tt.noID {
				select {
				case rc := <-l.receipts:
					t.Errorf("receipt %+v without identity", rc)
				default:
				}
			} else if rc := l.receipt(t); rc.Decision != crossing.Deny || rc.Reason != tt.reason {
				t.Errorf("receipt %s/%s, want deny/%s", rc.Decision, rc.Reason, tt.reason)
			}
			if n := l.outstanding(); n != 0 {
				t.Errorf("%d reservations outstanding, want 0", n)
			}
		})
	}
}

// TestRebinding: the name is resolved once and the dial goes to the
// address that was checked, whatever the resolver says afterwards.
func TestRebinding(t *testing.T) {
	echo, port := echoServer(t)
	res := &fakeResolver{t: t, answers: [][]netip.Addr{addrs("93.184.216.34"), addrs("127.0.0.1")}}
	d := &recordingDialer{t: t, target: echo}
	b, l := testBroker(t, Options{Allow: []Rule{{Host: "api.example.com", Ports: []int{port}}}, Resolver: res, Dialer: d.dial})
	proxy := startProxy(t, b)
	target := "api.example.com:" + strconv.Itoa(port)

	resp, c := connect(t, proxy, target)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d, want 200", resp.StatusCode)
	}
	io.WriteString(c, "x")
	io.ReadFull(c, make([]byte, 1))
	c.Close()
	l.receipt(t)
	want := []string{"93.184.216.34:" + strconv.Itoa(port)}
	if got := d.dialed(); !cmp.Equal(want, got) {
		t.Errorf("dialed %v, want only the checked address %v", got, want)
	}
	if n := res.callCount(); n != 1 {
		t.Errorf("resolver called %d times for one connection, want 1", n)
	}

	resp, _ = connect(t, proxy, target)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Cordon-Reason") != ReasonAddressDenied {
		t.Errorf("rebound CONNECT = %d %q, want 403 %q", resp.StatusCode, resp.Header.Get("X-Cordon-Reason"), ReasonAddressDenied)
	}
	if got := d.dialed(); len(got) != 1 {
		t.Errorf("dialed %v after the rebound answer, want no new dial", got)
	}
}

// TestClientHelloChecks: on port 443 nothing is dialed until a ClientHello
// names the CONNECT host.
func TestClientHelloChecks(t *testing.T) {
	tests := []struct {
		name   string
		send   func(net.Conn)
		reason string
	}{
		{"sni mismatch", func(c net.Conn) {
			tls.Client(c, &tls.Config{ServerName: "other.example.com", InsecureSkipVerify: true}).Handshake()
		}, ReasonSNIMismatch},
		{"no sni", func(c net.Conn) {
			tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		}, ReasonSNIMissing},
		{"not tls", func(c net.Conn) {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
			io.Copy(io.Discard, c)
		}, ReasonClientHelloInvalid},
		{"silent client", func(c net.Conn) { io.Copy(io.Discard, c) }, ReasonClientHelloTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, l := testBroker(t, Options{
				Allow:          []Rule{{Host: "api.example.com"}},
				Resolve:        map[string][]netip.Addr{"api.example.com": addrs("93.184.216.34")},
				ConnectTimeout: 200 * time.Millisecond,
			})
			proxy := startProxy(t, b)
			resp, c := connect(t, proxy, "api.example.com:443")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT = %d, want 200", resp.StatusCode)
			}
			start := time.Now()
			tt.send(c)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("connection closed after %v", d)
			}
			rc := l.receipt(t)
			if rc.Decision != crossing.Deny || rc.Reason != tt.reason {
				t.Errorf("receipt %s/%s, want deny/%s", rc.Decision, rc.Reason, tt.reason)
			}
			if n := l.outstanding(); n != 0 {
				t.Errorf("%d reservations outstanding, want 0 (settled)", n)
			}
			if u := l.used(); u.Connections != 0 {
				t.Errorf("used %+v for a connection never made", u)
			}
		})
	}
}

func TestByteBudgetCut(t *testing.T) {
	const limit = 300 << 10
	src, port := sourceServer(t, 4<<20)
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "api.example.com", Ports: []int{port}}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Authority:         newFakeAuthority(crossing.Amount{EgressBytes: limit}),
		Dialer:            (&recordingDialer{t: t, target: src}).dial,
	})
	proxy := startProxy(t, b)
	resp, c := connect(t, proxy, "api.example.com:"+strconv.Itoa(port))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d, want 200", resp.StatusCode)
	}
	n, _ := io.Copy(io.Discard, c)
	if n == 0 || n > limit {
		t.Errorf("read %d bytes through a %d byte budget", n, limit)
	}
	rc := l.receipt(t)
	if rc.Decision != crossing.Allow || rc.Reason != ReasonBudgetExceeded || rc.BytesOut != n {
		t.Errorf("receipt %s/%s out %d, want allow/%s out %d", rc.Decision, rc.Reason, rc.BytesOut, ReasonBudgetExceeded, n)
	}
	if u := l.used(); u.EgressBytes > limit || u.EgressBytes != rc.Usage.EgressBytes {
		t.Errorf("authority used %d egress bytes (receipt %d), limit %d", u.EgressBytes, rc.Usage.EgressBytes, limit)
	}
	if k := l.outstanding(); k != 0 {
		t.Errorf("%d reservations outstanding, want 0", k)
	}
}

func TestIdle(t *testing.T) {
	echo, port := echoServer(t)
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "api.example.com", Ports: []int{port}}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Dialer:            (&recordingDialer{t: t, target: echo}).dial,
		IdleTimeout:       time.Second,
	})
	proxy := startProxy(t, b)
	resp, c := connect(t, proxy, "api.example.com:"+strconv.Itoa(port))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d, want 200", resp.StatusCode)
	}
	// A trickle (a byte every 100ms) lasting longer than the idle
	// timeout is activity, not idleness.
	buf := make([]byte, 1)
	for i := 0; i < 15; i++ {
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatalf("trickle write %d: %v", i, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("trickle read %d: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if _, err := c.Read(buf); err == nil {
		t.Fatalf("read from an idle tunnel succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("idle tunnel cut after %v, want about 1s", d)
	}
	if rc := l.receipt(t); rc.Reason != ReasonIdleTimeout || rc.BytesIn != 15 || rc.BytesOut != 15 {
		t.Errorf("receipt %s/%s in %d out %d, want allow/%s 15/15", rc.Decision, rc.Reason, rc.BytesIn, rc.BytesOut, ReasonIdleTimeout)
	}
}

func TestForward(t *testing.T) {
	type seen struct{ host, proxyAuth, hop string }
	got := make(chan seen, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Hop")}
		w.Header().Set("X-Cordon-Reason", "forged")
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "api.example.com", Ports: []int{port}}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Dialer:            realDialer,
	})
	proxy := startProxy(t, b)
	authority := "api.example.com:" + strconv.Itoa(port)

	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://"+authority+"/path", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("X-Cordon-Reason") != "" {
		t.Errorf("response %d %q reason %q, want 200 \"ok\" and no forged reason", resp.StatusCode, body, resp.Header.Get("X-Cordon-Reason"))
	}
	if s := <-got; s != (seen{host: authority}) {
		t.Errorf("upstream saw %+v, want host %q and no proxy or hop headers", s, authority)
	}
	rc := l.receipt(t)
	if rc.Decision != crossing.Allow || rc.Action != "http" || rc.UpstreamCode != 200 || rc.Usage.Connections != 1 || rc.BytesIn == 0 || rc.BytesOut == 0 {
		t.Errorf("receipt %+v", rc)
	}

	// On the wire, a Host header naming another site cannot front: the
	// request URI's authority is what reaches the upstream.
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: evil.example.net\r\nConnection: close\r\n\r\n", authority)
	resp, err = http.ReadResponse(bufioReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := <-got; s.host != authority {
		t.Errorf("upstream saw Host %q, want %q", s.host, authority)
	}
	// The crossing is settled, then receipted, after its response: wait
	// for the receipt before counting what is still held.
	l.receipt(t)
	if n := l.outstanding(); n != 0 {
		t.Errorf("%d reservations outstanding", n)
	}
}

func TestForwardByteBudget(t *testing.T) {
	const limit = 64 << 10
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1<<20))
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	b, l := testBroker(t, Options{
		Allow:             []Rule{{Host: "api.example.com", Ports: []int{port}}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Dialer:            realDialer,
		Authority:         newFakeAuthority(crossing.Amount{EgressBytes: limit}),
	})
	proxy := startProxy(t, b)
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://api.example.com:" + strconv.Itoa(port) + "/")
	var n int64
	if err == nil {
		n, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n >= 1<<20 {
		t.Errorf("read the whole body through a %d byte budget", limit)
	}
	rc := l.receipt(t)
	if rc.Reason != ReasonBudgetExceeded || rc.Usage.EgressBytes > limit {
		t.Errorf("receipt %s/%s usage %+v, want %s within %d", rc.Decision, rc.Reason, rc.Usage, ReasonBudgetExceeded, limit)
	}
	if k := l.outstanding(); k != 0 {
		t.Errorf("%d reservations outstanding", k)
	}
}
