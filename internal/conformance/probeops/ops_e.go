package probeops

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Ops of the failure and reset/recovery probes: crossings through the
// gateway, made the way an agent makes them. What they print is a hint;
// the probes judge the upstream's counters, the store and host files.
func init() {
	register("http", func(a []string) (string, error) { return httpOp(a, false) })
	register("httpopen", func(a []string) (string, error) { return httpOp(a, true) })
	register("mark-http", markHTTP)
	register("mark-owned", func(a []string) (string, error) {
		if len(a) != 2 {
			return "", fmt.Errorf("mark-owned TOKEN MARKER")
		}
		return "", markOwned(a[0], a[1])
	})
}

// TokenFile is the file a probe puts in a directory it made, holding a
// random token: mark-owned and mark-http write their marker only into a
// directory whose token matches, so that against a provider that
// isolates nothing (the program sees the host's filesystem, where the
// probe's bind target is some host path) they never write where the probe
// did not create.
const TokenFile = ".conformance-token"

func markOwned(token, marker string) error {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(marker), TokenFile))
	if err != nil || strings.TrimSpace(string(b)) != token {
		return fmt.Errorf("%s is not the probe's directory (no matching %s): nothing written", filepath.Dir(marker), TokenFile)
	}
	return os.WriteFile(marker, []byte("started"), 0o644)
}

// open keeps httpopen's responses (and their connections) open until the
// program ends.
var open []*http.Response

// httpOp runs METHOD URL [BODY]: a URL starting with $NAME takes NAME's
// value from the environment (the gateway's variables), and the request
// carries the agent's placeholder key and a JSON content type. It reports
// "STATUS BODY" (the body's first 512 bytes). With keep it returns once
// the status and the first bytes arrived and leaves the response open: a
// crossing in flight while the program holds.
func httpOp(a []string, keep bool) (string, error) {
	if len(a) < 2 {
		return "", fmt.Errorf("http METHOD URL [BODY]")
	}
	url := a[1]
	if strings.HasPrefix(url, "$") {
		n := 1
		for n < len(url) && (url[n] == '_' || 'A' <= url[n] && url[n] <= 'Z' || 'a' <= url[n] && url[n] <= 'z' || '0' <= url[n] && url[n] <= '9') {
			n++
		}
		url = os.Getenv(url[1:n]) + url[n:]
	}
	var body io.Reader
	if len(a) > 2 {
		body = strings.NewReader(a[2])
	}
	req, err := http.NewRequest(a[0], url, body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if k := os.Getenv("ANTHROPIC_API_KEY"); k != "" {
		req.Header.Set("x-api-key", k)
	}
	c := &http.Client{Timeout: 20 * time.Second}
	if keep {
		c.Timeout = 0
		// Only the first bytes are waited for; the stream stays open.
		t := time.AfterFunc(20*time.Second, func() { c.CloseIdleConnections() })
		defer t.Stop()
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, _ := io.ReadAtLeast(resp.Body, buf, 1)
	if keep {
		open = append(open, resp)
	} else {
		m, _ := io.ReadFull(resp.Body, buf[n:])
		n += m
		resp.Body.Close()
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, buf[:n]), nil
}

// markHTTP runs TOKEN MARKER METHOD URL [BODY]: it writes MARKER (the
// host sees that the program started; see markOwned), then makes the
// request.
func markHTTP(a []string) (string, error) {
	if len(a) < 4 {
		return "", fmt.Errorf("mark-http TOKEN MARKER METHOD URL [BODY]")
	}
	if err := markOwned(a[0], a[1]); err != nil {
		return "", fmt.Errorf("marker: %w", err)
	}
	got, err := httpOp(a[2:], false)
	// What arrived, beside the marker (a directory markOwned checked),
	// for the host to read: whether an answer reached the program.
	_ = os.WriteFile(a[1]+".response", []byte(got), 0o644)
	return got, err
}

func init() { register("http-until", httpUntil) }

// httpUntil runs STATUS SECONDS METHOD URL [BODY]: the request again every
// 200ms until it answers STATUS or SECONDS pass (an agent retrying while
// an operator decides). It reports the last answer.
func httpUntil(a []string) (string, error) {
	if len(a) < 4 {
		return "", fmt.Errorf("http-until STATUS SECONDS METHOD URL [BODY]")
	}
	secs, err := time.ParseDuration(a[1] + "s")
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(secs)
	for {
		data, err := httpOp(a[2:], false)
		if err == nil && strings.HasPrefix(data, a[0]+" ") || time.Now().After(deadline) {
			return data, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func init() {
	register("mcp-server", mcpServer)
	register("mcp-call", func(a []string) (string, error) { return mcpCall(a, false) })
	register("mcp-call-bg", func(a []string) (string, error) { return mcpCall(a, true) })
}

// mcpServer serves MCP on stdin/stdout with one tool, "sleep": each call
// first appends a line to COUNTFILE (a writable bind the host reads: how
// many times the tool really ran), then sleeps its "seconds". It returns
// when stdin closes.
func mcpServer(a []string) (string, error) {
	if len(a) != 1 {
		return "", fmt.Errorf("mcp-server COUNTFILE")
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "conformance-tools", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "sleep", Description: "count the call, sleep, then answer"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Seconds int `json:"seconds"`
		}) (*mcp.CallToolResult, any, error) {
			f, err := os.OpenFile(a[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return nil, nil, err
			}
			_, err = f.WriteString("called\n")
			f.Close()
			if err != nil {
				return nil, nil, err
			}
			select {
			case <-time.After(time.Duration(in.Seconds) * time.Second):
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil, nil
		})
	return "", srv.Run(context.Background(), &mcp.StdioTransport{})
}

// mcpCall runs TOOL JSON-ARGS [IDEMPOTENCY-KEY] through the tool broker
// (CORDON_MCP_URL) and reports the result. With bg it returns once the
// session is up and the call sent, leaving it in flight.
func mcpCall(a []string, bg bool) (string, error) {
	if len(a) < 2 {
		return "", fmt.Errorf("mcp-call TOOL JSON-ARGS [KEY]")
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(a[1]), &args); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: os.Getenv("CORDON_MCP_URL")}, nil)
	if err != nil {
		cancel()
		return "", err
	}
	p := &mcp.CallToolParams{Name: a[0], Arguments: args}
	if len(a) > 2 {
		p.Meta = mcp.Meta{"cordon.dev/idempotency-key": a[2]}
	}
	call := func() (string, error) {
		defer cancel()
		defer cs.Close()
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			return "", err
		}
		var sb strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				sb.WriteString(t.Text)
			}
		}
		b, _ := json.Marshal(map[string]any{"is_error": res.IsError, "text": sb.String(), "meta": res.Meta})
		return string(b), nil
	}
	if bg {
		go func() { _, _ = call() }()
		return "sent", nil
	}
	return call()
}
