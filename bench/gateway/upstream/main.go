// Command upstream is the fake far side of the gateway benchmark, on
// 127.0.0.1 only:
//
//   - a model upstream speaking Anthropic Messages (JSON and real SSE) with
//     a realistic service time: the first event after -first, then -deltas
//     text deltas spread so the whole answer takes -total; it checks
//     x-api-key against -key (the custodied key the broker injects);
//   - a static file server over HTTPS (a self-signed ECDSA certificate for
//     -name, written to -cert for the clients to trust): GET /file is a
//     1 MiB body, GET /bulk?mib=N streams N MiB.
//
// It prints one JSON line with the addresses it serves, then serves until
// SIGTERM or SIGINT.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	modelAddr := flag.String("model", "127.0.0.1:0", "model upstream listen address")
	fileAddr := flag.String("https", "127.0.0.1:0", "HTTPS file server listen address")
	name := flag.String("name", "allowed.test", "host name in the file server's certificate")
	certOut := flag.String("cert", "", "write the file server's certificate (PEM) here")
	key := flag.String("key", "", "the x-api-key the model upstream accepts")
	first := flag.Duration("first", 10*time.Millisecond, "time to the first streamed event")
	total := flag.Duration("total", 20*time.Millisecond, "service time of one model request")
	deltas := flag.Int("deltas", 10, "text deltas in a streamed answer")
	flag.Parse()
	if *key == "" || *certOut == "" || *deltas < 1 || *first > *total {
		log.Fatal("upstream: need -key and -cert, -deltas >= 1, -first <= -total")
	}

	m := &model{key: *key, first: *first, total: *total, deltas: *deltas}
	mln, err := net.Listen("tcp", *modelAddr)
	if err != nil {
		log.Fatal(err)
	}
	go serve(mln, m)

	cert, pemBytes, err := selfSigned(*name)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*certOut, pemBytes, 0o644); err != nil {
		log.Fatal(err)
	}
	fln, err := net.Listen("tcp", *fileAddr)
	if err != nil {
		log.Fatal(err)
	}
	tln := tls.NewListener(fln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	go serve(tln, files())

	ready, _ := json.Marshal(map[string]string{"model": mln.Addr().String(), "https": fln.Addr().String()})
	fmt.Printf("%s\n", ready)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}

func serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	_ = srv.Serve(ln)
}

// model is the fake Anthropic Messages upstream.
type model struct {
	key          string
	first, total time.Duration
	deltas       int
}

const answerWord = "sandbox "

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != m.key {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"fake upstream: wrong key or route"}}`)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	in := len(body) / 4
	if !req.Stream {
		time.Sleep(time.Until(start.Add(m.total)))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_bench","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`,
			req.Model, strings.Repeat(answerWord, m.deltas), in, m.deltas)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	var b bytes.Buffer
	event := func(name, data string) {
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data)
	}
	flush := func(at time.Time) {
		time.Sleep(time.Until(at))
		w.Write(b.Bytes())
		fl.Flush()
		b.Reset()
	}
	// The first token: message_start, the block start and the first delta
	// leave together after -first, like a provider's time to first token.
	event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, req.Model, in))
	event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	delta := fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, answerWord)
	event("content_block_delta", delta)
	flush(start.Add(m.first))
	step := time.Duration(0)
	if m.deltas > 1 {
		step = (m.total - m.first) / time.Duration(m.deltas-1)
	}
	for i := 1; i < m.deltas; i++ {
		event("content_block_delta", delta)
		if i == m.deltas-1 {
			event("content_block_stop", `{"type":"content_block_stop","index":0}`)
			event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, m.deltas))
			event("message_stop", `{"type":"message_stop"}`)
		}
		flush(start.Add(m.first + time.Duration(i)*step))
	}
	if m.deltas == 1 {
		event("content_block_stop", `{"type":"content_block_stop","index":0}`)
		event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, m.deltas))
		event("message_stop", `{"type":"message_stop"}`)
		flush(start.Add(m.total))
	}
}

// files serves /file (1 MiB) and /bulk?mib=N from memory.
func files() http.Handler {
	mib := make([]byte, 1<<20)
	for i := range mib {
		mib[i] = byte(i*7 + i>>11)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(mib)))
		w.Write(mib)
	})
	mux.HandleFunc("GET /bulk", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("mib"))
		if err != nil || n < 1 || n > 1<<14 {
			http.Error(w, "mib: 1..16384", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n*len(mib)))
		for i := 0; i < n; i++ {
			if _, err := w.Write(mib); err != nil {
				return
			}
		}
	})
	return mux
}

// selfSigned makes an ECDSA P-256 certificate for name.
func selfSigned(name string) (tls.Certificate, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
