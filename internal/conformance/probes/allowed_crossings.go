package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
    command: [/tools/cordon, __probe, append-tool-server]
    binds: [{source: %s, target: /tools}, {source: %s, target: /data, writable: true}]
    timeout: 10s
`, bin, data))
	if err != nil {
		return broke(err)
	}
	line := "tool-call-" + randToken(8)
	st := e.StateDir()
	r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg},
		Op: []string{"tool-call", "t__append", fmt.Sprintf(`{"path":"/data/out.txt","line":%q}`, line)}})
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
	rs, err := brokerReceipts(ctx, e, st, "tool")
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
	w, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"loopback-http", "PUT", "$CORDON_STATE_URL/conformance/a", value}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(w); err != nil {
		return broke(err)
	}
	rd, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: []string{"loopback-http", "GET", "$CORDON_STATE_URL/conformance/a"}})
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
		fact("the value, in what the next sandbox of the scope printed", "present", seenOrNot(rd.Stdout, value), readBack, "cordon run's stdout (a second sandbox)"),
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

func init() {
	conformance.Register(conformance.Probe{
		ID:     "allowed.ingress",
		Class:  record.Allowed,
		Clause: "§2.1 each declared crossing works, through the trusted gateway: ingress",
		Title:  "a request from the host to a declared ingress route is answered by the program serving inside, and receipted",
		Run:    allowedIngress,
	})
}

// ingressInside is the port the program serves on in its own network
// namespace (no other sandbox can collide with it).
const ingressInside = "18789"

// allowedIngress: the program serves on 127.0.0.1:18789 inside; the
// config routes a free host loopback port to it. The host GETs the route
// and gets the program's answer; the store has the route's allow
// receipts. The program ends when the runner creates its quit file.
func allowedIngress(ctx context.Context, e *conformance.Env) conformance.Outcome {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return broke(err)
	}
	listen := l.Addr().String()
	l.Close()
	cfg, err := gatewayConfig(e, "", fmt.Sprintf("ingress:\n  - name: ui\n    port: %s\n    listen: %s\n", ingressInside, listen))
	if err != nil {
		return broke(err)
	}
	ctl, err := newDir(e, "ctl", 0o755)
	if err != nil {
		return broke(err)
	}
	st := e.StateDir()
	quitName := "quit-" + randToken(8)
	type ran struct {
		r   conformance.RunResult
		err error
	}
	done := make(chan ran, 1)
	go func() {
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg, "--ro", ctl + ":/ctl"}, Op: []string{"serve", "60", "/ctl/" + quitName, ingressInside}})
		done <- ran{r, err}
	}()
	quit := func() { _ = os.WriteFile(filepath.Join(ctl, quitName), nil, 0o644) }
	e.Cleanup(quit)
	// Wait, from the host, until the program listens inside: a LISTEN
	// socket on the port in its network namespace.
	want := fmt.Sprintf(" 0100007F:%04X 00000000:0000 0A ", 18789)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if pid := pidWithArgs(quitName); pid > 0 {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid)); strings.Contains(string(b), want) {
				break
			}
		}
		if time.Now().After(deadline) {
			quit()
			return broke(fmt.Errorf("the program never listened on %s inside", ingressInside))
		}
		select {
		case d := <-done:
			if d.err != nil {
				return broke(d.err)
			}
			return broke(fmt.Errorf("cordon run ended (exit %d) before the program listened: %s", d.r.Code, headLine(d.r.Stderr)))
		default:
		}
	}
	body, gerr := httpGet(listen)
	quit()
	var d ran
	select {
	case d = <-done:
	case <-ctx.Done():
		return broke(ctx.Err())
	}
	if d.err != nil {
		return broke(d.err)
	}
	rs, err := brokerReceipts(ctx, e, st, "ingress")
	if err != nil {
		return broke(err)
	}
	answered := strings.Contains(body, "ingress-ok port="+ingressInside)
	got := strings.TrimSpace(headLine(body))
	if gerr != nil {
		got = gerr.Error()
	}
	return conformance.Outcome{Hint: d.r.Hint(), Facts: []record.Fact{
		fact("the host's GET of the route "+listen, "the program's answer (ingress-ok port="+ingressInside+")", got+map[bool]string{true: " … ingress-ok", false: ""}[answered], answered, "the HTTP client on the host"),
		fact("ingress receipts in the store", "allow only, at least 1", fmt.Sprint(decisions(rs)), decisions(rs)["allow"] >= 1 && decisions(rs)["allow"] == len(rs), "cordon receipts --json --broker ingress, on the host"),
		fact("cordon run's exit after the quit file", "0", fmt.Sprint(d.r.Code), d.r.Code == 0, "cordon run's exit status"),
	}}
}

// httpGet sends one HTTP/1.1 GET to addr and returns all it answered.
func httpGet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: ui\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// pidWithArgs is the pid of the probe op process whose command line
// holds the unique word w (0 if none yet): the sandboxed program, not
// cordon, whose argv starts with cordon's own flags.
func pidWithArgs(w string) int {
	ents, _ := os.ReadDir("/proc")
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + en.Name() + "/cmdline")
		if strings.HasPrefix(string(b), conformance.ProbeBin+"\x00__probe\x00") && strings.Contains(string(b), w) {
			return pid
		}
	}
	return 0
}
