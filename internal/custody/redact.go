package custody

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/textsafe"
)

// The one redactor: every custodied value is replaced, wherever it
// appears — in a log line, a receipt, a tool result or a model response —
// raw and in each spelling a JSON encoder may give it, including across
// the pieces of a stream.

// Replacement is what every custodied value is replaced with. It holds no
// byte that needs escaping in a JSON string, so a redacted JSON document
// stays valid.
const Replacement = "[REDACTED]"

// MinLen is the shortest value the redactor handles; shorter values would
// match ordinary text. Load refuses them.
const MinLen = 4

// maxHold bounds the bytes a Stream may hold back.
const maxHold = 64 << 10

// Redactor replaces custodied values. It matches each value raw and in
// the escaped spellings a JSON encoder may write it in (Go's, with HTML
// characters escaped; the ASCII-only form Python writes; each with "/"
// as "\/"), and in any mix of raw characters and JSON escapes (\uXXXX in
// either case, short escapes; escape.go). Every byte covered by a match is replaced: overlapping
// matches become one Replacement, so no piece of a value survives next
// to another. A Redactor is immutable and safe for
// concurrent use. It prints as "redactor(N values)". Make one with
// NewRedactor.
type Redactor struct {
	m sealed[matcher]
	n int
}

func (r *Redactor) String() string             { return fmt.Sprintf("redactor(%d values)", r.n) }
func (r *Redactor) GoString() string           { return r.String() }
func (r *Redactor) Format(f fmt.State, _ rune) { io.WriteString(f, r.String()) }

// matcher is a Redactor's state, sealed because it holds the values.
type matcher struct {
	values [][]byte // what it was built from, to notice changes
	pats   [][]byte // every spelling of every value of at least MinLen
	maxLen int
	first  [256]bool
	// esc are the values (valid UTF-8) to find in any JSON spelling
	// (escape.go); escFirst their raw first bytes, escMax the longest
	// spelling.
	esc      []escaped
	escFirst [256]bool
	escMax   int
}

// NewRedactor returns a redactor for values; values shorter than MinLen
// are ignored. The values are copied.
func NewRedactor(values [][]byte) *Redactor {
	m := &matcher{}
	n := 0
	for _, v := range values {
		m.values = append(m.values, bytes.Clone(v))
		if len(v) < MinLen || slices.ContainsFunc(m.values[:len(m.values)-1], func(w []byte) bool { return bytes.Equal(v, w) }) {
			continue
		}
		n++
		if utf8.Valid(v) {
			rs := []rune(string(v))
			m.esc = append(m.esc, escaped{runes: rs, first: v[0]})
			m.escFirst[v[0]] = true
			m.escMax = max(m.escMax, escLen(rs))
		}
		for _, p := range spellings(v) {
			if !slices.ContainsFunc(m.pats, func(q []byte) bool { return bytes.Equal(p, q) }) {
				m.pats = append(m.pats, p)
				m.maxLen = max(m.maxLen, len(p))
				m.first[p[0]] = true
			}
		}
	}
	return &Redactor{m: seal(m), n: n}
}

// spellings returns v and the forms a JSON encoder may write it in: Go's
// (HTML characters escaped), the ASCII-only form Python writes by default,
// and each of those with "/" written "\/".
func spellings(v []byte) [][]byte {
	out := [][]byte{bytes.Clone(v)}
	if q, err := json.Marshal(string(v)); err == nil && len(q) >= 2 {
		out = append(out, q[1:len(q)-1])
	}
	ascii := textsafe.AppendJSONString(nil, string(v))
	ascii = ascii[1 : len(ascii)-1]
	var b []byte
	for i := 0; i < len(ascii); {
		r, n := utf8.DecodeRune(ascii[i:])
		switch {
		case r < utf8.RuneSelf:
			b = append(b, ascii[i])
		case r > 0xffff:
			r1, r2 := (r-0x10000)>>10+0xd800, (r-0x10000)&0x3ff+0xdc00
			b = appendU(appendU(b, r1), r2)
		default:
			b = appendU(b, r)
		}
		i += n
	}
	out = append(out, b)
	// Encoders that write "/" as "\/" (PHP's json_encode by default).
	for _, p := range out[1:] {
		if bytes.IndexByte(p, '/') >= 0 {
			out = append(out, bytes.ReplaceAll(p, []byte("/"), []byte(`\/`)))
		}
	}
	return out
}

func appendU(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}

// Same reports whether r was built from exactly values, in order.
func (r *Redactor) Same(values [][]byte) bool {
	return slices.EqualFunc(r.m().values, values, bytes.Equal)
}

// Empty reports whether r redacts nothing (no value of at least MinLen).
func (r *Redactor) Empty() bool { return r == nil || len(r.m().pats) == 0 }

type span struct{ start, end int }

// spans appends the merged, sorted ranges of b covered by any pattern.
func (m *matcher) spans(dst []span, b []byte) []span {
	dst = dst[:0]
	for _, p := range m.pats {
		for i := 0; ; {
			j := bytes.Index(b[i:], p)
			if j < 0 {
				break
			}
			dst = append(dst, span{i + j, i + j + len(p)})
			i += j + 1
		}
	}
	dst = m.escSpans(dst, b)
	if len(dst) < 2 {
		return dst
	}
	slices.SortFunc(dst, func(a, b span) int { return a.start - b.start })
	out := dst[:1]
	for _, s := range dst[1:] {
		if last := &out[len(out)-1]; s.start < last.end {
			last.end = max(last.end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// partial returns the length of the longest suffix of b that is a proper
// prefix of a pattern, or of any JSON spelling of a value: bytes that
// might begin a value the next piece ends.
func (m *matcher) partial(b []byte) int {
	return max(m.litPartial(b), m.escPartial(b))
}

// litPartial is partial for the fixed spellings.
func (m *matcher) litPartial(b []byte) int {
	for i := max(0, len(b)-m.maxLen+1); i < len(b); i++ {
		if !m.first[b[i]] {
			continue
		}
		tail := b[i:]
		for _, p := range m.pats {
			if len(tail) < len(p) && bytes.HasPrefix(p, tail) {
				return len(tail)
			}
		}
	}
	return 0
}

// apply appends b[:cut] to dst with the spans inside it replaced.
func apply(dst, b []byte, spans []span, cut int) []byte {
	at := 0
	for _, s := range spans {
		if s.start >= cut {
			break
		}
		dst = append(append(dst, b[at:s.start]...), Replacement...)
		at = s.end
	}
	if at < cut {
		dst = append(dst, b[at:cut]...)
	}
	return dst
}

// AppendRedacted appends b to dst with every value replaced.
func (r *Redactor) AppendRedacted(dst, b []byte) []byte {
	if r.Empty() {
		return append(dst, b...)
	}
	var buf [8]span
	sp := r.m().spans(buf[:0], b)
	return apply(dst, b, sp, len(b))
}

// Redact returns b with every value replaced. When nothing matched it
// returns b itself, not a copy.
func (r *Redactor) Redact(b []byte) []byte {
	if !r.Contains(b) {
		return b
	}
	return r.AppendRedacted(make([]byte, 0, len(b)+len(Replacement)), b)
}

// RedactString is Redact for strings.
func (r *Redactor) RedactString(s string) string {
	b := []byte(s)
	if !r.Contains(b) {
		return s
	}
	return string(r.AppendRedacted(nil, b))
}

// Contains reports whether b holds a value (in any spelling).
func (r *Redactor) Contains(b []byte) bool {
	if r.Empty() {
		return false
	}
	m := r.m()
	for _, p := range m.pats {
		if bytes.Contains(b, p) {
			return true
		}
	}
	return len(m.escSpans(nil, b)) > 0
}

// ContainsFold is Contains with ASCII case folded: for header names,
// which the HTTP stack canonicalises (a value "sk-abc" in a name reaches
// the agent as "Sk-Abc"), and header values, where a case-changed value
// still gives most of it away.
func (r *Redactor) ContainsFold(b []byte) bool {
	if r.Empty() {
		return false
	}
	lb := bytes.ToLower(b)
	for _, p := range r.m().pats {
		if bytes.Contains(lb, bytes.ToLower(p)) {
			return true
		}
	}
	return false
}

// Stream redacts a stream written in pieces: a value split across two
// pieces is still caught, because the longest tail that could begin one
// is held back until the next piece (or Flush) decides it, and a match
// that runs past the end of a piece is held whole. Its output equals
// AppendRedacted of everything written, except that a run of overlapping
// matches longer than 64 KiB is sent (redacted) in parts. The zero Stream
// redacts nothing until Reset. Not safe for concurrent use; it prints
// without its contents.
type Stream struct {
	r     *Redactor
	held  []byte
	spans []span
}

func (s *Stream) String() string             { return "redacting stream" }
func (s *Stream) GoString() string           { return s.String() }
func (s *Stream) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// Reset empties s and makes it redact with r.
func (s *Stream) Reset(r *Redactor) {
	s.r, s.held = r, s.held[:0]
}

// Trim drops s's buffers when they grew past n bytes (for pooled
// streams).
func (s *Stream) Trim(n int) {
	if cap(s.held) > n {
		s.held = nil
	}
	if cap(s.spans) > n {
		s.spans = nil
	}
}

// Write appends to dst the redacted bytes of p that are safe to send now.
func (s *Stream) Write(dst, p []byte) []byte {
	if s.r.Empty() {
		return append(dst, p...)
	}
	m := s.r.m()
	buf := append(s.held, p...)
	s.spans = m.spans(s.spans, buf)
	cut := len(buf) - m.partial(buf)
	for _, sp := range s.spans {
		// A match that runs past cut is held whole, so a value that
		// overlaps it is judged with the bytes that follow; a run of
		// overlapping matches longer than maxHold is sent redacted.
		if sp.start < cut && cut < sp.end {
			if len(buf)-sp.start <= maxHold {
				cut = sp.start
			} else {
				cut = sp.end
			}
			break
		}
	}
	dst = apply(dst, buf, s.spans, cut)
	// Spans ending after cut end inside the held tail: they are found again.
	s.held = buf[:copy(buf, buf[cut:])]
	return dst
}

// Flush appends everything held back, redacted, and empties s.
func (s *Stream) Flush(dst []byte) []byte {
	if len(s.held) == 0 {
		return dst
	}
	dst = s.r.AppendRedacted(dst, s.held)
	s.held = s.held[:0]
	return dst
}

// RedactorCache keeps the Redactor of the custodian's current values and
// rebuilds it only when they change. Safe for concurrent use.
type RedactorCache struct{ p atomic.Pointer[Redactor] }

// Get returns a Redactor built from values.
func (c *RedactorCache) Get(values [][]byte) *Redactor {
	if r := c.p.Load(); r != nil && r.Same(values) {
		return r
	}
	r := NewRedactor(values)
	c.p.Store(r)
	return r
}

// Writer returns a writer that redacts everything written through it into
// w, even a value split across writes (Stream). Close writes what is held
// and does not close w. Each Write makes at most one Write to w. Not safe
// for concurrent use.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	st := &writerState{w: w}
	st.s.Reset(r)
	return &redactWriter{seal(st)}
}

// maxKeep bounds the scratch buffer a writer keeps between writes.
const maxKeep = 64 << 10

// redactWriter is sealed: its buffers hold pieces of values.
type redactWriter struct {
	st sealed[writerState]
}

type writerState struct {
	s      Stream
	w      io.Writer
	out    []byte // redacted output of the current write
	err    error  // sticky
	closed bool
}

func (rw *redactWriter) String() string             { return "redacting writer" }
func (rw *redactWriter) GoString() string           { return rw.String() }
func (rw *redactWriter) Format(f fmt.State, _ rune) { io.WriteString(f, rw.String()) }

func (rw *redactWriter) Write(p []byte) (int, error) {
	st := rw.st()
	if st.err != nil {
		return 0, st.err
	}
	if st.closed {
		return 0, ErrClosed
	}
	if err := st.emit(st.s.Write(st.out[:0], p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// emit writes out (when not empty) and keeps its buffer.
func (st *writerState) emit(out []byte) error {
	st.out = out
	if cap(st.out) > maxKeep {
		st.out = nil
	}
	if len(out) == 0 {
		return nil
	}
	if _, err := st.w.Write(out); err != nil {
		st.err = err
		return err
	}
	return nil
}

// Close writes the held tail, redacted as final input. It is idempotent.
func (rw *redactWriter) Close() error {
	st := rw.st()
	if st.closed || st.err != nil {
		return st.err
	}
	st.closed = true
	return st.emit(st.s.Flush(st.out[:0]))
}
