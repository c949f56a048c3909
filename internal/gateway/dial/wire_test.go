package dial

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"id":1,"op":"dial","host":"api.example.com","port":443}`, true},
		{`{"id":2,"op":"resolve","host":"api.example.com"}`, true},
		{`{"id":3,"op":"dial","host":"api.example.com","port":0}`, false},
		{`{"id":3,"op":"dial","host":"api.example.com","port":65536}`, false},
		{`{"id":4,"op":"resolve","host":"a","port":1}`, false},
		{`{"id":5,"op":"listen","host":"a","port":1}`, false},
		{`{"id":6,"op":"dial","host":"","port":1}`, false},
		{`{"id":7,"op":"dial","host":"a b","port":1}`, false},
		{`{"id":8,"op":"dial","host":"a","port":1,"fd":3}`, false},
		{`{"id":9,"op":"dial","host":"a","port":1}{}`, false},
		{`{"id":10,"op":"dial","host":"` + strings.Repeat("a", 256) + `","port":1}`, false},
		{strings.Repeat(" ", 600), false},
		{`[]`, false},
	} {
		_, err := ParseRequest([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("ParseRequest(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
		if err != nil && failure.KindOf(err) != failure.KindUsage {
			t.Errorf("KindOf(ParseRequest(%q)) = %v, want %v", tc.in, failure.KindOf(err), failure.KindUsage)
		}
	}
}

// FuzzParseRequest: the privileged side's parser of what a (possibly
// compromised) broker process sends never panics, and what it accepts is
// within bounds.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"op":"dial","host":"api.example.com","port":443}`,
		`{"id":2,"op":"resolve","host":"api.example.com"}`,
		`{"id":3,"op":"dial","host":"127.0.0.1","port":80}`,
		`{"id":4,"op":"dial","host":"[::1]","port":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if r.Host == "" || len(r.Host) > maxHostLen {
			t.Fatalf("accepted host %q", r.Host)
		}
		if r.Op == OpDial && (r.Port < 1 || r.Port > 65535) {
			t.Fatalf("accepted port %d", r.Port)
		}
		if r.Op != OpDial && r.Op != OpResolve {
			t.Fatalf("accepted op %q", r.Op)
		}
	})
}
