package probeops

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func init() { register("serve", serveOp) }

// serveOp listens on 127.0.0.1 at every port given (args: SECONDS
// QUITFILE PORT...) and counts the connections each accepts. A connection's first
// line chooses what it gets:
//   - "GET …" (HTTP): a fixed body naming the port and the peer address;
//   - "ECHO": every further byte echoed back until the peer half-closes,
//     then "bye\n" (both directions and the half-close);
//   - "QUIT": "quit\n", and the op ends.
//
// The op also ends after SECONDS, or once QUITFILE exists ("-": never;
// the host creates it in a directory bound read-only). Its result is the count per port, as a
// JSON object: the tests compare it with what they sent.
func serveOp(a []string) (string, error) {
	if len(a) < 3 {
		return "", fmt.Errorf("serve SECONDS QUITFILE PORT...")
	}
	quitFile := a[1]
	secs, err := strconv.Atoi(a[0])
	if err != nil {
		return "", err
	}
	var mu sync.Mutex
	counts := map[string]int{}
	quit := make(chan struct{})
	var once sync.Once
	var lns []net.Listener
	for _, p := range a[2:] {
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			return "", err
		}
		lns = append(lns, ln)
		counts[p] = 0
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				counts[p]++
				mu.Unlock()
				go serveConn(c, p, func() { once.Do(func() { close(quit) }) })
			}
		}()
	}
	if quitFile != "-" {
		go func() {
			for {
				if _, err := os.Stat(quitFile); err == nil {
					once.Do(func() { close(quit) })
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	select {
	case <-quit:
		time.Sleep(100 * time.Millisecond) // let the quit reply leave
	case <-time.After(time.Duration(secs) * time.Second):
	}
	for _, ln := range lns {
		ln.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	b, err := json.Marshal(counts)
	return string(b), err
}

func serveConn(c net.Conn, port string, quit func()) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	switch {
	case strings.HasPrefix(line, "GET "):
		for {
			h, err := r.ReadString('\n')
			if err != nil || strings.TrimSpace(h) == "" {
				break
			}
		}
		body := fmt.Sprintf("ingress-ok port=%s peer=%s\n", port, c.RemoteAddr())
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	case strings.TrimSpace(line) == "ECHO":
		if _, err := io.Copy(c, r); err == nil {
			io.WriteString(c, "bye\n")
		}
	case strings.TrimSpace(line) == "QUIT":
		io.WriteString(c, "quit\n")
		quit()
	}
}
