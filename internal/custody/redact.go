package custody

import (
	"bytes"
	"fmt"
	"io"
	"slices"
)

// Replacement is what every custodied value is replaced with.
const Replacement = "[REDACTED]"

// MinLen is the shortest value the redactor handles; shorter values would
// match ordinary text. Load refuses them.
const MinLen = 4

// Redactor replaces custodied values. Matching is leftmost-longest: at
// each position the longest value that starts there is replaced and the
// scan resumes after it, so overlapping values redact the first. A
// Redactor is immutable and safe for concurrent use. It prints as
// "redactor(N values)". Make one with NewRedactor.
type Redactor struct {
	m sealed[matcher]
	n int
}

func (r *Redactor) String() string             { return fmt.Sprintf("redactor(%d values)", r.n) }
func (r *Redactor) GoString() string           { return r.String() }
func (r *Redactor) Format(f fmt.State, _ rune) { io.WriteString(f, r.String()) }

// matcher is a Redactor's state, sealed because it holds the values.
type matcher struct {
	// byFirst[c] are the values starting with byte c, longest first.
	byFirst [256][][]byte
	// isFirst[c] reports whether some value starts with c; firsts lists
	// those bytes.
	isFirst [256]uint8
	firsts  []byte
	// pairs has bit a<<8|b set when some value starts with bytes a, b: a
	// cheap filter before comparing values.
	pairs [256 * 256 / 64]uint64
}

func (r *matcher) pair(a, b byte) bool {
	k := uint(a)<<8 | uint(b)
	return r.pairs[k/64]&(1<<(k%64)) != 0
}

// NewRedactor returns a redactor for values; values shorter than MinLen
// are ignored. The values are copied.
func NewRedactor(values [][]byte) *Redactor {
	r := &matcher{}
	n := 0
	for _, v := range values {
		if len(v) < MinLen {
			continue
		}
		c := v[0]
		if slices.ContainsFunc(r.byFirst[c], func(w []byte) bool { return bytes.Equal(v, w) }) {
			continue
		}
		r.byFirst[c] = append(r.byFirst[c], slices.Clone(v))
		n++
		k := uint(c)<<8 | uint(v[1])
		r.pairs[k/64] |= 1 << (k % 64)
		if r.isFirst[c] == 0 {
			r.isFirst[c] = 1
			r.firsts = append(r.firsts, c)
		}
	}
	for _, c := range r.firsts {
		slices.SortStableFunc(r.byFirst[c], func(a, b []byte) int { return len(b) - len(a) })
	}
	return &Redactor{m: seal(r), n: n}
}

// Redact returns b with every value replaced. When nothing matched it
// returns b itself, not a copy.
func (r *Redactor) Redact(b []byte) []byte {
	out, _, replaced := r.m().scan(nil, b, true)
	if !replaced {
		return b
	}
	return out
}

// RedactString is Redact for strings.
func (r *Redactor) RedactString(s string) string {
	out, _, replaced := r.m().scan(nil, []byte(s), true)
	if !replaced {
		return s
	}
	return string(out)
}

// index returns the index of the first position of data that may start
// a value: its byte starts some value and, unless it is the last byte, so
// does the pair it begins. It serves values with many distinct first
// bytes; finder handles the common case.
func (r *matcher) index(data []byte) int {
	n := len(data)
	t := &r.isFirst
	for i := 0; i < n; i++ {
		// Skip eight bytes at a time while none starts a value.
		for ; i+8 <= n; i += 8 {
			b := data[i : i+8 : i+8]
			if t[b[0]]|t[b[1]]|t[b[2]]|t[b[3]]|t[b[4]]|t[b[5]]|t[b[6]]|t[b[7]] != 0 {
				break
			}
		}
		if i == n {
			break
		}
		if c := data[i]; t[c] != 0 && (i+1 == n || r.pair(c, data[i+1])) {
			return i
		}
	}
	return -1
}

// matchAt decides position j of data: n is the length of the longest value
// starting there (0 for none); hold reports that more input could still
// make a longer value match (never when final).
func (r *matcher) matchAt(data []byte, j int, final bool) (n int, hold bool) {
	rest := data[j:]
	for _, v := range r.byFirst[data[j]] {
		if len(rest) >= len(v) {
			if bytes.Equal(rest[:len(v)], v) {
				return len(v), false
			}
		} else if !final && bytes.Equal(rest, v[:len(rest)]) {
			return 0, true
		}
	}
	return 0, false
}

// scan redacts data. It stops at end, the first position that cannot be
// decided without more input (len(data) when final); data[end:] must be
// held. When replaced, dst has data[:end] redacted appended; otherwise dst
// is returned untouched and data[:end] needs no change.
func (r *matcher) scan(dst, data []byte, final bool) (out []byte, end int, replaced bool) {
	var f finder
	f.init(r, data)
	i, last := 0, 0
	end = len(data)
	for i < len(data) {
		j := f.next(i)
		if j < 0 {
			break
		}
		n, hold := r.matchAt(data, j, final)
		if hold {
			end = j
			break
		}
		if n == 0 {
			i = j + 1
			continue
		}
		if !replaced {
			// Room for the rest of data at once, not in doubling steps.
			dst = slices.Grow(dst, len(data)+len(Replacement))
			replaced = true
		}
		dst = append(dst, data[last:j]...)
		dst = append(dst, Replacement...)
		i = j + n
		last = i
	}
	if replaced {
		dst = append(dst, data[last:end]...)
	}
	return dst, end, replaced
}

// maxAnchors is how many distinct first bytes the finder tracks with
// IndexByte; more fall back to a table scan.
const maxAnchors = 4

// finder yields the positions of data that may start a value, in order.
// With few distinct first bytes it keeps the next occurrence of each, found
// by the vectorised bytes.IndexByte, and so reads data once per byte value.
type finder struct {
	r    *matcher
	data []byte
	// at[k] is the next position of r.firsts[k] at or after the last
	// search, -1 when there is none left, -2 before the first search.
	at [maxAnchors]int
}

func (f *finder) init(r *matcher, data []byte) {
	f.r, f.data = r, data
	for k := range f.at {
		f.at[k] = -2
	}
}

// next returns the first position >= from that may start a value, or -1.
func (f *finder) next(from int) int {
	r, data := f.r, f.data
	n := len(data)
	if len(r.firsts) > maxAnchors {
		if k := r.index(data[from:]); k >= 0 {
			return from + k
		}
		return -1
	}
	for {
		best := -1
		for k, c := range r.firsts {
			p := f.at[k]
			if p == -2 || (p >= 0 && p < from) {
				p = bytes.IndexByte(data[from:], c)
				if p >= 0 {
					p += from
				}
				f.at[k] = p
			}
			if p >= 0 && (best < 0 || p < best) {
				best = p
			}
		}
		if best < 0 || best+1 == n || r.pair(data[best], data[best+1]) {
			return best
		}
		from = best + 1
	}
}

// Writer returns a writer that redacts everything written through it into
// w, even a value split across writes: it holds back the input from the
// first position that could still begin a value (the longest tail that is
// a proper prefix of some value, so shorter than the longest value) and
// writes it once decided, at the latest on Close. The output equals Redact
// of everything written. Close flushes and does not close w. Each Write
// makes at most one Write to w. Not safe for concurrent use.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &redactWriter{seal(&writerState{m: r.m(), w: w})}
}

// maxKeep bounds the scratch buffers a writer keeps between writes.
const maxKeep = 64 << 10

// redactWriter is sealed: its buffers hold pieces of values.
type redactWriter struct {
	st sealed[writerState]
}

type writerState struct {
	m      *matcher
	w      io.Writer
	held   []byte // undecided tail of the input so far
	join   []byte // held + the current write
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
	data := p
	if len(st.held) > 0 {
		st.join = append(append(st.join[:0], st.held...), p...)
		data = st.join
	}
	if err := st.emit(data, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// emit redacts data, writes what is decided and holds the rest.
func (st *writerState) emit(data []byte, final bool) error {
	out, end, replaced := st.m.scan(st.out[:0], data, final)
	chunk := data[:end]
	if replaced {
		chunk, st.out = out, out
	}
	// st.held never aliases data: data is p, st.join, or a held slice
	// already detached by Close.
	st.held = append(st.held[:0], data[end:]...)
	if cap(st.join) > maxKeep {
		st.join = nil
	}
	if cap(st.out) > maxKeep {
		st.out = nil
	}
	if len(chunk) == 0 {
		return nil
	}
	if _, err := st.w.Write(chunk); err != nil {
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
	if len(st.held) == 0 {
		return nil
	}
	held := st.held
	st.held = nil
	return st.emit(held, true)
}
