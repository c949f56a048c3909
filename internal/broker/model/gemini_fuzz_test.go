package model

import (
	"bytes"
	"encoding/json"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzGeminiGuard checks, for every Gemini endpoint, that the guard never
// panics and that whatever it accepts encoding/json reads as valid JSON
// holding no reference the provider would resolve (fileData, fileUri,
// cachedContent, a tool other than function declarations, in either
// spelling). For what it accepts it applies the output cap and checks that
// the forwarded body says what the agent's said plus
// generationConfig.maxOutputTokens, and that the guard finds nothing left
// to set in it.
func FuzzGeminiGuard(f *testing.F) {
	f.Add([]byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`))
	f.Add([]byte(`{"contents":[],"generationConfig":{}}`))
	f.Add([]byte(`{"contents":[],"generation_config":null,"tools":[{"function_declarations":[{"name":"f","parameters":{"fileUri":"x"}}]}]}`))
	f.Add([]byte(`{"contents":[],"generationConfig":{"temperature":0,"max_output_tokens":null,"candidateCount":2}}`))
	f.Add([]byte(`{"contents":[{"parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}},{"fileData":{"fileUri":"gs://x"}}]}]}`))
	f.Add([]byte(`{"contents":[],"tools":[{"googleSearch":{}},{"url_context":{}}],"cachedContent":"cachedContents/x"}`))
	f.Add([]byte(`{"generateContentRequest":{"model":"models/gemini-2.5-flash","contents":[]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := testLimits()
		for i := range endpoints {
			ep := &endpoints[i]
			if ep.api != apiGemini {
				continue
			}
			info, ref := guardGemini(body, &lim, ep, []byte("gemini-2.5-flash"))
			if ref != nil {
				if ref.msg == "" || int(ref.kind) >= len(kinds) {
					t.Fatalf("refusal without a message or kind: %+v", ref)
				}
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil || !json.Valid(body) {
				t.Fatalf("guard accepted %q, encoding/json: %v", body, err)
			}
			if info.attachments > lim.MaxAttachments {
				t.Fatalf("accepted %d attachments", info.attachments)
			}
			if r := geminiReference(m, ""); r != "" {
				t.Fatalf("%s: guard accepted %q, which holds %s", ep.action, body, r)
			}
			checkGeminiCap(t, body, m, &info, ep)
		}
	})
}

// geminiReference names the first member of v the provider would resolve
// outside the broker's sight; parent is the canonical name v is under.
func geminiReference(v any, parent string) string {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if r := geminiReference(e, parent); r != "" {
				return r
			}
		}
	case map[string]any:
		for k, e := range v {
			c := canonical([]byte(k))
			if geminiOpaque[c] {
				continue
			}
			switch {
			case e == nil:
				continue
			case c == "fileData" || c == "fileUri":
				return c
			case c == "cachedContent" && e != "":
				return c
			case parent == "toolsEntry" && c != "functionDeclarations":
				return "tool " + c
			case c == "tools":
				if arr, ok := e.([]any); ok {
					for _, te := range arr {
						if r := geminiReference(te, "toolsEntry"); r != "" {
							return r
						}
					}
					continue
				}
			}
			if r := geminiReference(e, c); r != "" {
				return r
			}
		}
	}
	return ""
}

func checkGeminiCap(t *testing.T, body []byte, orig map[string]any, info *reqInfo, ep *endpoint) {
	t.Helper()
	const capN = 4096
	plan := capEdits(info, ep, capN)
	fwd := bytes.Join(plan.segments(body, nil), nil)
	if plan.n == 0 {
		if !bytes.Equal(fwd, body) {
			t.Fatalf("no edit, but the body changed: %q", fwd)
		}
		return
	}
	var got map[string]any
	if err := json.Unmarshal(fwd, &got); err != nil || !json.Valid(fwd) {
		t.Fatalf("%s: forwarded body %q is not JSON: %v", ep.action, fwd, err)
	}
	want := orig
	gk := "generationConfig"
	for k := range orig {
		if canonical([]byte(k)) == gk {
			gk = k
		}
	}
	gc, _ := orig[gk].(map[string]any)
	if gc == nil {
		gc = map[string]any{}
	}
	mk := "maxOutputTokens"
	for k := range gc {
		if canonical([]byte(k)) == mk {
			mk = k
		}
	}
	gc[mk] = float64(capN)
	want[gk] = gc
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: forwarded %q of %q (-want +got):\n%s", ep.action, fwd, body, diff)
	}
	lim := testLimits()
	again, ref := guardGemini(fwd, &lim, ep, []byte("gemini-2.5-flash"))
	if ref != nil {
		t.Fatalf("%s: the guard refuses the forwarded %q: %v", ep.action, fwd, ref)
	}
	if p := capEdits(&again, ep, capN); p.n != 0 {
		t.Fatalf("%s: forwarded %q still lacks a cap: %+v", ep.action, fwd, p)
	}
}

var geminiIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// FuzzGeminiPath checks the model segment of a Gemini path: what it
// accepts is one plain segment, and the upstream URL built from it has
// exactly the path the broker meant, with no query, fragment or dot
// segment.
func FuzzGeminiPath(f *testing.F) {
	for _, s := range []string{"gemini-2.5-flash", "gemini%2D2.5", "a%2F..%2Fb", "..", "a:b", "%252e", "x%3Fkey=1", "a/b", "%zz", ".x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		escaped := geminiPrefix + seg + ":generateContent"
		m, ref := geminiModel(escaped)
		if ref != nil {
			return
		}
		if !geminiIDPattern.MatchString(string(m)) || strings.Contains(string(m), "..") {
			t.Fatalf("geminiModel(%q) accepted %q", escaped, m)
		}
		target := "https://up.example/base" + geminiPrefix + string(m) + ":generateContent"
		u, err := url.Parse(target)
		if err != nil || u.RawQuery != "" || u.Fragment != "" || u.Host != "up.example" ||
			path.Clean(u.Path) != u.Path || u.Path != "/base"+geminiPrefix+string(m)+":generateContent" {
			t.Fatalf("model %q builds upstream %q (%+v, %v)", m, target, u, err)
		}
	})
}
