// Command load is the gateway benchmark's client. The same static binary
// runs on the host (direct, or through smokescreen) and inside
// `cordon run` (through the gateway), so every path is measured by the
// same code.
//
// It prints {"ready":true}, then reads one JSON phase per line on stdin,
// runs it and prints one JSON result per line on stdout, until EOF. The
// driver samples the CPU time of the processes under test between a
// phase line and its result line.
//
// Phases:
//
//	{"name":"…","kind":"model","stream":true,"c":1,"dur":"8s","warmup":"1s"}
//	{"name":"…","kind":"egress-latency","c":1,"dur":"5s","warmup":"1s"}
//	{"name":"…","kind":"egress-bulk","c":4,"mib":256,"dur":"5s","warmup":"1s"}
//	{"name":"…","kind":"egress-long","c":1,"mib":64,"dur":"10s"}
//
// model: POST /v1/messages to -model-url in c workers for dur; latency is
// request start to the end of the body, ttfb request start to the first
// body byte (for JSON answers too). egress-latency: a new connection per request (CONNECT when
// proxied, TLS, GET of the 1 MiB -egress-url, read to the end).
// egress-bulk: c workers each downloading /bulk?mib=N on a new connection
// (one CONNECT per body); bytes read by the deadline over the elapsed
// time. egress-long: c kept-alive connections downloading /bulk?mib=N
// back to back for the whole phase (one tunnel each), with the MiB/s of
// every second, to show whether a tunnel slows down as it ages.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/bench/gateway/wire"
)

// The wire types, under this program's names.
type (
	phase  = wire.Phase
	Stats  = wire.Stats
	result = wire.Result
)

var (
	modelURL  = flag.String("model-url", "env", "model base URL; env: $ANTHROPIC_BASE_URL")
	apiKey    = flag.String("key", "env", "x-api-key; env: $ANTHROPIC_API_KEY")
	egressURL = flag.String("egress-url", "", "the 1 MiB file (https://name:port/file)")
	caFile    = flag.String("ca", "", "PEM certificate to trust for -egress-url")
	proxyFlag = flag.String("proxy", "none", "egress proxy: none, env (HTTPS_PROXY) or a URL")
	resolve   = flag.String("resolve", "", "host=ip: dial ip for host (direct runs, like curl --resolve)")
	bodyBytes = flag.Int("body", 4096, "approximate model request body size")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("load: ")
	if *modelURL == "env" {
		*modelURL = os.Getenv("ANTHROPIC_BASE_URL")
	}
	if *apiKey == "env" {
		*apiKey = os.Getenv("ANTHROPIC_API_KEY")
	}
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"ready": true, "model_url": *modelURL, "https_proxy": os.Getenv("HTTPS_PROXY")})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var p phase
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			log.Fatalf("phase %q: %v", sc.Text(), err)
		}
		r, err := run(p)
		if err != nil {
			log.Fatalf("phase %s: %v", p.Name, err)
		}
		out.Encode(r)
	}
}

func run(p phase) (*result, error) {
	dur, err := time.ParseDuration(p.Dur)
	if err != nil {
		return nil, err
	}
	warm := time.Duration(0)
	if p.Warmup != "" {
		if warm, err = time.ParseDuration(p.Warmup); err != nil {
			return nil, err
		}
	}
	if p.C < 1 {
		p.C = 1
	}
	// A phase reuses the client (and its kept-alive connections) of an
	// earlier phase of the same shape: the driver sends a warm-up phase
	// first, then samples CPU, then sends the measured one.
	key := fmt.Sprintf("%s/%v/%d", p.Kind, p.Stream, p.MiB)
	w := workers[key]
	if w == nil {
		switch p.Kind {
		case "model":
			w, err = newModel(p)
		case "egress-latency":
			w, err = newEgress(p, false, false)
		case "egress-bulk":
			w, err = newEgress(p, true, false)
		case "egress-long":
			w, err = newEgress(p, true, true)
		default:
			err = fmt.Errorf("unknown kind %q", p.Kind)
		}
		if err != nil {
			return nil, err
		}
		workers[key] = w
	}
	if warm > 0 {
		drive(w, p.C, warm)
	}
	cpu0 := cpuTime()
	start := time.Now()
	var series []float64
	stopSeries := make(chan struct{})
	seriesDone := make(chan struct{})
	go func() { // bulk MiB/s of every second
		defer close(seriesDone)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		last := bulkBytes.Load()
		for {
			select {
			case <-stopSeries:
				return
			case <-tk.C:
				n := bulkBytes.Load()
				series = append(series, math.Round(float64(n-last)/(1<<20)*10)/10)
				last = n
			}
		}
	}()
	ws := drive(w, p.C, dur)
	end := time.Now()
	close(stopSeries)
	<-seriesDone
	r := &result{Name: p.Name, ElapsedS: end.Sub(start).Seconds(), CPUms: float64(cpuTime()-cpu0) / 1e6,
		Start: start.UnixNano(), End: end.UnixNano()}
	var lat, ttfb []time.Duration
	steps := map[string][]time.Duration{}
	for _, s := range ws {
		lat = append(lat, s.lat...)
		ttfb = append(ttfb, s.ttfb...)
		for k, v := range s.steps {
			steps[k] = append(steps[k], v...)
		}
		r.Errors += s.errors
		r.Bytes += s.bytes.Load()
		if r.FirstError == "" && s.firstErr != nil {
			r.FirstError = s.firstErr.Error()
		}
	}
	r.Requests = len(lat)
	r.RPS = float64(len(lat)) / r.ElapsedS
	r.Latency = stats(lat)
	if len(ttfb) > 0 {
		t := stats(ttfb)
		r.TTFB = &t
	}
	if len(steps) > 0 {
		r.Steps = map[string]Stats{}
		for k, v := range steps {
			r.Steps[k] = stats(v)
		}
	}
	if p.Kind == "egress-bulk" || p.Kind == "egress-long" {
		r.MiBs = float64(r.Bytes) / (1 << 20) / r.ElapsedS
		r.Series = series
	}
	return r, nil
}

var workers = map[string]worker{}

// worker runs one request; it is shared by c goroutines.
type worker interface {
	do(ctx context.Context, s *sample) error
}

type sample struct {
	lat, ttfb []time.Duration
	steps     map[string][]time.Duration
	errors    int
	firstErr  error
	bytes     atomic.Int64
}

// drive runs c goroutines of w for d. A request still running at the
// deadline is abandoned (its context is cancelled) and not counted, except
// for bulk bytes, which count as read.
func drive(w worker, c int, d time.Duration) []*sample {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ss := make([]*sample, c)
	var wg sync.WaitGroup
	for i := range ss {
		s := &sample{lat: make([]time.Duration, 0, 4096), steps: map[string][]time.Duration{}}
		ss[i] = s
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := w.do(ctx, s); err != nil && ctx.Err() == nil {
					s.errors++
					if s.firstErr == nil {
						s.firstErr = err
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return ss
}

// model posts Anthropic Messages requests.
type model struct {
	c      *http.Client
	url    string
	body   []byte
	stream bool
}

func newModel(p phase) (*model, error) {
	if *modelURL == "" || *apiKey == "" {
		return nil, errors.New("no model URL or key")
	}
	tr := &http.Transport{
		Proxy:               nil, // the model base URL is reached directly, as SDKs do
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	// A prompt of about -body bytes, like a small agent turn.
	filler := strings.Repeat("The quick brown fox jumps over the lazy dog. ", max(1, *bodyBytes/45))
	req := map[string]any{
		"model": "claude-bench-1", "max_tokens": 1024, "stream": p.Stream,
		"system":   "You are a coding agent running in a sandbox.",
		"messages": []any{map[string]any{"role": "user", "content": filler}},
	}
	b, _ := json.Marshal(req)
	return &model{c: &http.Client{Transport: tr}, url: strings.TrimSuffix(*modelURL, "/") + "/v1/messages", body: b, stream: p.Stream}, nil
}

var endMarks = [2][]byte{[]byte(`"end_turn"`), []byte("message_stop")}

func (m *model) do(ctx context.Context, s *sample) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(m.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", *apiKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	if m.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	start := time.Now()
	resp, err := m.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [32 << 10]byte
	var tail []byte
	var first, last time.Duration
	for {
		n, err := resp.Body.Read(buf[:])
		if n > 0 {
			last = time.Since(start)
			if first == 0 {
				first = last
			}
			tail = append(tail, buf[:n]...)
			if len(tail) > 256 {
				tail = append(tail[:0], tail[len(tail)-256:]...)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	total := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, tail)
	}
	mark := endMarks[0]
	if m.stream {
		mark = endMarks[1]
	}
	if !bytes.Contains(tail, mark) {
		return fmt.Errorf("answer incomplete: ...%s", tail)
	}
	s.lat = append(s.lat, total)
	s.ttfb = append(s.ttfb, first)
	s.steps["eof_after_last_byte"] = append(s.steps["eof_after_last_byte"], total-last)
	return nil
}

// egress downloads over HTTPS, through a proxy or directly.
type egress struct {
	c    *http.Client
	url  string
	bulk bool
}

// bulkBytes counts every bulk byte read, for the per-second series.
var bulkBytes atomic.Int64

func newEgress(p phase, bulk, keepAlive bool) (*egress, error) {
	if *egressURL == "" || *caFile == "" {
		return nil, errors.New("no -egress-url or -ca")
	}
	pemBytes, err := os.ReadFile(*caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, errors.New("no certificate in -ca")
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		DialContext:         d.DialContext,
		DisableKeepAlives:   !keepAlive, // one CONNECT (or dial), one handshake per download, except egress-long
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	switch *proxyFlag {
	case "none":
	case "env":
		tr.Proxy = http.ProxyFromEnvironment
	default:
		u, err := url.Parse(*proxyFlag)
		if err != nil {
			return nil, err
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if host, ip, ok := strings.Cut(*resolve, "="); ok {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			h, port, err := net.SplitHostPort(addr)
			if err == nil && h == host {
				addr = net.JoinHostPort(ip, port)
			}
			return d.DialContext(ctx, network, addr)
		}
	}
	u := *egressURL
	if bulk {
		if p.MiB < 1 {
			p.MiB = 64
		}
		u = strings.TrimSuffix(u, "/file") + fmt.Sprintf("/bulk?mib=%d", p.MiB)
	}
	return &egress{c: &http.Client{Transport: tr}, url: u, bulk: bulk}, nil
}

// counter counts bytes into a sample as they are read.
type counter struct{ n *atomic.Int64 }

func (c counter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	bulkBytes.Add(int64(len(p)))
	return len(p), nil
}

func (e *egress) do(ctx context.Context, s *sample) error {
	var tr trace
	if !e.bulk {
		ctx = httptrace.WithClientTrace(ctx, tr.hooks())
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
	start := time.Now()
	resp, err := e.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	var n int64
	if e.bulk {
		n, err = io.Copy(counter{&s.bytes}, resp.Body)
	} else {
		n, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		return err
	}
	if n != resp.ContentLength {
		return fmt.Errorf("read %d of %d bytes", n, resp.ContentLength)
	}
	end := time.Now()
	s.lat = append(s.lat, end.Sub(start))
	if !e.bulk {
		s.bytes.Add(n)
		tr.record(s, start, end)
	}
	return nil
}

// trace times the steps of one download: the TCP connect (to the proxy or
// the server), the CONNECT exchange (connected → TLS start; ~0 direct),
// the TLS handshake (through the tunnel: the proxy reads the ClientHello
// and dials the server), request written → first response byte, and the
// body.
type trace struct {
	connStart, connDone, tlsStart, tlsDone, wrote, first time.Time
}

func (t *trace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		ConnectStart:         func(string, string) { t.connStart = time.Now() },
		ConnectDone:          func(string, string, error) { t.connDone = time.Now() },
		TLSHandshakeStart:    func() { t.tlsStart = time.Now() },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { t.tlsDone = time.Now() },
		WroteRequest:         func(httptrace.WroteRequestInfo) { t.wrote = time.Now() },
		GotFirstResponseByte: func() { t.first = time.Now() },
	}
}

func (t *trace) record(s *sample, start, end time.Time) {
	if t.connStart.IsZero() || t.tlsStart.IsZero() || t.first.IsZero() {
		return
	}
	add := func(k string, d time.Duration) { s.steps[k] = append(s.steps[k], d) }
	add("1_tcp_connect", t.connDone.Sub(t.connStart))
	add("2_connect_exchange", t.tlsStart.Sub(t.connDone))
	add("3_tls_handshake", t.tlsDone.Sub(t.tlsStart))
	add("4_request_to_first_byte", t.first.Sub(t.wrote))
	add("5_body_1MiB", end.Sub(t.first))
}

func stats(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[max(0, min(i, len(ds)-1))])
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Stats{N: len(ds), Mean: ms(sum / time.Duration(len(ds))), P50: q(.5), P90: q(.9), P99: q(.99), Max: ms(ds[len(ds)-1])}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
