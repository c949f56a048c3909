// Command mcpclient is a real MCP client (the official Go SDK) the e2e
// tests run inside a sandbox against the gateway's tool broker.
//
//	mcpclient list
//	mcpclient call TOOL JSON-ARGS [IDEMPOTENCY-KEY]
//	mcpclient call-twice TOOL JSON-ARGS      (the same session, two calls)
//	mcpclient retransmit TOOL JSON-ARGS      (the same JSON-RPC id twice)
//	mcpclient bench N TOOL JSON-ARGS [-- SERVER ARGV...]
//	                                          (N calls, latency percentiles;
//	                                          with a server argv: directly
//	                                          over stdio, no broker)
//
// It prints one JSON line per result: {"is_error":…,"text":…,"meta":…}.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcpclient:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	url := os.Getenv("CORDON_MCP_URL")
	if len(args) > 0 && args[0] == "bench" {
		return bench(url, args[1:])
	}
	if url == "" || len(args) == 0 {
		return fmt.Errorf("usage: CORDON_MCP_URL=… mcpclient list|call|call-twice|retransmit …")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if args[0] == "retransmit" {
		return retransmit(ctx, url, args[1], args[2])
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	switch args[0] {
	case "list":
		var names []string
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			names = append(names, t.Name)
		}
		fmt.Println(strings.Join(names, "\n"))
		return nil
	case "call", "call-twice":
		var a map[string]any
		if err := json.Unmarshal([]byte(args[2]), &a); err != nil {
			return err
		}
		p := &mcp.CallToolParams{Name: args[1], Arguments: a}
		if len(args) > 3 {
			p.Meta = mcp.Meta{"cordon.dev/idempotency-key": args[3]}
		}
		n := 1
		if args[0] == "call-twice" {
			n = 2
		}
		for range n {
			res, err := cs.CallTool(ctx, p)
			if err != nil {
				return err
			}
			print(res)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// bench makes N sequential calls in one session and prints the latency
// percentiles in microseconds as one JSON line.
func bench(url string, args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: mcpclient bench N TOOL JSON-ARGS [-- SERVER ARGV...]")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n <= 0 {
		return fmt.Errorf("bench: N must be a positive integer")
	}
	var a map[string]any
	if err := json.Unmarshal([]byte(args[2]), &a); err != nil {
		return err
	}
	var t mcp.Transport = &mcp.StreamableClientTransport{Endpoint: url}
	mode := "broker"
	if len(args) > 4 && args[3] == "--" {
		t, mode = &mcp.CommandTransport{Command: exec.Command(args[4], args[5:]...)}, "direct"
	}
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	p := &mcp.CallToolParams{Name: args[1], Arguments: a}
	for range 20 { // warm up
		if _, err := cs.CallTool(ctx, p); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, n)
	start := time.Now()
	for i := range lat {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, p)
		lat[i] = time.Since(t0)
		if err != nil || res.IsError {
			return fmt.Errorf("call %d: %v %v", i, err, res)
		}
	}
	total := time.Since(start)
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(n-1))].Nanoseconds()) / 1e3 }
	b, _ := json.Marshal(map[string]any{"mode": mode, "calls": n, "p50_us": pct(0.5), "p90_us": pct(0.9), "p99_us": pct(0.99),
		"calls_per_s": float64(n) / total.Seconds()})
	fmt.Println(string(b))
	return nil
}

func print(res *mcp.CallToolResult) {
	var sb strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text)
		}
	}
	b, _ := json.Marshal(map[string]any{"is_error": res.IsError, "text": sb.String(), "meta": res.Meta})
	fmt.Println(string(b))
}

// retransmit speaks raw streamable HTTP: initialize, then POSTs the same
// tools/call frame (same session, same JSON-RPC id) twice, as a client
// retrying after a lost response would.
func retransmit(ctx context.Context, url, tool, args string) error {
	post := func(session string, body string) (string, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Mcp-Session-Id"), string(b), nil
	}
	sid, _, err := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if err != nil || sid == "" {
		return fmt.Errorf("initialize: session %q, %v", sid, err)
	}
	if _, _, err := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return err
	}
	frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args)
	for range 2 {
		_, body, err := post(sid, frame)
		if err != nil {
			return err
		}
		// An SSE or JSON body: print the JSON-RPC message on one line.
		for _, line := range strings.Split(body, "\n") {
			line = strings.TrimPrefix(strings.TrimSpace(line), "data: ")
			if strings.HasPrefix(line, "{") {
				var buf bytes.Buffer
				_ = json.Compact(&buf, []byte(line))
				fmt.Println(buf.String())
			}
		}
	}
	return nil
}
