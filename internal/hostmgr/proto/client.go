package proto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Client is one connection to the daemon.
//
// Calls on one Client run one at a time: a Call waits for the previous one
// to end (or gives up when its ctx ends). The daemon serves the requests of
// a connection one at a time in order, so sending more before the first is
// answered would gain nothing; open several Clients to run operations
// concurrently.
//
// A Client whose Call was interrupted (its ctx ended, its onResponse
// failed before the final response, the daemon broke the protocol) is out
// of step with the daemon: it closes its connection — the daemon sees the
// hang-up and cancels the handler — and every later Call fails.
type Client struct {
	c      frameConn
	turn   chan struct{} // holds a token while no Call runs
	next   uint64        // the last request ID used
	err    error         // why the connection is unusable; guarded by turn
	closed atomic.Bool
}

func newClient(c frameConn) *Client {
	cl := &Client{c: c, turn: make(chan struct{}, 1)}
	cl.turn <- struct{}{}
	return cl
}

// Close closes the connection; a Call in progress fails.
func (cl *Client) Close() error {
	if cl.closed.Swap(true) {
		return nil
	}
	if err := cl.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// Call sends one request for op with args (encoded as a JSON object; nil
// for none) and files (at most MaxFiles, passed as descriptors; the caller
// keeps its own and closes them when it likes), then hands every response
// to onResponse (which may be nil) until the final one. It returns the
// *Error of a response that carries one — that response is not handed to
// onResponse — or the error onResponse returned, or a transport failure.
// Bad arguments are refused before anything is sent, with an *Error of
// KindBadRequest or KindTooLarge.
func (cl *Client) Call(ctx context.Context, op string, args any, files []*os.File, onResponse func(Response) error) error {
	return cl.CallFiles(ctx, op, args, files, 0, onResponse)
}

// CallFiles is Call for an operation whose responses may carry up to
// maxFiles descriptors each (Response.Files; more is a protocol
// violation that ends the connection). onResponse owns the descriptors
// it is handed; those of a response it is not handed are closed here. It
// is for the operations that define such a response (exec with a
// terminal); Call refuses every descriptor a response carries.
func (cl *Client) CallFiles(ctx context.Context, op string, args any, files []*os.File, maxFiles int, onResponse func(Response) error) error {
	if maxFiles < 0 || maxFiles > MaxFiles {
		return Errorf(KindBadRequest, "a response may carry at most %d descriptors", MaxFiles)
	}
	if err := ValidOp(op); err != nil {
		return err
	}
	if len(files) > MaxFiles {
		return Errorf(KindBadRequest, "%d descriptors in one request; at most %d", len(files), MaxFiles)
	}
	raw, err := encodeArgs(op, args)
	if err != nil {
		return err
	}
	select {
	case <-cl.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { cl.turn <- struct{}{} }()
	if cl.closed.Load() {
		return fmt.Errorf("proto: call on a closed client: %w", net.ErrClosed)
	}
	if cl.err != nil {
		return fmt.Errorf("proto: the connection failed earlier: %w", cl.err)
	}
	cl.next++
	id := cl.next
	b, err := EncodeRequest(Request{ID: id, Op: op, Args: raw})
	if err != nil {
		return err
	}

	// ctx governs the I/O: its deadline bounds it and its end interrupts it.
	if dl, ok := ctx.Deadline(); ok {
		cl.c.setDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { cl.c.setDeadline(time.Unix(1, 0)) })
	err = cl.exchange(id, op, b, files, maxFiles, onResponse)
	fired := !stop()
	if fired {
		// The deadline may be in the past for good, and a read or a
		// write may have been cut in the middle.
		cl.fail(ctx.Err())
	} else if cl.err == nil {
		cl.c.setDeadline(time.Time{})
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		cause := ctx.Err()
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		return fmt.Errorf("%s: %w", op, cause)
	}
	return err
}

// Do is Call for an operation that answers once: it decodes the final
// response's result, if any, into result (when result is not nil).
func (cl *Client) Do(ctx context.Context, op string, args any, files []*os.File, result any) error {
	return cl.Call(ctx, op, args, files, func(r Response) error {
		if !r.Final {
			return Errorf(KindBadRequest, "%s answers more than once; use Call", op)
		}
		if result == nil || len(r.Result) == 0 {
			return nil
		}
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("decode the result of %s: %w", op, err)
		}
		return nil
	})
}

// exchange sends one request and reads its responses; it holds the turn.
func (cl *Client) exchange(id uint64, op string, b []byte, files []*os.File, maxFiles int, onResponse func(Response) error) error {
	if err := cl.c.writeFrame(b, files); err != nil {
		if errors.Is(err, errPeerGone) {
			// A daemon that refuses a connection (too many) answers
			// before it reads anything and closes: its answer waits.
			if resp, rerr := cl.read(0); rerr == nil && resp.ID == 0 && resp.Error != nil {
				return cl.fail(resp.Error)
			}
		}
		var e *Error
		if errors.As(err, &e) {
			return err // refused before sending; the connection is fine
		}
		return cl.fail(fmt.Errorf("send %s: %w", op, err))
	}
	for {
		resp, err := cl.read(maxFiles)
		if err != nil {
			return cl.fail(err)
		}
		if len(resp.Files) > 0 && (resp.ID != id || resp.Error != nil || onResponse == nil) {
			closeFiles(resp.Files)
			resp.Files = nil
		}
		if resp.ID == 0 && resp.Error != nil {
			return cl.fail(resp.Error)
		}
		if resp.ID != id {
			return cl.fail(Errorf(KindBadRequest, "the daemon answered request %d while request %d was pending", resp.ID, id))
		}
		if resp.Error != nil {
			return resp.Error
		}
		if onResponse != nil {
			if err := onResponse(resp); err != nil {
				if !resp.Final {
					cl.fail(fmt.Errorf("request %d abandoned: %w", id, err))
				}
				return err
			}
		}
		if resp.Final {
			return nil
		}
	}
}

// read reads and decodes one response and the (at most maxFiles)
// descriptors beside it.
func (cl *Client) read(maxFiles int) (Response, error) {
	b, files, err := cl.c.readFrame(maxFiles)
	if errors.Is(err, errPeerGone) {
		// The daemon closed with our request unread. The kernel reports
		// that first, then still delivers what the daemon sent before:
		// its reason, usually.
		b, files, err = cl.c.readFrame(0)
	}
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return Response{}, err
		}
		return Response{}, fmt.Errorf("the daemon closed the connection: %w", err)
	}
	resp, err := DecodeResponse(b)
	if err != nil {
		closeFiles(files)
		return resp, err
	}
	resp.Files = files
	return resp, nil
}

// fail marks the connection unusable and closes it; it returns err.
func (cl *Client) fail(err error) error {
	if cl.err == nil {
		cl.err = err
		cl.c.Close()
	}
	return err
}

// encodeArgs encodes a Call's args: nothing for nil, else a JSON object.
func encodeArgs(op string, args any) (json.RawMessage, error) {
	if args == nil {
		return nil, nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, Errorf(KindBadRequest, "encode the args of %s: %v", op, err)
	}
	if bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, Errorf(KindBadRequest, "the args of %s must encode as a JSON object", op)
	}
	return b, nil
}
