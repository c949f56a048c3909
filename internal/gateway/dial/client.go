package dial

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Client is a broker process's end of its channel: its only way to a
// network destination.
type Client struct {
	broker string
	conn   *net.UnixConn

	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan answer
	// sent are the requests the server has not answered yet, including
	// those whose caller gave up; each holds one of slots until its
	// answer arrives, so the client never has more under way than the
	// server serves (DefaultMaxConcurrent) and waits instead of being
	// refused as busy when its HTTP transport opens many connections.
	sent  map[uint64]bool
	slots chan struct{}
	err   error // set once the channel is gone
}

type answer struct {
	r  Response
	fd int // -1 when none
}

// NewClient takes over conn (a SOCK_SEQPACKET Unix socket to the
// privileged side's Server) and starts reading its answers.
func NewClient(broker string, conn *net.UnixConn) *Client {
	c := &Client{broker: broker, conn: conn, pending: map[uint64]chan answer{}, sent: map[uint64]bool{}, slots: make(chan struct{}, DefaultMaxConcurrent)}
	go c.read()
	return c
}

// Close closes the channel; requests under way fail.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) read() {
	buf := make([]byte, maxResponseBytes)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			c.fail(err)
			return
		}
		fds := rights(oob[:oobn])
		var r Response
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			closeAll(fds)
			continue
		}
		fd := -1
		if len(fds) > 0 {
			fd = fds[0]
			closeAll(fds[1:])
		}
		c.mu.Lock()
		ch, ok := c.pending[r.ID]
		delete(c.pending, r.ID)
		if c.sent[r.ID] {
			delete(c.sent, r.ID)
			<-c.slots
		}
		c.mu.Unlock()
		if !ok {
			closeAll([]int{fd})
			continue
		}
		ch <- answer{r: r, fd: fd}
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		err = errors.New("closed")
	}
	c.err = err
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	for id := range c.sent {
		delete(c.sent, id)
		<-c.slots
	}
}

func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// ask sends one request and waits for its answer or ctx.
func (c *Client) ask(ctx context.Context, req Request) (answer, error) {
	ch := make(chan answer, 1)
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return answer{}, ctx.Err()
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		<-c.slots
		return answer{}, &Refused{Broker: c.broker, Target: req.Host, Why: ReasonUnavailable}
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = ch
	c.sent[req.ID] = true
	c.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil {
		c.wmu.Lock()
		_, _, err = c.conn.WriteMsgUnix(b, nil, nil)
		c.wmu.Unlock()
	}
	if err != nil {
		c.forget(req.ID)
		c.mu.Lock()
		if c.sent[req.ID] { // never sent: nothing will answer it
			delete(c.sent, req.ID)
			<-c.slots
		}
		c.mu.Unlock()
		return answer{}, &Refused{Broker: c.broker, Target: req.Host, Why: ReasonUnavailable}
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return answer{}, &Refused{Broker: c.broker, Target: req.Host, Why: ReasonUnavailable}
		}
		return a, nil
	case <-ctx.Done():
		c.forget(req.ID)
		// The answer may have been delivered meanwhile: close its socket.
		select {
		case a, ok := <-ch:
			if ok {
				closeAll([]int{a.fd})
			}
		default:
		}
		return answer{}, ctx.Err()
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// DialContext asks the privileged side for a connection to addr
// ("host:port"); it is the broker's http.Transport DialContext. A refusal
// is a *Refused with the privileged side's reason.
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &Refused{Broker: c.broker, Target: addr, Why: ReasonNotDeclared}
	}
	host, ps, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(ps)
	if err != nil || perr != nil {
		return nil, &Refused{Broker: c.broker, Target: addr, Why: ReasonBadRequest}
	}
	a, err := c.ask(ctx, Request{Op: OpDial, Host: host, Port: port})
	if err != nil {
		return nil, err
	}
	if a.r.Reason != "" || a.fd < 0 {
		closeAll([]int{a.fd})
		why := a.r.Reason
		if why == "" {
			why = ReasonDialFailed
		}
		return nil, &Refused{Broker: c.broker, Target: addr, Why: why}
	}
	f := os.NewFile(uintptr(a.fd), "dialed "+addr)
	defer f.Close()
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("dial %s: adopt the socket: %w", addr, err)
	}
	return conn, nil
}

// LookupNetIP asks the privileged side to resolve and check host; it is
// the egress broker's Resolver. network is ignored ("ip").
func (c *Client) LookupNetIP(ctx context.Context, _ string, host string) ([]netip.Addr, error) {
	a, err := c.ask(ctx, Request{Op: OpResolve, Host: host})
	if err != nil {
		return nil, err
	}
	closeAll([]int{a.fd})
	if a.r.Reason != "" {
		return nil, &Refused{Broker: c.broker, Target: host, Why: a.r.Reason}
	}
	return a.r.Addrs, nil
}
