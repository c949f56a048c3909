package custody

import (
	"bytes"
	"strings"
	"testing"
)

// redactStream runs in through a Stream in the given pieces.
func redactStream(r *Redactor, pieces ...string) string {
	var s Stream
	s.Reset(r)
	var out []byte
	for _, p := range pieces {
		out = s.Write(out, []byte(p))
	}
	return string(s.Flush(out))
}

func TestStreamEverySplit(t *testing.T) {
	secret := "sk-live-0123456789abcdef"
	m := NewRedactor([][]byte{[]byte(secret), []byte("tiny"), []byte("ab")})
	inputs := []string{
		"before " + secret + " after",
		secret,
		secret + secret,
		"sk-live-0123 sk-live-" + secret + "sk-",
		`{"text":"` + secret + `"}` + "\n\n",
		"no secrets here at all, sk-live- almost",
	}
	for _, in := range inputs {
		want := strings.ReplaceAll(strings.ReplaceAll(in, secret, Replacement), "tiny", Replacement)
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				got := redactStream(m, in[:i], in[i:j], in[j:])
				if got != want {
					t.Fatalf("redact(%q split at %d,%d) = %q, want %q", in, i, j, got, want)
				}
			}
		}
	}
}

func TestStreamOverlappingSecrets(t *testing.T) {
	// A secret that overlaps a matched one must not leak its tail.
	m := NewRedactor([][]byte{[]byte("XYZW"), []byte("ZWQRSTUV")})
	for i := 0; i <= 10; i++ {
		in := "..XYZWQRSTUV.."
		got := redactStream(m, in[:i], in[i:])
		if strings.Contains(got, "QRSTUV") || strings.Contains(got, "XYZW") {
			t.Errorf("split %d: %q leaks", i, got)
		}
	}
}

func TestRedactorEscapedSpellings(t *testing.T) {
	m := NewRedactor([][]byte{[]byte("pässwörd<&>")})
	for _, in := range []string{`"pässwörd<&>"`, `"p\u00e4ssw\u00f6rd<&>"`, `"pässwörd\u003c\u0026\u003e"`} {
		if got := string(m.AppendRedacted(nil, []byte(in))); got != `"`+Replacement+`"` {
			t.Errorf("AppendRedacted(%s) = %s", in, got)
		}
	}
}

// A JSON encoder may write "/" as "\/" (PHP's json_encode does by
// default): a secret with a slash is still caught in that spelling.
func TestRedactorEscapedSlash(t *testing.T) {
	m := NewRedactor([][]byte{[]byte("key/with+slash==")})
	for _, in := range []string{`"key/with+slash=="`, `"key\/with+slash=="`} {
		if got := string(m.AppendRedacted(nil, []byte(in))); got != `"`+Replacement+`"` {
			t.Errorf("AppendRedacted(%s) = %s", in, got)
		}
	}
}

func TestStreamHoldIsBounded(t *testing.T) {
	m := NewRedactor([][]byte{[]byte("aaaa")})
	var r Stream
	r.Reset(m)
	var out []byte
	for range 100 {
		out = r.Write(out[:0], []byte(strings.Repeat("a", 4096)))
		if len(r.held) > maxHold+4096 {
			t.Fatalf("held %d bytes", len(r.held))
		}
	}
	if strings.Contains(string(out), "aaaa") {
		t.Errorf("secret run leaked")
	}
}

func TestRedactorCache(t *testing.T) {
	var c RedactorCache
	a := c.Get([][]byte{[]byte("secret-one")})
	if c.Get([][]byte{[]byte("secret-one")}) != a {
		t.Error("same values rebuilt the redactor")
	}
	if b := c.Get([][]byte{[]byte("secret-two")}); b == a || !b.Contains([]byte("x secret-two")) {
		t.Error("changed values did not rebuild the redactor")
	}
}

// FuzzStream checks that a secret never survives redaction, however the
// stream is cut, and that the cuts never change the output.
func FuzzStream(f *testing.F) {
	f.Add([]byte("data: sk-live-0123456789\n\n"), []byte("sk-live-0123456789"), []byte("0123"), uint16(5), uint16(9))
	f.Add([]byte("aaaaaaaaaa"), []byte("aaa"), []byte("aab"), uint16(1), uint16(2))
	f.Fuzz(func(t *testing.T, in, s1, s2 []byte, cut1, cut2 uint16) {
		m := NewRedactor([][]byte{s1, s2})
		i, j := int(cut1)%(len(in)+1), int(cut2)%(len(in)+1)
		if i > j {
			i, j = j, i
		}
		var r Stream
		r.Reset(m)
		out := r.Write(nil, in[:i])
		out = r.Write(out, in[i:j])
		out = r.Write(out, in[j:])
		out = r.Flush(out)
		if whole := m.AppendRedacted(nil, in); !bytes.Equal(out, whole) {
			t.Fatalf("pieces %q != whole %q", out, whole)
		}
		for _, seg := range bytes.Split(out, []byte(Replacement)) {
			for _, p := range m.m().pats {
				if bytes.Contains(seg, p) {
					t.Fatalf("secret %q survived in %q", p, out)
				}
			}
		}
	})
}
