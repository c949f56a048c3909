package approval

import (
	"encoding/json"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

func TestDisplayJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1}`, "{\n  \"a\": 1\n}"},
		{`["x\u202ey"]`, "[\n  \"x\\u202ey\"\n]"},
		{"[\"x\u202ey\"]", "[\n  \"x\\u202ey\"\n]"},
		{"[\"zero\u200bwidth\", \"nbsp\u00a0\"]", "[\n  \"zero\\u200bwidth\",\n  \"nbsp\\u00a0\"\n]"},
		{"[\"tag\U000E0041\"]", "[\n  \"tag\\udb40\\udc41\"\n]"},
		{`"<script>"`, `"<script>"`},
		{"not json\x1b[2J", `not json\u001b[2J`},
	} {
		if got := DisplayJSON([]byte(tc.in)); got != tc.want {
			t.Errorf("DisplayJSON(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, want := CompactJSON([]byte("{ \"a\" :\n [1, \"\u2028\"] }")), `{"a":[1,"\u2028"]}`; got != want {
		t.Errorf("CompactJSON = %q, want %q", got, want)
	}
	if got, want := DisplayText("a\nb\u202e"), `a\u000ab\u202e`; got != want {
		t.Errorf("DisplayText = %q, want %q", got, want)
	}
}

// FuzzDisplayJSON: whatever an agent puts in its arguments, the display
// has nothing invisible but layout, and is the same JSON value.
func FuzzDisplayJSON(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, "[\"x\u202ey\"]", `"<script>"`, "\"\xff\"", `{"a":[1,2,{"b":"\u0000"}]}`, "nope\x1b"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, show := range []string{DisplayJSON(raw), CompactJSON(raw)} {
			for _, r := range show {
				if !unicode.IsPrint(r) && r != '\n' && r != '\t' {
					t.Fatalf("display of %q has invisible %U: %q", raw, r, show)
				}
			}
			if !json.Valid(raw) {
				continue
			}
			var in, out any
			if err := json.Unmarshal(raw, &in); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(show), &out); err != nil {
				t.Fatalf("display of valid %q is not JSON: %q: %v", raw, show, err)
			}
			if diff := cmp.Diff(in, out); diff != "" {
				t.Fatalf("display of %q changed the value (-in +shown):\n%s", raw, diff)
			}
		}
	})
}
