package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "allowed.tool",
		Class:  record.Allowed,
		Clause: "§2.1 each declared crossing works, through the trusted gateway: tool",
		Title:  "a tool call through the tool broker runs the declared tool server once: its effect lands on the host and is receipted",
		Run:    allowedTool,
	})
	conformance.Register(conformance.Probe{
		ID:     "allowed.state",
		Class:  record.Allowed,
		Clause: "§2.1 each declared crossing works, through the trusted gateway: state",
		Title:  "a value written through the state broker is read back by the next sandbox of the scope and by `cordon state export` on the host",
		Run:    allowedState,
	})
}

// allowedTool: the declared tool server is the binary under test's own
// MCP server op, run by the gateway in its own sandbox with a writable
// bind of a runner directory; the program calls its append tool through
// the tool broker. The host reads the file the tool wrote and the store's
// tool receipts.
func allowedTool(ctx context.Context, e *conformance.Env) conformance.Outcome {
	bin, err := newDir(e, "tools", 0o755)
	if err != nil {
		return broke(err)
	}
	// The server runs from the binary under test, bound read-only; a
	// hard link (or a copy) puts it in a directory of its own.
	toolBin := filepath.Join(bin, "cordon")
	if err := os.Link(e.Bin, toolBin); err != nil {
		if err := copyFile(e.Bin, toolBin); err != nil {
			return broke(err)
		}
	}
	data, err := newDir(e, "tool-data", 0o755)
	if err != nil {
		return broke(err)
	}
	if err := os.Chown(data, 1000, 1000); err != nil {
		return broke(err)
	}
	cfg, err := gatewayConfig(e, "", fmt.Sprintf(`tools:
  - name: t
    command: [/tools/cordon, __probe, mcp-server]
    binds: [{source: %s, target: /tools}, {source: %s, target: /data, writable: true}]
    timeout: 10s
`, bin, data))
	if err != nil {
		return broke(err)
	}
	line := "tool-call-" + randToken(8)
	st := e.StateDir()
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg},
		Op: []string{"mcp-call", "t__append", fmt.Sprintf(`{"path":"/data/out.txt","line":%q}`, line)}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	b, rerr := os.ReadFile(filepath.Join(data, "out.txt"))
	got := string(b)
	if rerr != nil {
		got = rerr.Error()
	}
	rs, err := receipts(ctx, e, st, "tool")
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the tool's write, in the runner's directory bound to the tool server", line+" (one line)", strings.TrimSpace(got), got == line+"\n", "read of "+filepath.Join(data, "out.txt")+" on the host"),
		fact("tool receipts in the store", "1 allow", fmt.Sprint(decisions(rs)), decisions(rs)["allow"] == 1 && len(rs) == 1, "cordon receipts --json --broker tool, on the host"),
	}}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// allowedState: one sandbox PUTs a random value through the state broker;
// the next sandbox of the same scope GETs it; the host exports the scope
// with `cordon state export`.
func allowedState(ctx context.Context, e *conformance.Env) conformance.Outcome {
	cfg, err := gatewayConfig(e, "", "state: {quota_bytes: 4096, quota_entries: 4, max_value_bytes: 1KiB}\n")
	if err != nil {
		return broke(err)
	}
	st := e.StateDir()
	value := "state-" + randToken(8)
	w, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"http", "PUT", "$CORDON_STATE_URL/conformance/a", value}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(w); err != nil {
		return broke(err)
	}
	rd, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"http", "GET", "$CORDON_STATE_URL/conformance/a"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(rd); err != nil {
		return broke(err)
	}
	ex, err := e.Cordon(ctx, st, "state", "export", "--tenant", "conformance", "--workload", "conformance", "--purpose", "testing")
	if err != nil {
		return broke(err)
	}
	readBack := rd.Code == 0 && strings.Contains(rd.Stdout, value)
	got := exportedValue(ex.Stdout, "conformance/a")
	exported := ex.Code == 0 && got == value
	return conformance.Outcome{Hint: w.Hint() + "\n" + rd.Hint(), Facts: []record.Fact{
		fact("the value, in what the next sandbox of the scope printed", "present", present(rd.Stdout, value), readBack, "cordon run's stdout (a second sandbox)"),
		fact("the value, in the scope's export on the host", value, got, exported, fmt.Sprintf("cordon state export (exit %d), on the host", ex.Code)),
	}}
}

// exportedValue is the value of key in a `cordon state export` document
// (values are base64), or what went wrong.
func exportedValue(doc, key string) string {
	var d struct {
		Entries []struct {
			Key   string `json:"key"`
			Value []byte `json:"value"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return "not an export: " + err.Error()
	}
	for _, en := range d.Entries {
		if en.Key == key {
			return string(en.Value)
		}
	}
	return "no entry " + key
}
