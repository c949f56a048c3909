package custody

import (
	"bytes"
	"unicode/utf8"
)

// Escape-aware matching. JSON lets an encoder write any character of a
// string as \uXXXX, in either case of hex, and the short escapes \" \\ \/
// \b \f \n \r \t: .NET writes "+" as \u002B, Jackson control characters
// in upper case, Python mixes \n with \u00e9. The fixed spellings
// (spellings) cover the common encoders; these functions find a value in
// any mix of raw characters and escapes, so the model broker, which
// redacts the raw bytes of a response or stream, misses none of them.

// escaped is a value as runes, for matching it in any JSON spelling.
type escaped struct {
	runes []rune
	first byte // the first byte of its raw spelling
}

// escLen is the longest JSON spelling of v: every rune as \uXXXX, a
// surrogate pair for one past the basic plane.
func escLen(v []rune) int {
	n := 0
	for _, r := range v {
		if r > 0xffff {
			n += 12
		} else {
			n += 6
		}
	}
	return n
}

// unit decodes the JSON string unit at b[i:]: a raw UTF-8 rune or an
// escape. short: b ends before the unit does (more input could complete
// it); r is -1 for bytes that are no character (an invalid escape).
func unit(b []byte, i int) (r rune, n int, short bool) {
	if b[i] != '\\' {
		if !utf8.FullRune(b[i:]) {
			return 0, 0, true
		}
		r, n = utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return -1, 1, false // invalid UTF-8: no character
		}
		return r, n, false
	}
	if i+1 >= len(b) {
		return 0, 0, true
	}
	switch c := b[i+1]; c {
	case '"', '\\', '/':
		return rune(c), 2, false
	case 'b':
		return '\b', 2, false
	case 'f':
		return '\f', 2, false
	case 'n':
		return '\n', 2, false
	case 'r':
		return '\r', 2, false
	case 't':
		return '\t', 2, false
	case 'u':
	default:
		return -1, 2, false
	}
	hi, ok, short := hex4(b, i+2)
	if short || !ok {
		return -1, 2, short
	}
	if hi < 0xd800 || hi > 0xdbff {
		return hi, 6, false
	}
	// A high surrogate: one character with the low one that follows.
	if i+7 >= len(b) {
		if i+6 < len(b) && b[i+6] != '\\' {
			return -1, 6, false
		}
		return 0, 0, true
	}
	if b[i+6] != '\\' || b[i+7] != 'u' {
		return -1, 6, false
	}
	lo, ok, short := hex4(b, i+8)
	if short {
		return 0, 0, true
	}
	if !ok || lo < 0xdc00 || lo > 0xdfff {
		return -1, 6, false
	}
	return (hi-0xd800)<<10 + (lo - 0xdc00) + 0x10000, 12, false
}

// hex4 parses the four hex digits (either case) at b[i:]; short: b ends
// before them and what there is of them is hex.
func hex4(b []byte, i int) (r rune, ok, short bool) {
	for k := 0; k < 4; k++ {
		if i+k >= len(b) {
			return 0, true, true
		}
		c := b[i+k]
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false, false
		}
	}
	return r, true, false
}

// matchEsc matches v at b[i:] in any JSON spelling: end is where the
// match ends (0: none); partial: b ends inside a spelling of v.
func matchEsc(b []byte, i int, v []rune) (end int, partial bool) {
	j := i
	for _, want := range v {
		if j >= len(b) {
			return 0, true
		}
		r, n, short := unit(b, j)
		if short {
			return 0, true
		}
		if r != want {
			return 0, false
		}
		j += n
	}
	return j, false
}

// escStart reports whether b[i] may begin a spelling of e: its raw first
// byte, or a backslash that is not itself escaped.
func escStart(b []byte, i int, e *escaped) bool {
	if b[i] == e.first {
		return true
	}
	if b[i] != '\\' {
		return false
	}
	k := i
	for k > 0 && b[k-1] == '\\' {
		k--
	}
	return (i-k)%2 == 0
}

// escSpans appends the ranges of b where a value is spelled with an
// escape. Without a backslash in b there is none (the raw spelling is
// found by spans).
func (m *matcher) escSpans(dst []span, b []byte) []span {
	if len(m.esc) == 0 || bytes.IndexByte(b, '\\') < 0 {
		return dst
	}
	for i := range b {
		if b[i] != '\\' && !m.escFirst[b[i]] {
			continue
		}
		for k := range m.esc {
			e := &m.esc[k]
			if !escStart(b, i, e) {
				continue
			}
			if end, _ := matchEsc(b, i, e.runes); end > 0 {
				dst = append(dst, span{i, end})
			}
		}
	}
	return dst
}

// escPartial is the length of the longest suffix of b that begins some
// JSON spelling of a value without completing it.
func (m *matcher) escPartial(b []byte) int {
	from := max(0, len(b)-m.escMax+1)
	if len(m.esc) == 0 || bytes.IndexByte(b[from:], '\\') < 0 {
		// A spelling begun without an escape is a prefix of the raw
		// value: litPartial holds it.
		return 0
	}
	for i := from; i < len(b); i++ {
		if b[i] != '\\' && !m.escFirst[b[i]] {
			continue
		}
		for k := range m.esc {
			e := &m.esc[k]
			if !escStart(b, i, e) {
				continue
			}
			if _, partial := matchEsc(b, i, e.runes); partial {
				return len(b) - i
			}
		}
	}
	return 0
}
