// Command bareproxy is the floor of the model benchmark: a bare
// net/http/httputil.ReverseProxy on 127.0.0.1 in front of the fake
// upstream, with no policy, no budget, no receipts, no credential
// injection (the client sends the real key). What it adds over direct is
// what one extra Go HTTP hop costs on this machine.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	upstream := flag.String("upstream", "", "upstream base URL")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		log.Fatal("bareproxy: -upstream http://host:port")
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // flush every write: streams pass through at once
	rp.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true, IdleConnTimeout: 90 * time.Second}
	rp.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("{\"addr\":%q}\n", ln.Addr().String())
	go func() { _ = (&http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}
