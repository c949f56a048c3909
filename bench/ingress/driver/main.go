// Command driver measures one HTTP server address for the ingress
// benchmark: N sequential small GETs, each on a new connection (so each
// pays a route's per-connection admission: policy, budget, receipt), and
// one large GET for throughput.
//
//	driver URL-SMALL URL-BIG N
//
// It prints one JSON line: p50/p95 ms of the small GETs, MiB/s of the big one.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: driver URL-SMALL URL-BIG N")
	}
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		log.Fatal(err)
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	get := func(url string) int64 {
		r, err := cl.Get(url)
		if err != nil {
			log.Fatal(err)
		}
		defer r.Body.Close()
		k, err := io.Copy(io.Discard, r.Body)
		if err != nil || r.StatusCode != 200 {
			log.Fatalf("GET %s: %d %v", url, r.StatusCode, err)
		}
		return k
	}
	get(os.Args[1]) // warm
	ts := make([]float64, n)
	for i := range ts {
		t0 := time.Now()
		get(os.Args[1])
		ts[i] = float64(time.Since(t0).Microseconds()) / 1000
	}
	sort.Float64s(ts)
	t0 := time.Now()
	k := get(os.Args[2])
	secs := time.Since(t0).Seconds()
	out := map[string]float64{"p50_ms": ts[n/2], "p95_ms": ts[n*95/100], "mib_s": float64(k) / (1 << 20) / secs}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
