package textsafe

import (
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line returns s with every character that would not show up as itself on a
// screen written as an escape: invalid UTF-8 bytes as \xNN, other
// invisible runes (controls including newline and tab, bidi controls,
// zero-width and other default-ignorable characters, non-ASCII spaces,
// line and paragraph separators, tag characters, private-use and
// unassigned code points, combining marks stacked past MaxMarks) as \uNNNN
// (a surrogate pair above U+FFFF), and the backslash itself as \\ so an
// escape in s cannot pass for one of ours. Clean text is returned
// unchanged.
func Line(s string) string { out, _ := escape(s, modeLine, 0); return out }

// Block is Line for multi-line text: newlines and tabs are kept, every
// other invisible character (carriage return included) is escaped.
func Block(s string) string { out, _ := escape(s, modeBlock, 0); return out }

// JSON makes JSON text safe to show while keeping it the same JSON value:
// every invisible character (as in Line; the newlines and tabs of
// indentation are kept) is written as a JSON \u escape, which can occur
// only inside strings. Backslashes are JSON's own escapes and are kept.
// Invalid UTF-8, which JSON cannot carry, becomes \ufffd. b should be the
// output of encoding/json (Marshal, Indent or Compact); other text is
// escaped the same way but is not made valid JSON.
func JSON(b []byte) string { out, _ := escape(string(b), modeJSON, 0); return out }

// Invisible reports whether r, standing alone, is escaped by Line: it is
// the one predicate of what a person cannot see. Combining marks are
// visible here; their stacking limit depends on the text around them.
func Invisible(r rune) bool { return !visible(r, false) }

// MaxMarks is the longest run of combining marks shown as is after a base
// character; further marks in the run are escaped, so that stacked
// diacritics ("zalgo") cannot paint over neighbouring lines or cells and a
// long run of variation selectors cannot hide data in a short-looking
// string.
const MaxMarks = 4

type mode uint8

const (
	modeLine mode = iota
	modeBlock
	modeJSON
)

// escape escapes s in mode m; marks is the length of the run of combining
// marks s continues (0 at the start of a text), and the run at its end is
// returned, so that text written in pieces is escaped as a whole.
func escape(s string, m mode, marks int) (string, int) {
	if end, ok := clean(s, m, marks); ok {
		return s, end
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			if m == modeJSON {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteString(`\x`)
				b.WriteByte(hex[s[i]>>4])
				b.WriteByte(hex[s[i]&0xf])
			}
			marks = 0
		case r == '\\' && m != modeJSON:
			b.WriteString(`\\`)
			marks = 0
		case unicode.Is(unicode.M, r) && visible(r, false):
			marks++
			if marks > MaxMarks {
				writeU(&b, r)
			} else {
				b.WriteString(s[i : i+n])
			}
		case visible(r, m != modeLine):
			b.WriteString(s[i : i+n])
			marks = 0
		default:
			writeU(&b, r)
			marks = 0
		}
		i += n
	}
	return b.String(), marks
}

const hex = "0123456789abcdef"

func writeU(b *strings.Builder, r rune) {
	if r > 0xffff {
		r -= 0x10000
		writeU(b, 0xd800+(r>>10)&0x3ff)
		writeU(b, 0xdc00+r&0x3ff)
		return
	}
	b.WriteString(`\u`)
	b.WriteByte(hex[r>>12&0xf])
	b.WriteByte(hex[r>>8&0xf])
	b.WriteByte(hex[r>>4&0xf])
	b.WriteByte(hex[r&0xf])
}

func clean(s string, m mode, marks int) (int, bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			// Fast path: printable ASCII but the backslash.
			if c < 0x20 || c == 0x7f || (c == '\\' && m != modeJSON) {
				if m == modeLine || (c != '\n' && c != '\t') {
					return 0, false
				}
			}
			marks = 0
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || !visible(r, false) {
			return 0, false
		}
		if unicode.Is(unicode.M, r) {
			if marks++; marks > MaxMarks {
				return 0, false
			}
		} else {
			marks = 0
		}
		i += n
	}
	return marks, true
}

// visible: unicode.IsPrint is letters, marks, numbers, punctuation, symbols
// and the ASCII space; it excludes Cc (C0, DEL, C1), Cf (bidi controls and
// isolates, zero-width joiners, soft hyphen, tag characters), Zl and Zp
// (U+2028, U+2029), other spaces, private use and unassigned code points.
// Some default-ignorable code points are letters or marks that render as
// nothing (Hangul fillers U+115F, U+1160, U+3164, U+FFA0, the combining
// grapheme joiner U+034F, Khmer U+17B4/5): they are invisible too. So is
// U+2800, the blank braille pattern, which looks like a space. Variation
// selectors stay visible (emoji need them) under the marks limit.
func visible(r rune, layout bool) bool {
	if layout && (r == '\n' || r == '\t') {
		return true
	}
	if r < utf8.RuneSelf {
		return r >= 0x20 && r != 0x7f
	}
	if !unicode.IsPrint(r) || r == 0x2800 {
		return false
	}
	return !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// Writer applies Block to a stream written in pieces: a UTF-8 sequence
// cut between two writes is held until the next write (or Flush) instead of
// being escaped as invalid bytes. The run of combining marks is counted
// across writes: marks written a few at a time (or picked up a few per
// poll) stack no higher than in one write.
type Writer struct {
	w     io.Writer
	held  []byte
	marks int
}

// NewWriter returns a Writer escaping to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p (with what was held) and writes the result; it reports
// len(p) consumed unless the underlying write fails.
func (w *Writer) Write(p []byte) (int, error) {
	b := append(w.held, p...)
	cut := len(b)
	// Hold back an incomplete sequence at the end (at most 3 bytes).
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	w.held = append(w.held[:0:0], b[cut:]...)
	var out string
	out, w.marks = escape(string(b[:cut]), modeBlock, w.marks)
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held, escaped as invalid bytes.
func (w *Writer) Flush() error {
	if len(w.held) == 0 {
		return nil
	}
	out, marks := escape(string(w.held), modeBlock, w.marks)
	_, err := io.WriteString(w.w, out)
	w.held, w.marks = w.held[:0], marks
	return err
}
