// Command mcpserver is an MCP tool server (official Go SDK, stdio) the e2e
// tests run as a contained upstream: its tools report what the server's
// own sandbox lets it see and do.
package main

import (
	"context"
	"log"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type pathArgs struct {
	Path string `json:"path"`
}

type nameArgs struct {
	Name string `json:"name"`
}

type secondsArgs struct {
	Seconds int `json:"seconds"`
}

type linkArgs struct {
	Path    string `json:"path"`
	Target  string `json:"target"`
	Seconds int    `json:"seconds"`
}

type textArgs struct {
	Text string `json:"text"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "e2e-tools", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "read", Description: "read a file as the server's sandbox sees it"},
		func(_ context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			b, err := os.ReadFile(a.Path)
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: " + err.Error()}}}, nil, nil
			}
			return text(string(b)), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "write", Description: "append a line to a file"},
		func(_ context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			f, err := os.OpenFile(a.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				_, err = f.WriteString("written\n")
				f.Close()
			}
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: " + err.Error()}}}, nil, nil
			}
			return text("ok"), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "env", Description: "one variable of the server's environment"},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			return text(os.Getenv(a.Name)), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "sleep", Description: "sleep, then answer"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a secondsArgs) (*mcp.CallToolResult, any, error) {
			time.Sleep(time.Duration(a.Seconds) * time.Second)
			return text("slept"), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "symlink", Description: "answer now, then after seconds create a symlink"},
		func(_ context.Context, _ *mcp.CallToolRequest, a linkArgs) (*mcp.CallToolResult, any, error) {
			go func() {
				time.Sleep(time.Duration(a.Seconds) * time.Second)
				_ = os.Symlink(a.Target, a.Path)
			}()
			return text("ok"), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo text"},
		func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
			return text(a.Text), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "big", Description: "a large result"},
		func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("x", 512<<10)), nil, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
