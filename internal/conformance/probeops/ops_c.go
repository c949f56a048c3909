package probeops

// Ops of the allowed and bypass conformance probes. As everywhere in this
// package, what an op reports is a hint: the probe judges the effect, or
// its absence, from the host.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

func init() {
	register("loopback-http", loopbackHTTP)
	register("proxied", proxiedOp)
	register("model-call", modelCall)
	register("dnsquery", dnsQuery)
	register("udproute", udpRoute)
	register("mknods", mknods)
	register("setuid0", setuid0)
	register("append-tool-server", appendToolServer)
	register("tool-call", toolCall)
	register("ppidattack", ppidAttack)
}

// ppidAttack attacks this process's parent (in a sandbox, its init):
// SIGKILL, then ptrace attach, then opening its memory. It targets the
// parent by getppid, never a fixed pid, so under a provider that isolates
// nothing it can only reach the process that started it.
func ppidAttack([]string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ppid := unix.Getppid()
	out := map[string]string{"ppid": strconv.Itoa(ppid)}
	out["kill"] = outcome("", unix.Kill(ppid, unix.SIGKILL))
	time.Sleep(300 * time.Millisecond)
	err := unix.PtraceAttach(ppid)
	if err == nil {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(ppid, &ws, unix.WALL, nil)
		_ = unix.PtraceDetach(ppid)
	}
	out["ptrace"] = outcome("", err)
	out["mem_rw"] = outcome("", openMem(fmt.Sprintf("/proc/%d/mem", ppid), unix.O_RDWR))
	out["mem_ro"] = outcome("", openMem(fmt.Sprintf("/proc/%d/mem", ppid), unix.O_RDONLY))
	return marshal(out)
}

// appendToolServer serves MCP over stdio (the official SDK) until stdin ends: a
// tool server the gateway runs, contained, from the binary under test.
// Its one tool, "append", appends a line to a file and says so.
func appendToolServer([]string) (string, error) {
	type appendArgs struct {
		Path string `json:"path"`
		Line string `json:"line"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "cordon-conformance-tools", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "append", Description: "append a line to a file"},
		func(_ context.Context, _ *mcp.CallToolRequest, a appendArgs) (*mcp.CallToolResult, any, error) {
			f, err := os.OpenFile(a.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				_, err = f.WriteString(a.Line + "\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: " + err.Error()}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "appended"}}}, nil, nil
		})
	return "", srv.Run(context.Background(), &mcp.StdioTransport{})
}

// toolCall: tool-call TOOL JSON-ARGS calls one tool through the tool broker
// ($CORDON_MCP_URL) and returns the result's text.
func toolCall(a []string) (string, error) {
	if len(a) != 2 {
		return "", fmt.Errorf("usage: tool-call TOOL JSON-ARGS")
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(a[1]), &args); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cordon-conformance", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: os.Getenv("CORDON_MCP_URL")}, nil)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: a[0], Arguments: args})
	if err != nil {
		return "", err
	}
	var text []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	if res.IsError {
		return strings.Join(text, "\n"), fmt.Errorf("tool error")
	}
	return strings.Join(text, "\n"), nil
}

// loopbackHTTP: loopback-http METHOD URL [BODY] sends one request to a loopback URL
// ($VARS expanded; loopback is never proxied) and returns "STATUS BODY"
// (the body cut at 4 KiB).
func loopbackHTTP(a []string) (string, error) {
	if len(a) < 2 {
		return "", fmt.Errorf("usage: loopback-http METHOD URL [BODY]")
	}
	var body io.Reader
	if len(a) > 2 {
		body = strings.NewReader(a[2])
	}
	u, err := loopbackURL(os.ExpandEnv(a[1]))
	if err != nil {
		return "", err
	}
	req, err := http.NewRequest(a[0], u.String(), body)
	if err != nil {
		return "", err
	}
	return do(req)
}

// proxiedOp: proxied METHOD URL sends one request through $HTTP_PROXY
// whatever the URL (Go sends loopback addresses direct otherwise).
func proxiedOp(a []string) (string, error) {
	if len(a) != 2 {
		return "", fmt.Errorf("usage: proxied METHOD URL")
	}
	p, err := loopbackURL(os.Getenv("HTTP_PROXY"))
	if err != nil {
		return "", fmt.Errorf("HTTP_PROXY: %w", err)
	}
	req, err := http.NewRequest(a[0], a[1], nil)
	if err != nil {
		return "", err
	}
	return doWith(req, http.ProxyURL(p))
}

// loopbackURL parses s and refuses anything but an http URL on a loopback
// IP: these ops run under providers that may isolate nothing, where a
// request must still never leave the host.
func loopbackURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(u.Hostname()); u.Scheme != "http" || ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%q is not an http URL on a loopback address", s)
	}
	return u, nil
}

func do(req *http.Request) (string, error) { return doWith(req, http.ProxyFromEnvironment) }

func doWith(req *http.Request, proxy func(*http.Request) (*url.URL, error)) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: proxy}}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return strconv.Itoa(resp.StatusCode) + " " + string(b), nil
}

// modelCall sends one Anthropic Messages request to $ANTHROPIC_BASE_URL
// with the key the environment gives the agent ($ANTHROPIC_API_KEY: in a
// sandbox, the gateway's placeholder).
func modelCall([]string) (string, error) {
	base := os.Getenv("ANTHROPIC_BASE_URL")
	if _, err := loopbackURL(base); err != nil {
		return "", fmt.Errorf("ANTHROPIC_BASE_URL: %w", err)
	}
	body := `{"model":"claude-conformance-1","max_tokens":16,"messages":[{"role":"user","content":"say hello"}]}`
	req, err := http.NewRequest("POST", strings.TrimRight(base, "/")+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("x-api-key", os.Getenv("ANTHROPIC_API_KEY"))
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	return do(req)
}

// dnsQuery: dnsquery HOST:PORT NAME sends one DNS query (A record of NAME)
// over UDP to HOST:PORT and waits up to a second for an answer.
func dnsQuery(a []string) (string, error) {
	if len(a) != 2 {
		return "", fmt.Errorf("usage: dnsquery HOST:PORT NAME")
	}
	c, err := net.Dial("udp", a[0])
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write(DNSQuery(a[1])); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("answer=%d bytes", n), nil
}

// DNSQuery is a DNS query message (id 0x4344, recursion desired) for the A
// record of name.
func DNSQuery(name string) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, [6]uint16{0x4344, 0x0100, 1, 0, 0, 0})
	for _, l := range strings.Split(strings.Trim(name, "."), ".") {
		b.WriteByte(byte(len(l)))
		b.WriteString(l)
	}
	b.WriteByte(0)
	_ = binary.Write(&b, binary.BigEndian, [2]uint16{1, 1}) // A, IN
	return b.Bytes()
}

// udpRoute: udproute HOST:PORT... connects a UDP socket to each address:
// the kernel looks the route up and sends nothing. Reports per address
// the local address it would use, or the errno (ENETUNREACH: no route).
func udpRoute(a []string) (string, error) {
	return attempts(a, func(addr string) (string, error) {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.LocalAddr().String(), nil
	})
}

// mknods: mknods DIR tries to create device nodes in DIR: a char device
// like /dev/null (1:3) and /dev/mem (1:1), and a block device like
// /dev/loop0 (7:0); and, as the control, a regular file "plain" with
// mknod. The host stats DIR afterwards.
func mknods(a []string) (string, error) {
	if len(a) != 1 {
		return "", fmt.Errorf("usage: mknods DIR")
	}
	nodes := map[string]uint32{"null": unix.S_IFCHR, "mem": unix.S_IFCHR, "loop0": unix.S_IFBLK}
	devs := map[string]uint64{"null": unix.Mkdev(1, 3), "mem": unix.Mkdev(1, 1), "loop0": unix.Mkdev(7, 0)}
	out := map[string]string{}
	for n, mode := range nodes {
		out[n] = outcome("", unix.Mknod(a[0]+"/"+n, mode|0o600, int(devs[n])))
	}
	out["plain"] = outcome("", unix.Mknod(a[0]+"/plain", unix.S_IFREG|0o600, 0))
	return marshal(out)
}

// setuid0 tries to become root (setuid(0), setgid(0)) and to raise its
// capabilities; run it under hold so the host can read /proc/PID/status.
func setuid0([]string) (string, error) {
	out := map[string]string{}
	out["setgid"] = outcome("", unix.Setgid(0))
	out["setuid"] = outcome("", unix.Setuid(0))
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	all := [2]unix.CapUserData{{Effective: ^uint32(0), Permitted: ^uint32(0), Inheritable: ^uint32(0)}, {Effective: ^uint32(0), Permitted: ^uint32(0), Inheritable: ^uint32(0)}}
	out["capset"] = outcome("", unix.Capset(&hdr, &all[0]))
	return marshal(out)
}

func marshal(m map[string]string) (string, error) {
	b, err := json.Marshal(m)
	return string(b), err
}
