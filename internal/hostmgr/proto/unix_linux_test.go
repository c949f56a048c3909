package proto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// testHandler serves the operations the tests use.
type testHandler struct {
	started   chan struct{} // "block" has begun
	cancelled chan struct{} // "block" saw its context end
	afterErr  chan error    // what a reply after the final one returned
}

func newTestHandler() *testHandler {
	return &testHandler{started: make(chan struct{}, 8), cancelled: make(chan struct{}, 8), afterErr: make(chan error, 1)}
}

func (th *testHandler) serve(ctx context.Context, peer Peer, req Request, files []*os.File, reply func(Response) error) error {
	defer closeFiles(files)
	result := func(final bool, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return reply(Response{Final: final, Result: b})
	}
	switch req.Op {
	case "echo":
		var a struct {
			Msg string `json:"msg"`
		}
		if err := DecodeArgs(req.Args, &a); err != nil {
			return err
		}
		return result(true, a)
	case "len":
		var a struct {
			Msg string `json:"msg"`
		}
		if err := DecodeArgs(req.Args, &a); err != nil {
			return err
		}
		return result(true, len(a.Msg))
	case "peer":
		return result(true, peer)
	case "exec":
		if err := result(false, map[string]string{"state": "started"}); err != nil {
			return err
		}
		if err := result(false, map[string]string{"state": "running"}); err != nil {
			return err
		}
		return nil // the server sends the final response
	case "write":
		if len(files) != 1 {
			return Errorf(KindBadRequest, "want one descriptor, got %d", len(files))
		}
		flags, err := unix.FcntlInt(files[0].Fd(), unix.F_GETFD, 0)
		if err != nil {
			return err
		}
		if _, err := files[0].WriteString("hello through the descriptor"); err != nil {
			return err
		}
		return result(true, map[string]bool{"cloexec": flags&unix.FD_CLOEXEC != 0})
	case "count":
		return result(true, len(files))
	case "give":
		// A non-final response with the write end of a pipe beside it
		// (exec's started answer with its terminal), then the final one.
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer w.Close()
		go func() { io.Copy(io.Discard, r); r.Close() }()
		b, _ := json.Marshal("given")
		if err := reply(Response{Result: b, Files: []*os.File{w}}); err != nil {
			return err
		}
		return result(true, "done")
	case "owns":
		for _, f := range files {
			if err := peer.Owns(f); err != nil {
				return err
			}
		}
		return nil
	case "notfound":
		return fmt.Errorf("look up: %w", Errorf(KindNotFound, "no sandbox %s", "web"))
	case "refused":
		return &Error{Kind: KindConflict, Message: "evidence does not support the level", Failure: failure.KindEvidence}
	case "internal":
		return errors.New("open /var/lib/cordon/secret: permission denied")
	case "big":
		err := reply(Response{Final: true, Result: json.RawMessage(`"` + strings.Repeat("x", MaxFrame) + `"`)})
		return err
	case "twice":
		if err := result(true, "first"); err != nil {
			return err
		}
		th.afterErr <- result(true, "second")
		return nil
	case "block":
		th.started <- struct{}{}
		<-ctx.Done()
		th.cancelled <- struct{}{}
		return ctx.Err()
	}
	return Errorf(KindBadRequest, "unknown operation %s", req.Op)
}

// serve runs a Listener with h on a socket in a fresh directory and
// returns its path; the test's end stops it and checks Serve's return.
func serve(t *testing.T, h Handler, setup func(*Listener)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cordon.sock")
	l, err := Listen(path, 0, -1)
	if err != nil {
		t.Fatalf("Listen(%s) = %v", path, err)
	}
	if setup != nil {
		setup(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Errorf("Serve = %v, want %v", err, context.Canceled)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	return path
}

func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(path)
	if err != nil {
		t.Fatalf("Dial(%s) = %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawDial connects without the Client, to send what a Client never would.
func rawDial(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 1<<20) // root only; SO_SNDBUF suffices unless wmem_max is small
	tv := unix.NsecToTimeval((10 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatalf("connect %s: %v", path, err)
	}
	return fd
}

// rawSend is unix.Sendmsg, again when a signal interrupts it.
func rawSend(fd int, p, oob []byte, to unix.Sockaddr, flags int) error {
	for {
		if err := unix.Sendmsg(fd, p, oob, to, flags); err != unix.EINTR {
			return err
		}
	}
}

// rawRecv reads one response; ok is false at the end of the connection.
func rawRecv(t *testing.T, fd int) (resp Response, ok bool) {
	t.Helper()
	buf := make([]byte, MaxFrame+1)
	n, _, _, _, err := unix.Recvmsg(fd, buf, nil, 0)
	for err == unix.EINTR { // the runtime's preemption signals
		n, _, _, _, err = unix.Recvmsg(fd, buf, nil, 0)
	}
	if err != nil {
		t.Fatalf("recvmsg: %v", err)
	}
	if n == 0 {
		return Response{}, false
	}
	resp, err = DecodeResponse(buf[:n])
	if err != nil {
		t.Fatalf("DecodeResponse(%q) = %v", buf[:n], err)
	}
	return resp, true
}

// refused sends frame (with fds) and checks that the daemon answers with
// an error of kind that mentions msg against id, then hangs up.
func refused(t *testing.T, path string, frame []byte, fds []int, id uint64, kind, msg string) {
	t.Helper()
	fd := rawDial(t, path)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := rawSend(fd, frame, oob, nil, 0); err != nil {
		t.Fatalf("sendmsg of %d bytes: %v", len(frame), err)
	}
	resp, ok := rawRecv(t, fd)
	if !ok {
		t.Fatalf("frame %.80q: the daemon hung up without an answer", frame)
	}
	if resp.Error == nil || resp.Error.Kind != kind || !strings.Contains(resp.Error.Message, msg) || resp.ID != id || !resp.Final {
		t.Errorf("frame %.80q: answer %+v (error %v), want final error %s with %q for id %d", frame, resp, resp.Error, kind, msg, id)
	}
	if _, ok := rawRecv(t, fd); ok {
		t.Errorf("frame %.80q: the connection stayed open after the refusal", frame)
	}
}

func TestRoundTrip(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	ctx := context.Background()
	for _, msg := range []string{"hello", "", "ünïcode <&>", strings.Repeat("z", 100<<10)} {
		var got struct {
			Msg string `json:"msg"`
		}
		if err := c.Do(ctx, "echo", map[string]string{"msg": msg}, nil, &got); err != nil {
			t.Fatalf("Do(echo %.20q) = %v", msg, err)
		}
		if got.Msg != msg {
			t.Errorf("Do(echo %.20q) = %.20q", msg, got.Msg)
		}
	}
	// Concurrent Calls on one Client take turns.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int
			msg := strings.Repeat("a", i)
			if err := c.Do(ctx, "len", map[string]string{"msg": msg}, nil, &n); err != nil || n != i {
				t.Errorf("Do(len %d) = %d, %v", i, n, err)
			}
		}()
	}
	wg.Wait()
}

func TestSeveralResponses(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	for range 2 {
		var got []string
		err := c.Call(context.Background(), "exec", nil, nil, func(r Response) error {
			got = append(got, fmt.Sprintf("final=%v result=%s", r.Final, r.Result))
			return nil
		})
		if err != nil {
			t.Fatalf("Call(exec) = %v", err)
		}
		want := []string{`final=false result={"state":"started"}`, `final=false result={"state":"running"}`, `final=true result=`}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("responses (-want +got):\n%s", diff)
		}
	}
	// Do refuses an operation that answers more than once.
	if err := c.Do(context.Background(), "exec", nil, nil, nil); err == nil || !strings.Contains(err.Error(), "use Call") {
		t.Errorf("Do(exec) = %v, want a refusal naming Call", err)
	}
}

func TestVersionRefused(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	frame := []byte(`{"version":"cordon-host/v2","id":7,"op":"ping","features":["streams"]}`)
	refused(t, path, frame, nil, 7, KindVersion,
		"this daemon speaks cordon-host/v1; the client sent cordon-host/v2: upgrade the client or the daemon")
}

func TestOversizedFrame(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	huge := make([]byte, MaxFrame+100)
	for i := range huge {
		huge[i] = ' '
	}
	refused(t, path, huge, nil, 0, KindTooLarge, "larger than the limit of 262144 bytes")
	refused(t, path, huge[:MaxFrame+1], nil, 0, KindTooLarge, "larger than the limit")

	// A frame of exactly MaxFrame bytes is served.
	head, tail := `{"version":"cordon-host/v1","id":1,"op":"len","args":{"msg":"`, `"}}`
	pad := MaxFrame - len(head) - len(tail)
	frame := []byte(head + strings.Repeat("p", pad) + tail)
	fd := rawDial(t, path)
	if err := rawSend(fd, frame, nil, nil, 0); err != nil {
		t.Fatalf("sendmsg of %d bytes: %v", len(frame), err)
	}
	resp, ok := rawRecv(t, fd)
	if !ok || resp.Error != nil || string(resp.Result) != fmt.Sprint(pad) {
		t.Errorf("frame of MaxFrame bytes: answer %+v (error %v), want result %d", resp, resp.Error, pad)
	}

	// The Client refuses to send too much, and stays usable.
	c := dial(t, path)
	err := c.Do(context.Background(), "len", map[string]string{"msg": strings.Repeat("x", MaxFrame)}, nil, nil)
	if KindOf(err) != KindTooLarge {
		t.Errorf("Do(huge args) = %v, want too_large", err)
	}
	var n int
	if err := c.Do(context.Background(), "len", map[string]string{"msg": "abc"}, nil, &n); err != nil || n != 3 {
		t.Errorf("Do(len) after a refused call = %d, %v", n, err)
	}
	// A result too large to send is refused to the handler.
	if err := c.Do(context.Background(), "big", nil, nil, nil); KindOf(err) != KindTooLarge {
		t.Errorf("Do(big) = %v, want too_large", err)
	}
}

func TestMalformedFrames(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	for _, tc := range []struct {
		name, frame, kind, msg string
		id                     uint64
	}{
		{"not json", `{"version":"cordon-host/v1","id":1,"op":`, KindBadRequest, "malformed request", 0},
		{"garbage", "\x00\x01\x02", KindBadRequest, "malformed request", 0},
		{"duplicate op", `{"version":"cordon-host/v1","id":2,"op":"echo","op":"internal"}`, KindBadRequest, "member op appears twice", 0},
		{"duplicate in args", `{"version":"cordon-host/v1","id":2,"op":"echo","args":{"msg":"a","msg":"b"}}`, KindBadRequest, "member msg appears twice", 0},
		{"unknown field", `{"version":"cordon-host/v1","id":3,"op":"echo","host_path":"/etc"}`, KindBadRequest, "unknown member host_path", 3},
		{"bad op", `{"version":"cordon-host/v1","id":4,"op":"Echo"}`, KindBadRequest, "bad operation name Echo", 4},
		{"op with path", `{"version":"cordon-host/v1","id":4,"op":"../../bin/sh"}`, KindBadRequest, "bad operation name", 4},
		{"op with shell", `{"version":"cordon-host/v1","id":4,"op":"echo;reboot"}`, KindBadRequest, "bad operation name", 4},
		{"id zero", `{"version":"cordon-host/v1","id":0,"op":"echo"}`, KindBadRequest, "id must be", 0},
		{"args not object", `{"version":"cordon-host/v1","id":5,"op":"echo","args":"rm -rf /"}`, KindBadRequest, "args must be an object", 5},
		{"no version", `{"id":6,"op":"echo"}`, KindVersion, "the client sent no version", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused(t, path, []byte(tc.frame), nil, tc.id, tc.kind, tc.msg)
		})
	}
}

// openFDs counts this process's descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestTooManyFiles(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	var fds []int
	for range MaxFiles + 1 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		fds = append(fds, int(w.Fd()))
	}
	before := openFDs(t)
	fd := rawDial(t, path)
	frame := []byte(`{"version":"cordon-host/v1","id":9,"op":"write"}`)
	if err := rawSend(fd, frame, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	resp, ok := rawRecv(t, fd)
	if !ok || resp.Error == nil || resp.Error.Kind != KindBadRequest || !strings.Contains(resp.Error.Message, "too many descriptors") {
		t.Fatalf("answer %+v (error %v), want bad_request about too many descriptors", resp, resp.Error)
	}
	if _, ok := rawRecv(t, fd); ok {
		t.Errorf("the connection stayed open")
	}
	// Every descriptor the daemon received is closed again, and so is
	// its end of the connection: only the test's own end is new.
	if after := openFDs(t); after != before+1 {
		t.Errorf("%d descriptors open after the refusal, want %d: the daemon kept some", after, before+1)
	}

	// The Client refuses before sending.
	var files []*os.File
	for range MaxFiles + 1 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	c := dial(t, path)
	if err := c.Do(context.Background(), "count", nil, files, nil); KindOf(err) != KindBadRequest {
		t.Errorf("Do with %d files = %v, want bad_request", len(files), err)
	}
	var n int
	if err := c.Do(context.Background(), "count", nil, files[:MaxFiles], &n); err != nil || n != MaxFiles {
		t.Errorf("Do with %d files = %d, %v", MaxFiles, n, err)
	}
}

func TestFilePassing(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got struct {
		Cloexec bool `json:"cloexec"`
	}
	if err := c.Do(context.Background(), "write", nil, []*os.File{w}, &got); err != nil {
		t.Fatalf("Do(write) = %v", err)
	}
	w.Close() // the daemon closed its copy; now the pipe has no writer
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello through the descriptor" {
		t.Errorf("read from the pipe = %q, %v", b, err)
	}
	if !got.Cloexec {
		t.Errorf("the received descriptor is not close-on-exec")
	}
}

// A response's descriptors reach a client that asked for them
// (CallFiles), close-on-exec; a client that did not (Call) refuses the
// response and keeps none of them: the control that Call is what refuses.
func TestResponseFiles(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	var got []*os.File
	err := c.CallFiles(context.Background(), "give", nil, nil, 1, func(r Response) error {
		got = append(got, r.Files...)
		return nil
	})
	if err != nil || len(got) != 1 {
		t.Fatalf("CallFiles(give) = %v with %d descriptors, want 1", err, len(got))
	}
	flags, err := unix.FcntlInt(got[0].Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the received descriptor: flags %#x, %v; want close-on-exec", flags, err)
	}
	if _, err := got[0].WriteString("x"); err != nil {
		t.Errorf("write to the received pipe: %v", err)
	}
	got[0].Close()

	before := openFDs(t)
	c2 := dial(t, path)
	err = c2.Call(context.Background(), "give", nil, nil, func(Response) error { return nil })
	if KindOf(err) != KindBadRequest || !strings.Contains(err.Error(), "descriptors where none belong") {
		t.Errorf("Call(give) = %v, want bad_request: descriptors where none belong", err)
	}
	c2.Close()
	// The server's end of c2 closes when it sees the hang-up.
	// (The first call's pipe may close meanwhile: fewer is fine.)
	for i := 0; i < 100 && openFDs(t) > before; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after the refusal, %d before: the client kept some", after, before)
	}
	if err := c.CallFiles(context.Background(), "give", nil, nil, MaxFiles+1, nil); KindOf(err) != KindBadRequest {
		t.Errorf("CallFiles with maxFiles %d = %v, want bad_request", MaxFiles+1, err)
	}
}

func TestPeerCredentials(t *testing.T) {
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	var p Peer
	if err := c.Do(context.Background(), "peer", nil, nil, &p); err != nil {
		t.Fatal(err)
	}
	want := Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: int32(os.Getpid())}
	if p.UID != want.UID || p.GID != want.GID || p.PID != want.PID {
		t.Errorf("peer = %+v, want %+v", p, want)
	}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != len(groups) {
		t.Errorf("peer groups = %v, want %v", p.Groups, groups)
	}
	for _, g := range groups {
		if !p.InGroup(uint32(g)) {
			t.Errorf("peer groups = %v, want %v (%d missing)", p.Groups, groups, g)
		}
	}
}

func TestPeerOwns(t *testing.T) {
	testkit.RequireRoot(t)
	path := serve(t, newTestHandler().serve, nil)
	c := dial(t, path)
	dir := t.TempDir()
	mine, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	if err := c.Do(context.Background(), "owns", nil, []*os.File{mine}, nil); err != nil {
		t.Errorf("owns(own directory) = %v", err)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	theirs, err := os.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	err = c.Do(context.Background(), "owns", nil, []*os.File{mine, theirs}, nil)
	if KindOf(err) != KindUnauthorized || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("owns(another's directory) = %v, want unauthorized", err)
	}
}

func TestHandlerErrors(t *testing.T) {
	th := newTestHandler()
	path := serve(t, th.serve, nil)
	c := dial(t, path)
	ctx := context.Background()
	err := c.Do(ctx, "notfound", nil, nil, nil)
	var e *Error
	if !errors.As(err, &e) || *e != (Error{Kind: KindNotFound, Message: "no sandbox web"}) {
		t.Errorf("Do(notfound) = %v, want not_found: no sandbox web", err)
	}
	// A failure kind survives the hop: failure.KindOf reads it off the
	// decoded error on the client.
	err = c.Do(ctx, "refused", nil, nil, nil)
	if failure.KindOf(err) != failure.KindEvidence || KindOf(err) != KindConflict {
		t.Errorf("Do(refused) = %v (failure %q), want conflict carrying evidence_insufficient", err, failure.KindOf(err))
	}
	err = c.Do(ctx, "internal", nil, nil, nil)
	if KindOf(err) != KindInternal || strings.Contains(err.Error(), "/var/lib") {
		t.Errorf("Do(internal) = %v, want internal without the detail", err)
	}
	err = c.Do(ctx, "nosuchop", nil, nil, nil)
	if KindOf(err) != KindBadRequest {
		t.Errorf("Do(nosuchop) = %v, want bad_request", err)
	}
	var s string
	if err := c.Do(ctx, "twice", nil, nil, &s); err != nil || s != "first" {
		t.Errorf("Do(twice) = %q, %v", s, err)
	}
	if err := <-th.afterErr; err == nil {
		t.Errorf("reply after the final response = nil, want an error")
	}
	// Errors do not end the connection.
	if err := c.Do(ctx, "echo", map[string]string{"msg": "still here"}, nil, nil); err != nil {
		t.Errorf("Do(echo) after errors = %v", err)
	}
	// Bad arguments are refused before anything is sent.
	if err := c.Do(ctx, "Bad Op", nil, nil, nil); KindOf(err) != KindBadRequest {
		t.Errorf("Do(bad op) = %v, want bad_request", err)
	}
	if err := c.Do(ctx, "echo", []string{"not", "an", "object"}, nil, nil); KindOf(err) != KindBadRequest {
		t.Errorf("Do(array args) = %v, want bad_request", err)
	}
}

func TestCancelEndsHandler(t *testing.T) {
	th := newTestHandler()
	path := serve(t, th.serve, nil)
	c := dial(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-th.started
		cancel()
	}()
	err := c.Call(ctx, "block", nil, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Call(block) = %v, want %v", err, context.Canceled)
	}
	select {
	case <-th.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end when the client hung up")
	}
	if err := c.Do(context.Background(), "echo", nil, nil, nil); err == nil {
		t.Errorf("Do after a cancelled Call = nil, want an error (the connection is out of step)")
	}
	// Different connections are served concurrently.
	c1, c2 := dial(t, path), dial(t, path)
	ctx1, cancel1 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c1.Call(ctx1, "block", nil, nil, nil) }()
	<-th.started
	if err := c2.Do(context.Background(), "echo", nil, nil, nil); err != nil {
		t.Errorf("Do on a second connection while the first blocks = %v", err)
	}
	cancel1()
	<-done
	<-th.cancelled
}

func TestDeadline(t *testing.T) {
	th := newTestHandler()
	path := serve(t, th.serve, nil)
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "block", nil, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call(block) = %v, want %v", err, context.DeadlineExceeded)
	}
	<-th.cancelled
}

func TestServeStops(t *testing.T) {
	th := newTestHandler()
	path := filepath.Join(t.TempDir(), "cordon.sock")
	l, err := Listen(path, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, th.serve) }()
	c := dial(t, path)
	callErr := make(chan error, 1)
	go func() { callErr <- c.Call(context.Background(), "block", nil, nil, nil) }()
	<-th.started
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Serve = %v, want %v", err, context.Canceled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	<-th.cancelled
	if err := <-callErr; KindOf(err) != KindUnavailable || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("Call across the shutdown = %v, want unavailable: the daemon is stopping", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Serve returned: %v, want it removed", err)
	}
	if err := l.Serve(context.Background(), th.serve); err == nil {
		t.Errorf("second Serve = nil, want an error")
	}
}

func TestMaxConns(t *testing.T) {
	path := serve(t, newTestHandler().serve, func(l *Listener) { l.MaxConns = 1 })
	c1 := dial(t, path)
	if err := c1.Do(context.Background(), "echo", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// Root has its own reserve of RootReserve connections, MaxConns
		// aside: fill it, then one more is refused.
		for range RootReserve - 1 {
			if err := dial(t, path).Do(context.Background(), "echo", nil, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	c2 := dial(t, path)
	err := c2.Do(context.Background(), "echo", nil, nil, nil)
	if KindOf(err) != KindUnavailable || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Do on a connection over the limit = %v, want unavailable", err)
	}
	c1.Close()
	// The slot frees once the daemon has seen the hang-up.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c3 := dial(t, path)
		err := c3.Do(context.Background(), "echo", nil, nil, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Do after the first connection closed = %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkCall measures one small request and its response over the
// socket, both ends in this process.
func BenchmarkCall(b *testing.B) {
	path := filepath.Join(b.TempDir(), "cordon.sock")
	l, err := Listen(path, 0, -1)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Serve(ctx, newTestHandler().serve)
	c, err := Dial(path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	args := map[string]string{"msg": "hello"}
	for b.Loop() {
		if err := c.Do(ctx, "len", args, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
