package textsafe

import (
	"encoding/json"
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
		{"\x1b[1A\x1b[10D", `\u001b[1A\u001b[10D`},
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
		{"line\u2028sep\u2029", `line\u2028sep\u2029`},
		{"hangul\u3164filler\u115f", `hangul\u3164filler\u115f`},
		{"cgj\u034f", `cgj\u034f`},
		{"blank\u2800braille", `blank\u2800braille`},
		{"private\ue000", `private\ue000`},
		{"nbsp\u00a0", `nbsp\u00a0`},
		{"e\u0301\u0302\u0303\u0304", "e\u0301\u0302\u0303\u0304"},
		{"e\u0301\u0302\u0303\u0304\u0305\u0306", "e\u0301\u0302\u0303\u0304\\u0305\\u0306"},
		{"a\U000E0100\U000E0101\U000E0102\U000E0103\U000E0104", "a\U000E0100\U000E0101\U000E0102\U000E0103\\udb40\\udd04"},
		{"❤\ufe0f", "❤\ufe0f"},
	} {
		if got := Line(tc.in); got != tc.want {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBlockKeepsLayout(t *testing.T) {
	if got, want := Block("a\n\tb\x1bc\r\n"), "a\n\tb\\u001bc\\u000d\n"; got != want {
		t.Errorf("Block = %q, want %q", got, want)
	}
}

func TestJSON(t *testing.T) {
	v := map[string]string{"model": "m\x1b]0;x\x07\u202e\u009b\\\"\u2028", "bad": "\xff"}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(raw)
	want := "{\n  \"bad\": \"\\ufffd\",\n  \"model\": \"m\\u001b]0;x\\u0007\\u202e\\u009b\\\\\\\"\\u2028\"\n}"
	if got != want {
		t.Errorf("JSON(%s) = %q, want %q", raw, got, want)
	}
	if !Invisible('\u202e') || !Invisible('\x1b') || Invisible('a') || Invisible('\u0301') {
		t.Error("Invisible disagrees with Line")
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[31mred", "\u202e", "\xff\xfe", "a\\u001b", "e\u0301\u0301\u0301\u0301\u0301\u0301", "\u2028\U000E0041\u3164"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range []mode{modeLine, modeBlock, modeJSON} {
			out, _ := escape(s, m, 0)
			if !utf8.ValidString(out) {
				t.Fatalf("escape(%q, %d) = %q: invalid UTF-8", s, m, out)
			}
			marks := 0
			for _, r := range out {
				if m != modeLine && (r == '\n' || r == '\t') {
					marks = 0
					continue
				}
				if Invisible(r) {
					t.Fatalf("escape(%q, %d) = %q: contains %U", s, m, out, r)
				}
				if unicode.Is(unicode.M, r) {
					if marks++; marks > MaxMarks {
						t.Fatalf("escape(%q, %d) = %q: %d marks stacked", s, m, out, marks)
					}
				} else {
					marks = 0
				}
			}
			if _, ok := clean(s, m, 0); ok != (out == s) {
				t.Fatalf("clean(%q, %d) = %v but escape gave %q", s, m, ok, out)
			}
			if m == modeLine && strings.ContainsAny(out, "\n\r\t") {
				t.Fatalf("Line(%q) = %q keeps a line break", s, out)
			}
			if m == modeLine {
				// Unambiguous: the escaped text decodes back to s.
				if back := unescape(out); back != s {
					t.Fatalf("Line(%q) = %q decodes to %q", s, out, back)
				}
			}
		}
		// JSON: the same value, safe to show.
		raw, _ := json.Marshal(s)
		var back string
		if err := json.Unmarshal([]byte(JSON(raw)), &back); err != nil {
			t.Fatalf("JSON(%s) = %q is not JSON: %v", raw, JSON(raw), err)
		}
		var want string
		_ = json.Unmarshal(raw, &want)
		if back != want {
			t.Fatalf("JSON(%s) changed the value: %q, want %q", raw, back, want)
		}
	})
}

// unescape inverts Line, for the fuzz test.
func unescape(s string) string {
	var b []byte
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b = append(b, s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '\\':
			b = append(b, '\\')
			i += 2
		case 'x':
			b = append(b, unhex(s[i+2:i+4]))
			i += 4
		case 'u':
			r := rune(unhex(s[i+2:i+4]))<<8 | rune(unhex(s[i+4:i+6]))
			i += 6
			if utf16Surrogate(r) && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
				r2 := rune(unhex(s[i+2:i+4]))<<8 | rune(unhex(s[i+4:i+6]))
				r = (r-0xd800)<<10 + (r2 - 0xdc00) + 0x10000
				i += 6
			}
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

func utf16Surrogate(r rune) bool { return 0xd800 <= r && r < 0xdc00 }

func unhex(s string) byte {
	v := func(c byte) byte {
		if c >= 'a' {
			return c - 'a' + 10
		}
		return c - '0'
	}
	return v(s[0])<<4 | v(s[1])
}

// Writer: however the text is cut, the output is Block of the whole
// (marks aside, which restart at each write).
func TestWriterPieces(t *testing.T) {
	in := "héllo \x1b[2J wörld 日本\u202e\xff end"
	for step := 1; step <= len(in); step++ {
		var out strings.Builder
		w := NewWriter(&out)
		for i := 0; i < len(in); i += step {
			if _, err := w.Write([]byte(in[i:min(i+step, len(in))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), Block(in); got != want {
			t.Fatalf("step %d: %q, want %q", step, got, want)
		}
	}
}

// TestWriterMarksAcrossWrites: a program that writes a base character and
// then its combining marks a few at a time (each write, or each chunk a
// follow poll picks up, below the limit) must not stack them past
// MaxMarks: the run is counted across writes, so the output is what Block
// gives for the whole text.
func TestWriterMarksAcrossWrites(t *testing.T) {
	in := "a" + strings.Repeat("\u0301", 3*MaxMarks) + " b\u0301\u0302\n" + strings.Repeat("\u0300", MaxMarks+2)
	for step := 1; step <= len(in); step++ {
		var out strings.Builder
		w := NewWriter(&out)
		for i := 0; i < len(in); i += step {
			if _, err := w.Write([]byte(in[i:min(i+step, len(in))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), Block(in); got != want {
			t.Fatalf("step %d: %q, want %q", step, got, want)
		}
	}
}

// FuzzWriterPieces: a text written to a Writer in pieces comes out as
// Block of the whole text, wherever it is cut (UTF-8 sequences, runs of
// marks).
func FuzzWriterPieces(f *testing.F) {
	f.Add("a\u0301\u0301\u0301\u0301\u0301\u0301", uint8(3))
	f.Add("\xe6\x97\xa5\u202e\x1b[2J", uint8(1))
	f.Fuzz(func(t *testing.T, s string, step uint8) {
		n := int(step%16) + 1
		var out strings.Builder
		w := NewWriter(&out)
		for i := 0; i < len(s); i += n {
			if _, err := w.Write([]byte(s[i:min(i+n, len(s))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), Block(s); got != want {
			t.Fatalf("pieces of %d: %q, want %q", n, got, want)
		}
	})
}
