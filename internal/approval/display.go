package approval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
)

// DisplayJSON renders an approval's arguments for a human: indented JSON
// with every character that would not show up on screen (controls,
// bidirectional overrides, zero-width and non-ASCII spaces) written as a
// JSON \u escape, so that what the approver reads is the same JSON value,
// with nothing hidden or reordered. Text that is not valid JSON is shown
// escaped the same way, unindented.
func DisplayJSON(raw []byte) string {
	var buf bytes.Buffer
	// Indent keeps trailing whitespace; a stray \r must not become \u000d
	// outside a string.
	if err := json.Indent(&buf, bytes.Trim(raw, " \t\r\n"), "", "  "); err != nil {
		return DisplayText(string(raw))
	}
	return escapeInvisible(buf.String(), true)
}

// CompactJSON is DisplayJSON on one line, for tables.
func CompactJSON(raw []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return DisplayText(string(raw))
	}
	return escapeInvisible(buf.String(), false)
}

// DisplayText writes every invisible character of s (including newlines
// and tabs) as a \u escape: for untrusted one-line fields such as a tool
// name, shown in a terminal or a page.
func DisplayText(s string) string {
	return escapeInvisible(s, false)
}

// escapeInvisible escapes each rune that is not graphic or the ASCII
// space; layout keeps the newlines and tabs of indentation.
func escapeInvisible(s string, layout bool) string {
	clean := true
	for _, r := range s {
		if !visible(r, layout) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case visible(r, layout):
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func visible(r rune, layout bool) bool {
	if layout && (r == '\n' || r == '\t') {
		return true
	}
	// IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII
	// space; not Cc, Cf (bidi controls, zero-width joiners), Zl, Zp or
	// other spaces. U+FFFD (from invalid UTF-8) is printable and visible.
	return unicode.IsPrint(r)
}
