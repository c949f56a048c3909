package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Client is a gateway process's end of one authority channel, bound to
// one broker: every request it sends names that broker. It is safe for
// concurrent use; answers may come in any order.
type Client struct {
	conn    net.Conn
	broker  string
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan Response
	closed  bool
}

// NewClient reads answers from conn until it closes.
func NewClient(conn net.Conn, broker string) *Client {
	c := &Client{conn: conn, broker: broker, pending: map[uint64]chan Response{}}
	go c.read()
	return c
}

// Broker is the broker the channel is bound to.
func (c *Client) Broker() string { return c.broker }

func (c *Client) read() {
	buf := make([]byte, MaxMessage)
	for {
		n, err := c.conn.Read(buf)
		if err != nil || n == 0 {
			break
		}
		var resp Response
		if json.Unmarshal(buf[:n], &resp) != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	c.mu.Lock()
	c.closed = true
	for id, ch := range c.pending {
		ch <- Response{ID: id, Error: &Error{Kind: KindUnavailable, Message: "authority connection closed"}}
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// Call sends op with body in and decodes the answer's body into out (also
// when the answer is a refusal, which is returned as its typed error).
// Any failure to reach the root side is crossing.ErrUnavailable.
func (c *Client) Call(ctx context.Context, op string, in, out any) error {
	req := Request{ID: c.next.Add(1), Broker: c.broker, Op: op}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%w: encode %s: %v", crossing.ErrUnavailable, op, err)
		}
		req.Body = b
	}
	ch := make(chan Response, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("%w: authority connection closed", crossing.ErrUnavailable)
	}
	c.pending[req.ID] = ch
	c.mu.Unlock()
	_, err := c.conn.Write(AppendRequest(nil, req))
	if err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	select {
	case resp := <-ch:
		if out != nil && len(resp.Body) > 0 {
			if err := json.Unmarshal(resp.Body, out); err != nil {
				return fmt.Errorf("%w: decode the answer to %s: %v", crossing.ErrUnavailable, op, err)
			}
		}
		return resp.Error.Err()
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return fmt.Errorf("%w: %v", crossing.ErrUnavailable, ctx.Err())
	}
}

// Ready tells the root side the gateway process serves its listeners.
func (c *Client) Ready() error {
	_, err := c.conn.Write(AppendRequest(nil, Request{Broker: c.broker, Op: OpReady}))
	return err
}
