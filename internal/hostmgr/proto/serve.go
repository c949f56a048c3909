package proto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// The serving loop, over any transport that moves whole frames with
// descriptors beside them. The Unix socket transport is in unix_linux.go.

// DefaultMaxConns is how many connections a Listener serves at once unless
// its MaxConns says otherwise. Further connections are refused with
// KindUnavailable.
const DefaultMaxConns = 256

// writeTimeout bounds one response write on the daemon's side, so that a
// client that stops reading cannot hold a handler forever.
const writeTimeout = 30 * time.Second

// stopGrace is how long a handler may still answer once its connection's
// context has ended.
const stopGrace = time.Second

// ErrUnsupported is returned by the transport on systems other than Linux.
var ErrUnsupported = errors.New("proto: the cordon-host transport needs Linux")

var (
	errAfterFinal  = errors.New("proto: reply after the final response")
	errAfterReturn = errors.New("proto: reply after the handler returned")
	// errPeerGone marks a write that failed because the peer closed.
	errPeerGone = errors.New("the peer closed the connection")
)

// frameConn is one connection of a frame transport.
type frameConn interface {
	// readFrame reads one frame, in a buffer of its own, and the
	// descriptors that came with it. A frame over MaxFrame, more than
	// maxFiles descriptors or a control message other than descriptors
	// is an *Error, with every received descriptor already closed. Any
	// other error ends the connection (the peer hung up, or the
	// connection was closed).
	readFrame(maxFiles int) ([]byte, []*os.File, error)
	// writeFrame sends one frame with files beside it. A failure
	// because the peer closed wraps errPeerGone.
	writeFrame(b []byte, files []*os.File) error
	// setDeadline bounds the reads and writes in progress and to come;
	// setReadDeadline the reads only.
	setDeadline(t time.Time) error
	setReadDeadline(t time.Time) error
	Close() error
}

// frame is one request read from a connection, or why it was refused.
type frame struct {
	req   Request
	files []*os.File
	err   *Error // refused: answer err against req.ID, then close
}

// serveConn serves the requests of one connection, one at a time in
// order, until the peer hangs up, a frame is refused, a response cannot be
// sent or ctx ends. It closes c.
func serveConn(ctx context.Context, c frameConn, peer Peer, h Handler, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	// The end of ctx (Serve stopping, or the peer's hang-up seen by the
	// reader) stops the reading at once, and leaves the handler a grace
	// period to send its final answer (a cancellation becomes
	// KindUnavailable) before the connection closes under it.
	context.AfterFunc(ctx, func() {
		c.setReadDeadline(time.Unix(1, 0))
		time.AfterFunc(stopGrace, func() { c.Close() })
	})
	frames := make(chan frame)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		readFrames(ctx, c, frames, cancel)
	}()
	defer func() {
		cancel()
		c.Close()
		<-readerDone
	}()
	for {
		var f frame
		select {
		case f = <-frames:
		case <-ctx.Done():
			return
		}
		if f.err != nil {
			b, err := EncodeResponse(Response{ID: f.req.ID, Final: true, Error: f.err})
			if err == nil {
				c.writeFrame(b, nil)
			}
			log.Info("cordon-host: refused a frame", "uid", peer.UID, "pid", peer.PID, "id", f.req.ID, "kind", f.err.Kind, "err", f.err.Message)
			return
		}
		if !serveRequest(ctx, c, peer, f.req, f.files, h, log) {
			return
		}
	}
}

// readFrames reads and decodes frames ahead of the handler, one at a time:
// it reads the next frame while the handler serves the current one, which
// is how it notices the peer hanging up (then it calls hangup). It stops
// after a refused frame.
func readFrames(ctx context.Context, c frameConn, out chan<- frame, hangup func()) {
	for {
		var f frame
		b, files, err := c.readFrame(MaxFiles)
		switch {
		case errors.As(err, &f.err):
		case err != nil:
			hangup()
			return
		default:
			req, err := DecodeRequest(b)
			f.req = req
			if err != nil {
				closeFiles(files)
				f.err = asError(err)
			} else {
				f.files = files
			}
		}
		select {
		case out <- f:
		case <-ctx.Done():
			closeFiles(f.files)
			return
		}
		if f.err != nil {
			return
		}
	}
}

// serveRequest runs the handler for one request and makes sure a final
// response goes out. It reports whether the connection can go on.
func serveRequest(ctx context.Context, c frameConn, peer Peer, req Request, files []*os.File, h Handler, log *slog.Logger) bool {
	r := &replier{c: c, id: req.ID}
	err := h(ctx, peer, req, files, r.reply)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	switch {
	case r.broken != nil:
		return false
	case r.final:
		if err != nil {
			log.Warn("cordon-host: handler returned an error after its final response", "op", req.Op, "id", req.ID, "err", err)
		}
		return true
	}
	resp := Response{Final: true}
	if err != nil {
		resp.Error = wireError(ctx, err, peer, req, log)
	}
	return r.send(resp) == nil
}

// replier sends the responses to one request.
type replier struct {
	mu     sync.Mutex
	c      frameConn
	id     uint64
	final  bool  // the final response went out
	done   bool  // the handler returned
	broken error // a send failed: the connection is over
}

func (r *replier) reply(resp Response) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
		return errAfterReturn
	case r.final:
		return errAfterFinal
	case r.broken != nil:
		return r.broken
	}
	if resp.Error != nil {
		resp.Final = true
	}
	return r.send(resp)
}

// send encodes and writes resp; r.mu is held. An encoding refusal (a
// result over MaxFrame, an unknown error kind) sends nothing and leaves the
// handler free to answer otherwise.
func (r *replier) send(resp Response) error {
	resp.Version = Version
	resp.ID = r.id
	b, err := EncodeResponse(resp)
	if err != nil {
		return err
	}
	if len(resp.Files) > MaxFiles {
		return Errorf(KindInternal, "%d descriptors in one response; at most %d", len(resp.Files), MaxFiles)
	}
	if err := r.c.writeFrame(b, resp.Files); err != nil {
		r.broken = fmt.Errorf("proto: send the response to request %d: %w", r.id, err)
		return r.broken
	}
	if resp.Final {
		r.final = true
	}
	return nil
}

// wireError turns what a handler returned into the error a client sees:
// an *Error as is, a cancellation as KindUnavailable, anything else as
// KindInternal with the detail in the log only (it may name host paths).
func wireError(ctx context.Context, err error, peer Peer, req Request, log *slog.Logger) *Error {
	var e *Error
	if errors.As(err, &e) && KnownKind(e.Kind) && e.Message != "" {
		msg := e.Message
		if len(msg) > 4096 {
			msg = msg[:4096] + "…"
		}
		return &Error{Kind: e.Kind, Message: msg, Failure: e.Failure}
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return Errorf(KindUnavailable, "request %d (%s) was cancelled: the daemon is stopping or the connection closed", req.ID, req.Op)
	}
	log.Error("cordon-host: handler failed", "op", req.Op, "id", req.ID, "uid", peer.UID, "pid", peer.PID, "err", err)
	return Errorf(KindInternal, "internal error serving %s (request %d); the daemon's log has the details", req.Op, req.ID)
}

// asError returns the *Error a decoder returned.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Errorf(KindBadRequest, "%v", err)
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
