package textsafe

import (
	"bytes"
	"encoding/json"
	"testing"
)

// AppendJSONString writes what encoding/json writes without HTML escaping
// (up to the spelling of control characters), for valid UTF-8; invalid bytes become \ufffd, and the result always
// decodes back.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "ctl\x00\x1f\n\t", "é ü 日本", "<a&b>", "line\u2028sep"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != s {
			t.Errorf("AppendJSONString(%q) = %s, decodes to %q, %v", s, got, back, err)
		}
		// Control characters are written \u00XX (encoding/json uses \n,
		// \t …) and U+2028 raw: both decode the same; compare the rest.
		if s != "line\u2028sep" && s != "ctl\x00\x1f\n\t" && string(got) != string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("AppendJSONString(%q) = %s, want %s", s, got, want.Bytes())
		}
	}
	if got := string(AppendJSONString([]byte("x"), "a\xffb")); got != `x"a\ufffdb"` {
		t.Errorf("AppendJSONString(invalid) = %s", got)
	}
}
