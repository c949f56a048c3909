package custody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// naive is the reference: every occurrence of every spelling of every
// value, found one position at a time; overlapping occurrences merged and
// each merged run replaced once.
func naive(values []string, in string) string {
	type run struct{ start, end int }
	var runs []run
	for i := range len(in) {
		for _, v := range values {
			if len(v) < MinLen {
				continue
			}
			for _, p := range spellings([]byte(v)) {
				if strings.HasPrefix(in[i:], string(p)) {
					runs = append(runs, run{i, i + len(p)})
				}
			}
			if end := naiveEscaped(v, in, i); end > 0 {
				runs = append(runs, run{i, end})
			}
		}
	}
	slices.SortStableFunc(runs, func(a, b run) int { return a.start - b.start })
	var b strings.Builder
	at := 0
	for k := 0; k < len(runs); {
		r := runs[k]
		for k++; k < len(runs) && runs[k].start < r.end; k++ {
			r.end = max(r.end, runs[k].end)
		}
		b.WriteString(in[at:r.start])
		b.WriteString(Replacement)
		at = r.end
	}
	b.WriteString(in[at:])
	return b.String()
}

// naiveEscaped is where v ends when it is spelled at in[i:] in any mix
// of raw characters and JSON escapes (each unit decoded by
// encoding/json), 0 when it is not. A backslash that is itself escaped
// begins nothing.
func naiveEscaped(v, in string, i int) int {
	if !utf8.ValidString(v) || (in[i] != v[0] && in[i] != '\\') {
		return 0
	}
	if in[i] == '\\' && (len(in[:i])-len(strings.TrimRight(in[:i], `\`)))%2 == 1 {
		return 0
	}
	j := i
	for _, want := range v {
		if j >= len(in) {
			return 0
		}
		if in[j] != '\\' {
			r, n := utf8.DecodeRuneInString(in[j:])
			if r != want || (r == utf8.RuneError && n == 1) {
				return 0
			}
			j += n
			continue
		}
		got := false
		for _, n := range []int{12, 6, 2} {
			var s string
			if j+n > len(in) || json.Unmarshal([]byte(`"`+in[j:j+n]+`"`), &s) != nil {
				continue
			}
			if r, size := utf8.DecodeRuneInString(s); size == len(s) && r == want && r != utf8.RuneError {
				j, got = j+n, true
				break
			}
		}
		if !got {
			return 0
		}
	}
	return j
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// writeChunks writes in through r's Writer, cut at the given offsets.
func writeChunks(t testing.TB, r *Redactor, in []byte, cuts ...int) string {
	t.Helper()
	var buf bytes.Buffer
	w := r.Writer(&buf)
	prev := 0
	for _, c := range append(cuts, len(in)) {
		if n, err := w.Write(in[prev:c]); err != nil || n != c-prev {
			t.Fatalf("Write = %d, %v", n, err)
		}
		prev = c
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	return buf.String()
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		in     string
		want   string
	}{
		{"none", []string{"sk-secret-1"}, "hello", "hello"},
		{"one", []string{"sk-secret-1"}, "key=sk-secret-1;", "key=[REDACTED];"},
		{"repeated", []string{"sk-secret-1"}, "sk-secret-1sk-secret-1", "[REDACTED][REDACTED]"},
		{"at ends", []string{"abcd"}, "abcdxxabcd", "[REDACTED]xx[REDACTED]"},
		{"prefix only", []string{"sk-secret-1"}, "sk-secret-", "sk-secret-"},
		{"short ignored", []string{"abc", "abcd"}, "abc abcd", "abc [REDACTED]"},
		{"longest wins", []string{"abcd", "abcdefgh"}, "abcdefgh abcdefg", "[REDACTED] [REDACTED]efg"},
		{"overlap merged", []string{"abcdef", "defghi"}, "abcdefghi", "[REDACTED]"},
		{"overlap second alone", []string{"abcdef", "defghi"}, "xxdefghi", "xx[REDACTED]"},
		{"substring", []string{"secret", "topsecretvalue"}, "topsecretvalue secret", "[REDACTED] [REDACTED]"},
		{"self overlap", []string{"aaaa"}, "aaaaaaa", "[REDACTED]"},
		{"json escaped", []string{"sk/ab\"cd"}, `{"k":"sk\/ab\"cd"} sk/ab"cd`, `{"k":"[REDACTED]"} [REDACTED]`},
		{"four firsts", []string{"Aaaa", "Bbbb", "Cccc", "Dddd"}, "xDdddCcccBbbbAaaa", "x[REDACTED][REDACTED][REDACTED][REDACTED]"},
		{"many firsts", []string{"Aaaa", "Bbbb", "Cccc", "Dddd", "Eeee", "Ffff"}, "0123456789xDdddCcccBbbbAaaaFfffEeeeFff", "0123456789x[REDACTED][REDACTED][REDACTED][REDACTED][REDACTED][REDACTED]Fff"},
		{"duplicates", []string{"abcd", "abcd"}, "abcd", "[REDACTED]"},
		{"empty", nil, "abcd", "abcd"},
	} {
		r := NewRedactor(toBytes(tc.values))
		if got := string(r.Redact([]byte(tc.in))); got != tc.want {
			t.Errorf("%s: Redact(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
		if got := r.RedactString(tc.in); got != tc.want {
			t.Errorf("%s: RedactString(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
		if got := naive(tc.values, tc.in); got != tc.want {
			t.Errorf("%s: naive(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
		if got := writeChunks(t, r, []byte(tc.in)); got != tc.want {
			t.Errorf("%s: Writer(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestRedactNoCopy(t *testing.T) {
	r := NewRedactor(toBytes([]string{"sk-secret-1"}))
	in := []byte("nothing here")
	if out := r.Redact(in); &out[0] != &in[0] {
		t.Errorf("Redact copied an unchanged buffer")
	}
}

// TestWriterSplits writes inputs with values cut at every position across
// two and three writes.
func TestWriterSplits(t *testing.T) {
	values := []string{"sk-ant-api03-abcdef", "sk-proj-xyz123", "ghp_0123456789", "abcd", "abcdabcdzz"}
	r := NewRedactor(toBytes(values))
	for _, in := range []string{
		"data: {\"text\":\"sk-ant-api03-abcdef\"}\n\n",
		"sk-proj-xyz123ghp_0123456789sk-ant-api03-abcdef",
		"x sk-ant-api03-abcde sk-proj-xyz12 ghp_012345678",
		"abcdabcdabcdzz abcdabcdz",
		"sk-sk-ant-api03-abcdefsk-proj-xyz123",
		"ghp_ghp_0ghp_0123456789g",
	} {
		want := naive(values, in)
		if got := string(r.Redact([]byte(in))); got != want {
			t.Fatalf("Redact(%q) = %q, want %q", in, got, want)
		}
		for i := 0; i <= len(in); i++ {
			if got := writeChunks(t, r, []byte(in), i); got != want {
				t.Errorf("Writer(%q cut at %d) = %q, want %q", in, i, got, want)
			}
			for j := i; j <= len(in); j++ {
				if got := writeChunks(t, r, []byte(in), i, j); got != want {
					t.Errorf("Writer(%q cut at %d, %d) = %q, want %q", in, i, j, got, want)
				}
			}
		}
		cuts := make([]int, 0, len(in))
		for i := 1; i < len(in); i++ {
			cuts = append(cuts, i)
		}
		if got := writeChunks(t, r, []byte(in), cuts...); got != want {
			t.Errorf("Writer(%q byte by byte) = %q, want %q", in, got, want)
		}
	}
}

// TestWriterHoldsAndFlushes checks that a held tail is written once
// decided, and that Close writes what was held, redacting a complete
// shorter value held back while a longer one was still possible.
func TestWriterHoldsAndFlushes(t *testing.T) {
	r := NewRedactor(toBytes([]string{"abcd", "abcdefgh"}))
	var buf bytes.Buffer
	w := r.Writer(&buf)
	step := func(in, want string) {
		t.Helper()
		if _, err := w.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Errorf("after Write(%q): downstream %q, want %q", in, buf.String(), want)
		}
	}
	step("hello ab", "hello ")
	step("cd", "hello ")
	step("e", "hello ")
	step("fgh!", "hello [REDACTED]!")
	step("xxabcdef", "hello [REDACTED]!xx")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "hello [REDACTED]!xx[REDACTED]ef"; buf.String() != want {
		t.Errorf("after Close: %q, want %q", buf.String(), want)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}

	// A prefix that never completes is not lost.
	var b2 bytes.Buffer
	w2 := r.Writer(&b2)
	w2.Write([]byte("tail abcdefg"))
	w2.Close()
	if b2.String() != "tail [REDACTED]efg" {
		t.Errorf("unfinished tail: %q", b2.String())
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.ErrClosedPipe
	}
	f.n--
	return len(p), nil
}

func TestWriterError(t *testing.T) {
	r := NewRedactor(toBytes([]string{"abcd"}))
	w := r.Writer(&failWriter{n: 1})
	if _, err := w.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("two")); n != 0 || !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write = %d, %v; want 0, ErrClosedPipe", n, err)
	}
	if _, err := w.Write([]byte("three")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write after failure = %v, want the sticky error", err)
	}
	if err := w.Close(); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Close after failure = %v, want the sticky error", err)
	}
}

func TestWriterOneDownstreamWritePerWrite(t *testing.T) {
	r := NewRedactor(toBytes([]string{"abcd"}))
	cw := &countWriter{}
	w := r.Writer(cw)
	w.Write([]byte("ab"))
	w.Write([]byte("cd xx abcd yy abcd zz"))
	w.Close()
	if cw.writes != 1 || cw.buf.String() != "[REDACTED] xx [REDACTED] yy [REDACTED] zz" {
		t.Errorf("downstream got %d writes, %q", cw.writes, cw.buf.String())
	}
}

type countWriter struct {
	writes int
	buf    bytes.Buffer
}

func (c *countWriter) Write(p []byte) (int, error) { c.writes++; return c.buf.Write(p) }

// FuzzRedactor checks, for arbitrary values, input and cuts, that the
// streaming writer equals Redact of the whole input, that Redact equals
// the naive reference, and that no value (without '[' or ']', see the
// package caveats) survives.
func FuzzRedactor(f *testing.F) {
	f.Add("sk-ant-api03-abc", "sk-proj-1", "ghp_x", []byte("data: sk-ant-api03-abc sk-proj-1ghp_x\n\n"), uint64(1), false)
	f.Add("abcd", "abcdefgh", "defg", []byte("abcdefghabcdefg abc"), uint64(7), false)
	f.Add("aaaa", "aaab", "baaa", []byte("aaaaaaabaaaab"), uint64(3), true)
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, in []byte, seed uint64, many bool) {
		values := []string{s1, s2, s3}
		if many {
			// More distinct first bytes than the finder tracks.
			values = append(values, "\x01abc", "\x02abc", "\x03abc", "\x04abc")
		}
		r := NewRedactor(toBytes(values))
		whole := r.Redact(in)
		if want := naive(values, string(in)); string(whole) != want {
			t.Fatalf("Redact(%q) = %q, naive %q", in, whole, want)
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		var cuts []int
		for c := 0; len(in) > 0; {
			c += rng.IntN(20)
			if c >= len(in) {
				break
			}
			cuts = append(cuts, c)
		}
		if got := writeChunks(t, r, in, cuts...); got != string(whole) {
			t.Fatalf("Writer(%q, cuts %v) = %q, Redact %q", in, cuts, got, whole)
		}
		for _, v := range values {
			if len(v) >= MinLen && !strings.ContainsAny(v, "[]") && bytes.Contains(whole, []byte(v)) {
				t.Fatalf("Redact(%q) = %q still contains %q", in, whole, v)
			}
		}
	})
}

// benchInput is SSE-like model output: frequent 's' and 'g' (the values'
// first bytes), and a value every ~16 KiB.
func benchInput(size int, values []string) []byte {
	var b bytes.Buffer
	words := strings.Fields("the quick brown fox jumps over lazy dogs sing songs; sketching skills suggest good things s g sk gh")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; b.Len() < size; i++ {
		b.WriteString(`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`)
		for k := 0; k < 8; k++ {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		if i%100 == 99 {
			b.WriteString(values[i%len(values)])
		}
		b.WriteString("\"}}\n\n")
	}
	return b.Bytes()[:size]
}

var benchValues = []string{"sk-ant-api03-0123456789abcdefghij", "sk-proj-ABCDEFGHIJKLMNOP", "ghp_0123456789abcdefABCDEF0123456789"}

func BenchmarkRedactorWriter(b *testing.B) {
	r := NewRedactor(toBytes(benchValues))
	in := benchInput(1<<20, benchValues)
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

func BenchmarkRedact(b *testing.B) {
	r := NewRedactor(toBytes(benchValues))
	in := benchInput(1<<20, benchValues)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		r.Redact(in)
	}
}

func ExampleRedactor_Writer() {
	r := NewRedactor([][]byte{[]byte("sk-live-0123")})
	var out strings.Builder
	w := r.Writer(&out)
	w.Write([]byte("data: {\"text\":\"key sk-li"))
	w.Write([]byte("ve-0123\"}\n\n"))
	w.Close()
	fmt.Print(out.String())
	fmt.Println(r.RedactString("Authorization: Bearer sk-live-0123"))
	// Output:
	// data: {"text":"key [REDACTED]"}
	//
	// Authorization: Bearer [REDACTED]
}
