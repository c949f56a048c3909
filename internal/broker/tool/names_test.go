package tool

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cordon-project/cordon/internal/crossing"
)

// nameSecret is a custodied value made only of characters a tool name
// may hold.
const nameSecret = "ghp_TOOLNAMESECRET0123456789abcdef"

type nameSecrets struct{}

func (nameSecrets) Secret(string) ([]byte, error) { return []byte(nameSecret), nil }
func (nameSecrets) Values() [][]byte              { return [][]byte{[]byte(nameSecret)} }

// Tool names are the upstream's text. Descriptions were redacted, but a
// tool named with a custodied value was offered to the agent under that
// name, and one whose name was unusable was logged with it. Observed
// from the agent's tools/list and from the log: the value appears in
// neither. Control: the upstream's ordinary tool is offered.
func TestToolNameCannotCarryASecret(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	noop := func(context.Context, *mcp.CallToolRequest, textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, noop)
	mcp.AddTool(srv, &mcp.Tool{Name: nameSecret}, noop)
	mcp.AddTool(srv, &mcp.Tool{Name: "x" + nameSecret + strings.Repeat("y", 64)}, noop) // unusable: too long
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	up, err := mcp.NewClient(&mcp.Implementation{Name: "cordon"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	var logs bytes.Buffer
	b, err := New(context.Background(), Options{
		Identity:  crossing.Identity{Workload: "w", SandboxID: "sb"},
		Upstreams: []Upstream{{Name: "up", Session: up, Timeout: time.Second}},
		Authority: newFakeAuthority(), Secrets: nameSecrets{},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(b)
	hs.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return crossing.WithIdentity(ctx, crossing.Identity{Workload: "w", SandboxID: "sb"})
	}
	hs.Start()
	t.Cleanup(hs.Close)
	agent, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + Path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	var names []string
	for tl, err := range agent.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
	}
	if strings.Contains(strings.Join(names, " "), "TOOLNAMESECRET") {
		t.Errorf("the agent is offered %q", names)
	}
	if !strings.Contains(strings.Join(names, " "), "up__echo") {
		t.Errorf("control: the agent is offered %q, want up__echo", names)
	}
	if strings.Contains(logs.String(), "TOOLNAMESECRET") {
		t.Errorf("the log holds the value: %s", logs.String())
	}
}
