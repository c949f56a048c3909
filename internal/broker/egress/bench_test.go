package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

const mib = 1 << 20

// benchProxy serves a Broker allowing api.example.com on port (and 443),
// resolving to loopback, with an in-memory authority and a dialer that sends
// port 443 to tlsAddr.
func benchProxy(b *testing.B, port int, tlsAddr string) string {
	b.Helper()
	dial := realDialer
	if tlsAddr != "" {
		dial = (&recordingDialer{t: b, target: tlsAddr}).dial
	}
	br, err := New(Options{
		Allow:             []Rule{{Host: "api.example.com", Ports: []int{443, port}}},
		Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
		UnsafeAllowRanges: []netip.Prefix{loopback},
		Authority:         &benchAuthority{},
		Dialer:            dial,
	})
	if err != nil {
		b.Fatal(err)
	}
	return startProxy(b, br)
}

// benchAuthority is an Authority that never refuses and does not remember.
type benchAuthority struct{}

func (*benchAuthority) Reserve(_ context.Context, _ crossing.Identity, _ string, want crossing.Amount, _ int64) (crossing.Reservation, crossing.BudgetState, error) {
	return crossing.Reservation{Held: want}, crossing.BudgetState{}, nil
}
func (*benchAuthority) Settle(context.Context, crossing.Reservation, crossing.Amount) (crossing.BudgetState, error) {
	return crossing.BudgetState{}, nil
}
func (*benchAuthority) Record(context.Context, crossing.Receipt) error { return nil }

func readAll(b *testing.B, c net.Conn, r io.Reader, want int64) {
	n, err := io.Copy(io.Discard, r)
	c.Close()
	if err != nil || n != want {
		b.Fatalf("read %d bytes, %v; want %d", n, err, want)
	}
}

// BenchmarkConnect1MiB: one connection per op, 1 MiB from the upstream to
// the client, directly and through a CONNECT tunnel (plain port: splice
// path) and, with TLS, through the port-443 path with its SNI check.
func BenchmarkConnect1MiB(b *testing.B) {
	src, port := sourceServer(b, mib)
	proxy := benchProxy(b, port, "")
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(mib)
		for b.Loop() {
			c, err := net.Dial("tcp", src)
			if err != nil {
				b.Fatal(err)
			}
			readAll(b, c, c, mib)
		}
	})
	b.Run("proxy", func(b *testing.B) {
		b.SetBytes(mib)
		req := []byte(fmt.Sprintf("CONNECT api.example.com:%d HTTP/1.1\r\nHost: api.example.com\r\n\r\n", port))
		for b.Loop() {
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				b.Fatal(err)
			}
			c.Write(req)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			readAll(b, c, br, mib)
		}
	})

	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, mib))
	}))
	b.Cleanup(ts.Close)
	tlsProxy := benchProxy(b, port, ts.Listener.Addr().String())
	get := func(b *testing.B, tr *http.Transport, u string) {
		b.SetBytes(mib)
		defer tr.CloseIdleConnections()
		for b.Loop() {
			resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, u, nil).WithContext(b.Context()))
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != mib {
				b.Fatalf("read %d bytes", n)
			}
		}
	}
	tlsConf := ts.Client().Transport.(*http.Transport).TLSClientConfig
	b.Run("direct-tls", func(b *testing.B) {
		get(b, &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlsConf.Clone()},
			"https://"+ts.Listener.Addr().String()+"/")
	})
	b.Run("proxy-tls", func(b *testing.B) {
		get(b, &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlsConf.Clone(),
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: tlsProxy})}, "https://api.example.com/")
	})
}

// BenchmarkConnectSetup: CONNECT, one byte each way, close — the fixed
// cost the proxy adds to a connection.
func BenchmarkConnectSetup(b *testing.B) {
	echo, port := echoServer(b)
	proxy := benchProxy(b, port, "")
	one := make([]byte, 1)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", echo)
			if err != nil {
				b.Fatal(err)
			}
			c.Write(one)
			io.ReadFull(c, one)
			c.Close()
		}
	})
	b.Run("proxy", func(b *testing.B) {
		req := []byte("CONNECT api.example.com:" + strconv.Itoa(port) + " HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		for b.Loop() {
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				b.Fatal(err)
			}
			c.Write(req)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			c.Write(one)
			if _, err := io.ReadFull(br, one); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
