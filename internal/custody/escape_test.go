package custody

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// JSON lets an encoder escape any character, in either case of hex:
// .NET's System.Text.Json writes "+" as \u002B and non-ASCII as \u00E4,
// Jackson writes control characters in upper-case hex, Python mixes
// short escapes (\n) with \uXXXX. A value in any such spelling reached
// the agent through the model broker (which matches raw bytes) when the
// redactor knew only four fixed spellings. Every split of each input
// through a Stream is redacted too. Control: the raw value and the
// fixed spellings are caught as before, and near-misses are left alone.
func TestRedactorAnyJSONEscape(t *testing.T) {
	values := []string{"key/with+slash==", "pässwörd<&>", "line1\nlïne2", "tok-😀-x"}
	r := NewRedactor(func() (out [][]byte) {
		for _, v := range values {
			out = append(out, []byte(v))
		}
		return out
	}())
	caught := []string{
		`"key/with+slash=="`,                     // control: raw
		`"key\/with+slash=="`,                    // control: PHP
		`"key/with\u002Bslash\u003D\u003D"`,      // .NET
		`"key\u002fwith\u002bslash=="`,           // escape-all, lower case
		`"\u006Bey/with+slash=="`,                // an escape at the start
		`"p\u00E4ssw\u00F6rd\u003C\u0026\u003E"`, // upper-case hex
		`"p\u00e4ssw\u00f6rd<&>"`,                // control: Python
		`"line1\nl\u00efne2"`,                    // Python: short escape and \u
		`"line1\u000Al\u00EFne2"`,                // Jackson
		`"tok-\uD83D\uDE00-x"`,                   // surrogate pair, upper case
		`"tok-\ud83d\ude00-x"`,                   // control: lower case
	}
	for _, in := range caught {
		want := `"` + Replacement + `"`
		if got := string(r.AppendRedacted(nil, []byte(in))); got != want {
			t.Errorf("AppendRedacted(%s) = %s, want %s", in, got, want)
		}
		if !r.Contains([]byte(in)) {
			t.Errorf("Contains(%s) = false", in)
		}
		for i := 0; i <= len(in); i++ {
			if got := redactStream(r, in[:i], in[i:]); got != want {
				t.Fatalf("stream of %s split at %d = %s, want %s", in, i, got, want)
			}
		}
	}
	left := []string{
		`"key/with+slash="`,        // one byte short
		`"key\\u002Bwith+slash=="`, // an escaped backslash, then text
		`"p\u00E5ssw\u00F6rd<&>"`,  // another letter
		`"tok-\uD83D\uDE01-x"`,     // another emoji
		`"line1\\nl\u00efne2"`,     // a backslash and "n", not a newline
	}
	for _, in := range left {
		if got := string(r.AppendRedacted(nil, []byte(in))); got != in {
			t.Errorf("AppendRedacted(%s) = %s, want it unchanged", in, got)
		}
		if strings.Contains(redactStream(r, in[:3], in[3:]), Replacement) {
			t.Errorf("stream of %s redacted something", in)
		}
	}
}

// BenchmarkRedactorWriterEscapes is BenchmarkRedactorWriter on model
// output whose text holds JSON escapes (newlines as \n): the input the
// escape-aware matching scans.
func BenchmarkRedactorWriterEscapes(b *testing.B) {
	r := NewRedactor(toBytes(benchValues))
	in := bytes.ReplaceAll(benchInput(1<<20, benchValues), []byte("fox "), []byte(`fox\n`))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		w := r.Writer(io.Discard)
		for i := 0; i < len(in); i += 64 {
			w.Write(in[i:min(i+64, len(in))])
		}
		w.Close()
	}
}
