package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Line returns s with every character that would not show up as itself on a
// screen written as an escape: invalid UTF-8 bytes as \xNN, other
// invisible runes (controls including newline and tab, bidi controls,
// zero-width characters, non-ASCII spaces) as \uNNNN (a surrogate pair
// above U+FFFF), and the backslash itself as \\ so an escape in s cannot
// pass for one of ours. Clean text is returned unchanged but for
// backslashes.
func Line(s string) string { return escape(s, false) }

// Block is Line for multi-line text: newlines and tabs are kept, every
// other invisible character is escaped.
func Block(s string) string { return escape(s, true) }

func escape(s string, layout bool) string {
	if clean(s, layout) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case visible(r, layout):
			b.WriteString(s[i : i+n])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

func clean(s string, layout bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || r == '\\' || !visible(r, layout) {
			return false
		}
		i += n
	}
	return true
}

// visible: unicode.IsPrint is letters, marks, numbers, punctuation, symbols
// and the ASCII space; it excludes Cc (C0, DEL, C1), Cf (bidi controls,
// zero-width joiners, soft hyphen), Zl, Zp, other spaces and unassigned
// code points.
func visible(r rune, layout bool) bool {
	if layout && (r == '\n' || r == '\t') {
		return true
	}
	return unicode.IsPrint(r)
}
