package denial

import (
	"fmt"
	"strconv"
	"strings"
)

// cedarString is s as a Cedar string literal: printable ASCII but '"'
// and '\' as is, those two backslash-escaped, everything else as
// \u{hex}. Nothing in s can end the literal.
func cedarString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\u{%x}`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// yamlString is s as a YAML double-quoted scalar. Go's ASCII quoting
// uses only escapes YAML's double-quoted style shares (\" \\ \a \b \f
// \n \r \t \v \xNN \uNNNN \UNNNNNNNN) and leaves no byte outside
// printable ASCII, so s cannot end the scalar or start a line.
func yamlString(s string) string {
	return strconv.QuoteToASCII(s)
}

// globLiteral escapes the metacharacters of path.Match (the models[]
// globs' syntax) so the glob matches s and nothing else.
func globLiteral(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
