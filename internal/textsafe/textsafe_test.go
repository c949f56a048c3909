package textsafe

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"claude-3", "claude-3"},
		{"a\x1b[2Kb", `a\u001b[2Kb`},
		{"\x1b]0;pwned\x07", `\u001b]0;pwned\u0007`},
		{"x\u202ey", `x\u202ey`},
		{"x\u2066y\u2069", `x\u2066y\u2069`},
		{"\x9b31m", `\x9b31m`},
		{"\u009b31m", `\u009b31m`},
		{"a\nb\tc\r", `a\u000ab\u0009c\u000d`},
		{`back\slash`, `back\\slash`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"é日本", "é日本"},
		{"\U000E0041", `\udb40\udc41`},
		{"\x7f", `\u007f`},
	} {
		if got := Line(tc.in); got != tc.want {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBlockKeepsLayout(t *testing.T) {
	if got, want := Block("a\n\tb\x1bc"), "a\n\tb\\u001bc"; got != want {
		t.Errorf("Block = %q, want %q", got, want)
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[31mred", "\u202e", "\xff\xfe", "a\\u001b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, layout := range []bool{false, true} {
			out := escape(s, layout)
			if !utf8.ValidString(out) {
				t.Fatalf("escape(%q) = %q: invalid UTF-8", s, out)
			}
			for _, r := range out {
				if layout && (r == '\n' || r == '\t') {
					continue
				}
				if !unicode.IsPrint(r) {
					t.Fatalf("escape(%q) = %q: contains %U", s, out, r)
				}
			}
			if clean(s, layout) && out != s {
				t.Fatalf("clean %q changed to %q", s, out)
			}
			if !layout && strings.ContainsAny(out, "\n\r\t") {
				t.Fatalf("Line(%q) = %q keeps a line break", s, out)
			}
		}
	})
}
