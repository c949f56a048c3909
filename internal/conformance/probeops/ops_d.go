package probeops

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Ops of the stale-state, cross-tenant and exhaustion probes. What they
// print is the program's own view: the probes judge the effect from the
// host (the store, the upstream's count, /proc/PID/root, the cgroup).
func init() {
	register("request", requestOp)
	register("fill", fillOp)
}

// requestOp makes one HTTP request: request METHOD URL [BODY]. A URL starting
// with $NAME/ takes its base from the environment variable NAME (the
// gateway's addresses: CORDON_STATE_URL, ANTHROPIC_BASE_URL); a proxy in
// HTTP_PROXY is used as the gateway sets it. It reports the status, the
// body's length and digest, and up to 200 bytes of the body.
func requestOp(a []string) (string, error) {
	if len(a) < 2 || len(a) > 3 {
		return "", fmt.Errorf("usage: request METHOD URL [BODY]")
	}
	url := a[1]
	if rest, ok := strings.CutPrefix(url, "$"); ok {
		name, path, _ := strings.Cut(rest, "/")
		base := os.Getenv(name)
		if base == "" {
			return "", fmt.Errorf("request: $%s is not set", name)
		}
		url = strings.TrimSuffix(base, "/") + "/" + path
	}
	var body io.Reader
	if len(a) == 3 {
		body = strings.NewReader(a[2])
	}
	req, err := http.NewRequest(a[0], url, body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if k := os.Getenv("ANTHROPIC_API_KEY"); k != "" {
		req.Header.Set("x-api-key", k)
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	show := b
	if len(show) > 200 {
		show = show[:200]
	}
	return fmt.Sprintf("status=%d len=%d sha256=%s body=%q", resp.StatusCode, len(b), hex.EncodeToString(sum[:]), show), nil
}

// fillOp writes DIR/fill in 1 MiB chunks until MB mebibytes are written
// or a write fails (ENOSPC on a full filesystem), and reports how much
// was written. The file stays for the host to measure.
func fillOp(a []string) (string, error) {
	if len(a) != 2 {
		return "", fmt.Errorf("usage: fill DIR MB")
	}
	mb, err := strconv.Atoi(a[1])
	if err != nil || mb <= 0 {
		return "", fmt.Errorf("fill %q: want a positive number of MiB", a[1])
	}
	f, err := os.OpenFile(filepath.Join(a[0], "fill"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = 'x'
	}
	var written int64
	for i := 0; i < mb; i++ {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			return fmt.Sprintf("written=%d", written), err
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Sprintf("written=%d", written), err
	}
	return fmt.Sprintf("written=%d", written), nil
}
