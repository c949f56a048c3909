package model

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync/atomic"
	"unicode/utf8"
)

// Redaction of custodied secret values from every byte sent to the agent.
// (internal/custody has the custodian's own redactor; the broker keeps this
// small one so the response path depends on nothing but the Secrets seam.)

// redactedMark replaces a secret. It holds no byte that needs escaping in a
// JSON string, so a redacted JSON document stays valid.
const redactedMark = "[REDACTED]"

// minSecretLen is the shortest value redacted: shorter ones would match
// ordinary text everywhere and say little about the secret.
const minSecretLen = 4

// maxHold bounds the bytes a streaming redactor may hold back.
const maxHold = 64 << 10

// matcher finds occurrences of the secret values, raw and in the escaped
// spellings a JSON encoder may give them.
type matcher struct {
	values [][]byte // the Values() it was built from, to notice changes
	pats   [][]byte
	maxLen int
	first  [256]bool
}

func newMatcher(values [][]byte) *matcher {
	m := &matcher{}
	for _, v := range values {
		m.values = append(m.values, bytes.Clone(v))
		if len(v) < minSecretLen {
			continue
		}
		for _, p := range spellings(v) {
			if !slices.ContainsFunc(m.pats, func(q []byte) bool { return bytes.Equal(p, q) }) {
				m.pats = append(m.pats, p)
				m.maxLen = max(m.maxLen, len(p))
				m.first[p[0]] = true
			}
		}
	}
	return m
}

// spellings returns v and the forms a JSON encoder may write it in: Go's
// (HTML characters escaped), the ASCII-only form Python writes by default,
// and each of those with "/" written "\/".
func spellings(v []byte) [][]byte {
	out := [][]byte{bytes.Clone(v)}
	if q, err := json.Marshal(string(v)); err == nil && len(q) >= 2 {
		out = append(out, q[1:len(q)-1])
	}
	ascii := appendJSONString(nil, string(v))
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

// same reports whether values are the ones m was built from.
func (m *matcher) same(values [][]byte) bool {
	return slices.EqualFunc(m.values, values, bytes.Equal)
}

func (m *matcher) empty() bool { return m == nil || len(m.pats) == 0 }

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
// prefix of a pattern: bytes that might begin a secret the next chunk ends.
func (m *matcher) partial(b []byte) int {
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
		dst = append(append(dst, b[at:s.start]...), redactedMark...)
		at = s.end
	}
	if at < cut {
		dst = append(dst, b[at:cut]...)
	}
	return dst
}

// redactAll appends b to dst with every secret replaced.
func (m *matcher) redactAll(dst, b []byte) []byte {
	if m.empty() {
		return append(dst, b...)
	}
	var buf [8]span
	sp := m.spans(buf[:0], b)
	return apply(dst, b, sp, len(b))
}

// contains reports whether b holds a secret.
func (m *matcher) contains(b []byte) bool {
	if m.empty() {
		return false
	}
	for _, p := range m.pats {
		if bytes.Contains(b, p) {
			return true
		}
	}
	return false
}

// containsFold is contains with ASCII case folded: for header names, which
// the HTTP stack canonicalises (a secret "sk-abc" in a name reaches the
// agent as "Sk-Abc"), and header values, where a case-changed secret still
// gives most of it away.
func (m *matcher) containsFold(b []byte) bool {
	if m.empty() {
		return false
	}
	lb := bytes.ToLower(b)
	for _, p := range m.pats {
		if bytes.Contains(lb, bytes.ToLower(p)) {
			return true
		}
	}
	return false
}

// redactor redacts a stream written in pieces: a secret split across two
// writes is still caught, because the longest tail that could begin one is
// held back until the next write (or flush) decides it.
type redactor struct {
	m     *matcher
	held  []byte
	spans []span
}

// write appends to dst the redacted bytes of p that are safe to send now.
func (r *redactor) write(dst, p []byte) []byte {
	if r.m.empty() {
		return append(dst, p...)
	}
	buf := append(r.held, p...)
	r.spans = r.m.spans(r.spans, buf)
	cut := len(buf) - r.m.partial(buf)
	for _, s := range r.spans {
		// A match that runs past cut is held whole, so a secret that
		// overlaps it is judged with the bytes that follow; a run of
		// overlapping matches longer than maxHold is sent redacted.
		if s.start < cut && cut < s.end {
			if len(buf)-s.start <= maxHold {
				cut = s.start
			} else {
				cut = s.end
			}
			break
		}
	}
	dst = apply(dst, buf, r.spans, cut)
	// Spans ending after cut end inside the held tail: they are found again.
	r.held = buf[:copy(buf, buf[cut:])]
	return dst
}

// flush appends everything held back, redacted, and empties the redactor.
func (r *redactor) flush(dst []byte) []byte {
	if len(r.held) == 0 {
		return dst
	}
	dst = r.m.redactAll(dst, r.held)
	r.held = r.held[:0]
	return dst
}

func (r *redactor) reset(m *matcher) {
	r.m, r.held = m, r.held[:0]
}

// matcherCache rebuilds the matcher only when the custodian's values change.
type matcherCache struct{ p atomic.Pointer[matcher] }

func (c *matcherCache) get(values [][]byte) *matcher {
	if m := c.p.Load(); m != nil && m.same(values) {
		return m
	}
	m := newMatcher(values)
	c.p.Store(m)
	return m
}
