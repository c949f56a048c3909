package egress

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// A proxied HTTP response is relayed as it arrives, so its bytes go before
// its receipt can be written; when the receipt cannot be recorded the
// response's end is withheld: the connection drops without the chunked
// encoding's last chunk and the client reads a truncated body, not a
// complete one. The crossing is still charged. The control is the same
// response over a working log: complete, and receipted.
func TestForwardReceiptRefusedTruncates(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part one;")
		w.(http.Flusher).Flush() // chunked: no Content-Length
		io.WriteString(w, "part two")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	for _, refuse := range []bool{false, true} {
		name := "log works (control)"
		if refuse {
			name = "log refuses appends"
		}
		t.Run(name, func(t *testing.T) {
			b, l := testBroker(t, Options{
				Allow:             []Rule{{Host: "api.example.com", Ports: []int{port}}},
				Resolve:           map[string][]netip.Addr{"api.example.com": addrs("127.0.0.1")},
				UnsafeAllowRanges: []netip.Prefix{loopback},
				Dialer:            realDialer,
			})
			l.refuse = refuse
			proxy := startProxy(t, b)
			tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "http://api.example.com:"+strconv.Itoa(port)+"/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !refuse {
				if err != nil || string(body) != "part one;part two" {
					t.Fatalf("control: body %q, %v; want the whole response", body, err)
				}
				if rc := l.receipt(t); rc.Decision != crossing.Allow {
					t.Errorf("control: receipt %s", rc.Decision)
				}
			} else if err == nil {
				t.Fatalf("body %q read to a clean end, want a truncated response (no receipt)", body)
			}
			for deadline := time.Now().Add(5 * time.Second); l.outstanding() != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d reservations still held", l.outstanding())
				}
			}
			if u := l.used(); u.Connections != 1 || u.EgressBytes == 0 {
				t.Errorf("charged %+v, want the connection and its bytes", u)
			}
		})
	}
}
