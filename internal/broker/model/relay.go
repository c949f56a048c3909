package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// readChunk is the upstream read size of a stream: one read usually holds
// a few events, and each read's events are flushed to the agent at once.
const readChunk = 32 << 10

var errResponseTooLarge = errors.New("response too large")

// relayBuffered carries a response that is not an event stream: read it
// whole (within MaxResponseBytes), check it, redact it, send it.
func (b *Broker) relayBuffered(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, resp *http.Response, x *exchange) {
	data, err := readLimited(resp, b.lim.MaxResponseBytes, x.read[:0])
	x.read = data
	x.upBytes = int64(len(data))
	switch {
	case errors.Is(err, errResponseTooLarge):
		x.charge, x.outcome = chargeUnknown, "response exceeds limit"
		b.fail(w, x, kindUpstream, fmt.Sprintf("the model response exceeds %d bytes", b.lim.MaxResponseBytes))
		return
	case err != nil && ctx.Err() != nil:
		x.charge, x.outcome = chargeUnknown, "aborted: agent disconnected"
		return
	case err != nil:
		x.charge, x.outcome = chargeUnknown, "upstream read failed"
		b.fail(w, x, kindUpstream, "the model upstream response was cut off")
		return
	}
	st := resp.StatusCode
	switch {
	case st >= 200 && st < 300:
		if err := x.inspectBody(data); err != nil {
			x.charge, x.outcome = chargeUnknown, "malformed upstream response"
			b.fail(w, x, kindUpstream, "the model upstream sent a malformed response")
			return
		}
		if x.ep.count {
			x.charge = chargeNone
		}
	case st >= 300 && st < 400:
		x.charge, x.outcome = chargeNone, "upstream redirect refused"
		b.fail(w, x, kindUpstream, "the model upstream answered with a redirect, which the broker does not follow")
		return
	default:
		// A provider error generated nothing; it is passed on as the
		// provider's own API-shaped answer.
		x.charge, x.outcome = chargeNone, "upstream status "+strconv.Itoa(st)
	}
	x.write = x.m.AppendRedacted(x.write[:0], data)
	// The answer leaves only once its receipt is durable.
	if err := b.commit(ctx, x, len(x.write)); err != nil {
		x.write, x.withheld = x.write[:0], true
		// The upstream did the work, and it is charged: an SDK's
		// automatic retry of a 503 would pay for it again while the
		// log is still down (the Anthropic and OpenAI SDKs honour it).
		w.Header().Set("X-Should-Retry", "false")
		b.fail(w, x, kindUnavailable, errEvidence)
		return
	}
	h := w.Header()
	copyResponseHeaders(h, resp.Header, x.m)
	h.Set("Content-Length", strconv.Itoa(len(x.write)))
	w.WriteHeader(st)
	x.status = st
	b.send(w, rc, x)
}

// readLimited reads a response body of at most max bytes into buf.
func readLimited(resp *http.Response, max int64, buf []byte) ([]byte, error) {
	if resp.ContentLength > max {
		return buf, errResponseTooLarge
	}
	if n := resp.ContentLength; n > int64(cap(buf)) {
		buf = make([]byte, 0, n+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return buf, errResponseTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// relayStream carries an event stream incrementally: every upstream read is
// parsed into events, each complete event is inspected, redacted and sent,
// and the agent's connection is flushed before the next read. Only the
// stream's terminal event (and anything after it) waits: it is held until
// the call's receipt commits, and withheld, the stream ending with an
// error event instead, when the receipt cannot be recorded.
func (b *Broker) relayStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, resp *http.Response, x *exchange) {
	h := w.Header()
	copyResponseHeaders(h, resp.Header, x.m)
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(resp.StatusCode)
	x.status = resp.StatusCode
	if rc.Flush() != nil {
		x.outcome = "aborted: agent disconnected"
		x.cancel()
		return
	}
	x.red.Reset(x.m)
	if cap(x.read) < readChunk {
		x.read = make([]byte, readChunk)
	}
	buf := x.read[:readChunk]
	emit := func(ev *sseEvent) error {
		if err := x.inspectEvent(ev); err != nil {
			return err
		}
		if x.terminal() {
			x.held = x.red.Write(x.held, ev.raw)
		} else {
			x.write = x.red.Write(x.write, ev.raw)
		}
		return nil
	}
	var stop *refusal
	for stop == nil {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			x.upBytes += int64(n)
			if x.upBytes > b.lim.MaxResponseBytes {
				x.outcome = "response exceeds limit"
				stop = refuse(kindUpstream, fmt.Sprintf("the model response exceeds %d bytes; the stream was cut", b.lim.MaxResponseBytes))
				break
			}
			perr := x.parser.feed(buf[:n], emit)
			if !b.send(w, rc, x) {
				return
			}
			if perr != nil {
				x.outcome = "malformed upstream stream"
				stop = refuse(kindUpstream, "the model upstream sent a malformed event stream ("+streamError(perr)+"); the stream was cut")
				break
			}
		}
		switch {
		case rerr == nil:
		case rerr == io.EOF:
			if perr := x.parser.finish(emit); perr != nil {
				x.outcome = "malformed upstream stream"
				stop = refuse(kindUpstream, "the model upstream sent a malformed event stream ("+streamError(perr)+"); the stream was cut")
			} else if !x.done {
				x.outcome = "upstream stream incomplete"
				stop = refuse(kindUpstream, "the model upstream ended the stream before its final event")
			}
			if stop == nil {
				b.endStream(ctx, w, rc, x)
				return
			}
		case ctx.Err() != nil:
			x.outcome = "aborted: agent disconnected"
			return
		default:
			x.outcome = "upstream stream failed"
			stop = refuse(kindUpstream, "the model upstream stream was cut off")
		}
	}
	// Cut the stream: what was already judged goes out, then an error
	// event the agent's SDK understands, and the upstream is cancelled.
	x.cancel()
	if x.terminal() {
		// The terminator is never sent on a cut stream.
		x.held = x.red.Flush(x.held)[:0]
	} else {
		x.write = x.red.Flush(x.write)
	}
	x.write = errorEvent(x.write, x.api, x.ep.resp, stop.kind, stop.msg)
	b.send(w, rc, x)
}

// endStream ends a complete stream: the receipt commits, then the held
// terminal event(s) go out; when the receipt cannot be recorded the agent
// gets the API's error event instead and the stream ends without its
// terminator, so the SDK reports the call as failed.
func (b *Broker) endStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, x *exchange) {
	x.held = x.red.Flush(x.held)
	if err := b.commit(ctx, x, len(x.held)); err != nil {
		x.held, x.withheld = x.held[:0], true
		x.write = errorEvent(x.write, x.api, x.ep.resp, kindUnavailable, errEvidence)
		b.send(w, rc, x)
		return
	}
	x.write = append(x.write, x.held...)
	x.held = x.held[:0]
	b.send(w, rc, x)
}

// terminal reports whether the stream's terminal event was seen: the events
// from it on are held until the receipt commits. Gemini has no terminator:
// its final chunk is the one that finishes the last candidate (or blocks,
// or errs); an earlier candidate's finish is not the end.
func (x *exchange) terminal() bool {
	if x.api == apiGemini {
		return x.gFinal
	}
	return x.done
}

func streamError(err error) string {
	switch {
	case errors.Is(err, errSSELine), errors.Is(err, errSSEEvent), errors.Is(err, errSSETruncated):
		return err.Error()
	}
	return "an event is not valid JSON"
}

// send writes x.write to the agent and flushes it; false when the agent is
// gone or stalled, in which case the upstream call is cancelled.
func (b *Broker) send(w http.ResponseWriter, rc *http.ResponseController, x *exchange) bool {
	if len(x.write) == 0 {
		return true
	}
	if rc.SetWriteDeadline(time.Now().Add(stallTimeout)) == nil {
		x.deadline = true
	}
	n, err := w.Write(x.write)
	x.out += int64(n)
	if n > 0 && x.rc.FirstByte == 0 {
		x.rc.FirstByte = b.now().Sub(x.start)
	}
	x.write = x.write[:0]
	if err == nil {
		err = rc.Flush()
	}
	if err != nil {
		x.outcome = "aborted: agent disconnected"
		x.cancel()
		return false
	}
	return true
}
