package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
)

// A small strict JSON scanner. The broker never decodes request or response
// bodies into Go values: it walks them in place (no allocation on the common
// path) and reads the few members it needs. Walking the exact bytes it will
// forward, with the same rules a strict upstream parser applies, keeps the
// broker and the provider from disagreeing about what a body says.
//
// The grammar is RFC 8259's, as strict as encoding/json's: what the guard
// accepts, every conforming parser reads the same way.

var (
	errJSON      = errors.New("malformed JSON")
	errJSONDepth = errors.New("JSON nested too deeply")
)

// maxJSONDepth bounds nesting: deep enough for any real message history
// (tool results hold content blocks that hold sources), shallow enough that a
// hostile body cannot make the walk expensive.
const maxJSONDepth = 128

type jscan struct {
	b     []byte
	i     int
	depth int
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *jscan) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// end reports whether only white space is left.
func (s *jscan) end() bool { return s.peek() == 0 && s.i == len(s.b) }

// str scans the string at s.i and returns its contents without the quotes,
// and whether they hold escapes (then use unescape before comparing).
func (s *jscan) str() (raw []byte, esc bool, err error) {
	if s.peek() != '"' {
		return nil, false, errJSON
	}
	s.i++
	start := s.i
	for {
		q := bytes.IndexByte(s.b[s.i:], '"')
		if q < 0 {
			return nil, false, errJSON
		}
		bs := bytes.IndexByte(s.b[s.i:s.i+q], '\\')
		if bs < 0 {
			if hasControl(s.b[s.i : s.i+q]) {
				return nil, false, errJSON
			}
			s.i += q + 1
			return s.b[start : s.i-1], esc, nil
		}
		if hasControl(s.b[s.i : s.i+bs]) {
			return nil, false, errJSON
		}
		esc = true
		s.i += bs + 1
		if s.i >= len(s.b) {
			return nil, false, errJSON
		}
		switch s.b[s.i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.i++
		case 'u':
			if s.i+5 > len(s.b) {
				return nil, false, errJSON
			}
			for _, h := range s.b[s.i+1 : s.i+5] {
				if !isHex(h) {
					return nil, false, errJSON
				}
			}
			s.i += 5
		default:
			return nil, false, errJSON
		}
	}
}

// hasControl reports whether b holds a byte below 0x20, which a JSON string
// may not hold raw. Eight bytes at a time: long strings (base64 attachments)
// are most of a large body.
func hasControl(b []byte) bool {
	const highs, lim = 0x8080808080808080, 0x20 * 0x0101010101010101
	for len(b) >= 8 {
		v := binary.LittleEndian.Uint64(b)
		if (v-lim)&^v&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number scans a number with the RFC 8259 grammar and returns its bytes.
func (s *jscan) number() ([]byte, error) {
	s.peek()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return nil, errJSON
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return nil, errJSON
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return nil, errJSON
		}
	}
	return s.b[start:s.i], nil
}

func (s *jscan) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *jscan) literal(lit string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return errJSON
	}
	s.i += len(lit)
	return nil
}

// object walks the object at s.i, calling field with each key; field must
// consume the member's value (with skip or a typed scan).
func (s *jscan) object(field func(key []byte, esc bool) error) error {
	if s.peek() != '{' {
		return errJSON
	}
	if s.depth++; s.depth > maxJSONDepth {
		return errJSONDepth
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		key, esc, err := s.str()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return errJSON
		}
		s.i++
		if err := field(key, esc); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return errJSON
		}
	}
}

// array walks the array at s.i, calling elem once per element; elem must
// consume it.
func (s *jscan) array(elem func() error) error {
	if s.peek() != '[' {
		return errJSON
	}
	if s.depth++; s.depth > maxJSONDepth {
		return errJSONDepth
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return errJSON
		}
	}
}

// skip consumes one value of any kind, validating it.
func (s *jscan) skip() error {
	switch s.peek() {
	case '"':
		_, _, err := s.str()
		return err
	case '{':
		return s.object(func([]byte, bool) error { return s.skip() })
	case '[':
		return s.array(s.skip)
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		_, err := s.number()
		return err
	}
}

// value consumes one value and returns its bytes.
func (s *jscan) value() ([]byte, error) {
	s.peek()
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// unescape returns the decoded contents of a JSON string whose raw contents
// (between the quotes) are raw. It allocates; callers use it only when the
// scanner reported escapes.
func unescape(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var out string
	if json.Unmarshal(q, &out) != nil {
		return nil
	}
	return []byte(out)
}

// text returns the decoded string contents: raw itself when it holds no
// escapes.
func text(raw []byte, esc bool) []byte {
	if esc {
		return unescape(raw)
	}
	return raw
}

// member returns the raw value of key in the JSON object b (the last one if
// the key repeats), or nil when absent. It validates the whole object.
func member(b []byte, key string) ([]byte, error) {
	s := jscan{b: b}
	var v []byte
	err := s.object(func(k []byte, esc bool) error {
		if string(text(k, esc)) != key {
			return s.skip()
		}
		var err error
		v, err = s.value()
		return err
	})
	if err != nil {
		return nil, err
	}
	if !s.end() {
		return nil, errJSON
	}
	return v, nil
}

// dig follows keys through nested objects; nil when any is absent or not
// an object.
func dig(b []byte, keys ...string) []byte {
	for _, k := range keys {
		if len(b) == 0 || b[0] != '{' {
			return nil
		}
		v, err := member(b, k)
		if err != nil {
			return nil
		}
		b = v
	}
	return b
}

// each calls fn with the raw bytes of every element of the JSON array b; it
// does nothing when b is not an array.
func each(b []byte, fn func(elem []byte)) {
	if len(b) == 0 || b[0] != '[' {
		return
	}
	s := jscan{b: b}
	_ = s.array(func() error {
		v, err := s.value()
		if err == nil {
			fn(v)
		}
		return err
	})
}

// uintValue parses a JSON number that is a non-negative integer (an exponent or
// fraction that still denotes an integer, like 1e3 or 4096.0, is accepted).
// ok is false for anything else, or beyond 2^53.
func uintValue(b []byte) (n int64, ok bool) {
	const max = 1 << 53
	if len(b) == 0 || b[0] < '0' || b[0] > '9' {
		return 0, false
	}
	i := 0
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
		if n > max {
			return 0, false
		}
	}
	if i == len(b) {
		return n, true
	}
	// Rare spellings: let the float parser decide, then require an integer.
	var f float64
	if json.Unmarshal(b, &f) != nil || f < 0 || f > max || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}

// strValue returns the decoded string of a raw JSON value, ok false when it is
// not a string.
func strValue(b []byte) ([]byte, bool) {
	if len(b) < 2 || b[0] != '"' {
		return nil, false
	}
	s := jscan{b: b}
	raw, esc, err := s.str()
	if err != nil {
		return nil, false
	}
	return text(raw, esc), true
}
