package model

import (
	"bytes"
	"errors"
)

// A bounded parser for the provider's server-sent events. The broker reads
// each event only as far as it needs (usage, tool candidates, the end of the
// stream) and passes the event's bytes on unchanged; the parser just finds
// event boundaries, the "event:" name and the joined "data:" lines, within
// fixed bounds whatever the upstream sends.

const (
	maxSSELine  = 1 << 20 // longest line (a Responses "response.completed" carries the whole output)
	maxSSEEvent = 2 << 20 // largest event, all its lines together
)

var (
	errSSELine      = errors.New("upstream stream line too long")
	errSSEEvent     = errors.New("upstream stream event too large")
	errSSETruncated = errors.New("upstream stream ended inside an event")
)

// sseEvent is one event. Its slices are valid only during the callback.
type sseEvent struct {
	name []byte // value of the "event:" field; nil when absent
	data []byte // "data:" values joined by '\n'; nil when there were none
	raw  []byte // the event's bytes as received, through its blank line
}

// sseParser splits a byte stream into events. The zero value is ready.
type sseParser struct {
	buf   []byte // from the start of the current event
	pos   int    // start of the first line not yet parsed
	scan  int    // end of the bytes searched for a line end
	name  [2]int // span of the event name in buf; name[1] == 0 when none
	data  [2]int // span of the only data line so far
	lines int    // data lines in the current event
	multi []byte // joined data when there is more than one line
	ev    sseEvent
}

// feed adds p and calls emit for every event it completes; an error from
// emit stops parsing and is returned.
func (p *sseParser) feed(b []byte, emit func(*sseEvent) error) error {
	p.buf = append(p.buf, b...)
	return p.parse(false, emit)
}

// finish reports whether the stream ended cleanly between events, emitting
// an event ended by a final lone CR.
func (p *sseParser) finish(emit func(*sseEvent) error) error {
	if err := p.parse(true, emit); err != nil {
		return err
	}
	if len(p.buf) > 0 {
		return errSSETruncated
	}
	return nil
}

func (p *sseParser) parse(eof bool, emit func(*sseEvent) error) error {
	start := 0 // start of the current event in buf
	defer func() { p.compact(start) }()
	for {
		line, next, ok := p.nextLine(eof)
		if !ok {
			if len(p.buf)-p.pos > maxSSELine {
				return errSSELine
			}
			if len(p.buf)-start > maxSSEEvent {
				return errSSEEvent
			}
			return nil
		}
		if len(line) > maxSSELine {
			return errSSELine
		}
		lineStart := p.pos
		p.pos = next
		if next-start > maxSSEEvent {
			return errSSEEvent
		}
		if len(line) == 0 {
			p.ev = sseEvent{raw: p.buf[start:next]}
			if p.name[1] != 0 {
				p.ev.name = p.buf[p.name[0]:p.name[1]]
			}
			switch {
			case p.lines == 1:
				p.ev.data = p.buf[p.data[0]:p.data[1]]
			case p.lines > 1:
				p.ev.data = p.multi
			}
			err := emit(&p.ev)
			p.ev = sseEvent{}
			start = next
			p.name, p.lines, p.multi = [2]int{}, 0, p.multi[:0]
			if err != nil {
				return err
			}
			continue
		}
		field, value := line, line[len(line):]
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			field, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		off := lineStart + (len(line) - len(value)) // start of value in buf
		switch string(field) {
		case "event":
			p.name = [2]int{off, off + len(value)}
			if len(value) == 0 {
				p.name = [2]int{}
			}
		case "data":
			p.lines++
			switch p.lines {
			case 1:
				p.data = [2]int{off, off + len(value)}
			case 2:
				p.multi = append(append(append(p.multi[:0], p.buf[p.data[0]:p.data[1]]...), '\n'), value...)
			default:
				p.multi = append(append(p.multi, '\n'), value...)
			}
		}
		// "id", "retry", comments (empty field) and unknown fields are
		// passed through unread.
	}
}

// nextLine returns the line at p.pos without its terminator (CRLF, LF or
// CR) and the offset after it; ok is false when the line is not complete.
func (p *sseParser) nextLine(eof bool) (line []byte, next int, ok bool) {
	// Bytes before p.scan are known to hold no terminator: a line that
	// arrives a few bytes at a time is not searched again from its start.
	from := max(p.pos, p.scan)
	rest := p.buf[from:]
	lf := bytes.IndexByte(rest, '\n')
	scope := rest
	if lf >= 0 {
		scope = rest[:lf]
	}
	if cr := bytes.IndexByte(scope, '\r'); cr >= 0 {
		switch {
		case cr+1 < len(rest) && rest[cr+1] == '\n':
			return p.buf[p.pos : from+cr], from + cr + 2, true
		case cr+1 < len(rest) || eof:
			return p.buf[p.pos : from+cr], from + cr + 1, true
		}
		p.scan = from + cr // a CR at the end: wait to see whether LF follows
		return nil, 0, false
	}
	if lf < 0 {
		p.scan = len(p.buf)
		return nil, 0, false
	}
	return p.buf[p.pos : from+lf], from + lf + 1, true
}

// compact drops the bytes of emitted events.
func (p *sseParser) compact(start int) {
	if start == 0 {
		return
	}
	n := copy(p.buf, p.buf[start:])
	p.buf = p.buf[:n]
	p.pos -= start
	p.scan = max(p.scan-start, 0)
	if p.name[1] != 0 {
		p.name[0] -= start
		p.name[1] -= start
	}
	if p.lines == 1 {
		p.data[0] -= start
		p.data[1] -= start
	}
	if n == 0 && cap(p.buf) > 64<<10 {
		p.buf = nil // do not keep a large event's buffer for the stream's life
	}
}

// reset readies the parser for another stream, keeping small buffers.
func (p *sseParser) reset() {
	buf, multi := p.buf[:0], p.multi[:0]
	if cap(buf) > 64<<10 {
		buf = nil
	}
	if cap(multi) > 64<<10 {
		multi = nil
	}
	*p = sseParser{buf: buf, multi: multi}
}
