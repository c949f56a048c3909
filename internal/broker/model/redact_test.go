package model

import (
	"strings"
	"testing"
)

// redactStream runs in through a redactor in the given pieces.
func redactStream(m *matcher, pieces ...string) string {
	r := redactor{m: m}
	var out []byte
	for _, p := range pieces {
		out = r.write(out, []byte(p))
	}
	return string(r.flush(out))
}

func TestRedactorEverySplit(t *testing.T) {
	secret := "sk-live-0123456789abcdef"
	m := newMatcher([][]byte{[]byte(secret), []byte("tiny"), []byte("ab")})
	inputs := []string{
		"before " + secret + " after",
		secret,
		secret + secret,
		"sk-live-0123 sk-live-" + secret + "sk-",
		`{"text":"` + secret + `"}` + "\n\n",
		"no secrets here at all, sk-live- almost",
	}
	for _, in := range inputs {
		want := strings.ReplaceAll(strings.ReplaceAll(in, secret, redactedMark), "tiny", redactedMark)
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

func TestRedactorOverlappingSecrets(t *testing.T) {
	// A secret that overlaps a matched one must not leak its tail.
	m := newMatcher([][]byte{[]byte("XYZW"), []byte("ZWQRSTUV")})
	for i := 0; i <= 10; i++ {
		in := "..XYZWQRSTUV.."
		got := redactStream(m, in[:i], in[i:])
		if strings.Contains(got, "QRSTUV") || strings.Contains(got, "XYZW") {
			t.Errorf("split %d: %q leaks", i, got)
		}
	}
}

func TestRedactorEscapedSpellings(t *testing.T) {
	m := newMatcher([][]byte{[]byte("pässwörd<&>")})
	for _, in := range []string{`"pässwörd<&>"`, `"p\u00e4ssw\u00f6rd<&>"`, `"pässwörd\u003c\u0026\u003e"`} {
		if got := string(m.redactAll(nil, []byte(in))); got != `"`+redactedMark+`"` {
			t.Errorf("redactAll(%s) = %s", in, got)
		}
	}
}

// A JSON encoder may write "/" as "\/" (PHP's json_encode does by
// default): a secret with a slash is still caught in that spelling.
func TestRedactorEscapedSlash(t *testing.T) {
	m := newMatcher([][]byte{[]byte("key/with+slash==")})
	for _, in := range []string{`"key/with+slash=="`, `"key\/with+slash=="`} {
		if got := string(m.redactAll(nil, []byte(in))); got != `"`+redactedMark+`"` {
			t.Errorf("redactAll(%s) = %s", in, got)
		}
	}
}

func TestRedactorHoldIsBounded(t *testing.T) {
	m := newMatcher([][]byte{[]byte("aaaa")})
	r := redactor{m: m}
	var out []byte
	for range 100 {
		out = r.write(out[:0], []byte(strings.Repeat("a", 4096)))
		if len(r.held) > maxHold+4096 {
			t.Fatalf("held %d bytes", len(r.held))
		}
	}
	if strings.Contains(string(out), "aaaa") {
		t.Errorf("secret run leaked")
	}
}

func TestMatcherCache(t *testing.T) {
	var c matcherCache
	a := c.get([][]byte{[]byte("secret-one")})
	if c.get([][]byte{[]byte("secret-one")}) != a {
		t.Error("same values rebuilt the matcher")
	}
	if b := c.get([][]byte{[]byte("secret-two")}); b == a || !b.contains([]byte("x secret-two")) {
		t.Error("changed values did not rebuild the matcher")
	}
}
