package agent

import (
	"path/filepath"
	"strings"
	"testing"
)

// package.json comes from a directory cordon does not own: whatever it
// holds, the program it names stays inside the package.
func FuzzParsePackage(f *testing.F) {
	f.Add([]byte(`{"name":"@openai/codex","bin":{"codex":"bin/codex.js"}}`), "codex")
	f.Add([]byte(`{"name":"x","bin":"../../../etc/passwd"}`), "x")
	f.Add([]byte(`{"name":"x","bin":{"x":"/etc/shadow"}}`), "x")
	f.Add([]byte(`{"name":"x","bin":null}`), "x")
	f.Add([]byte(`[]`), "")
	f.Fuzz(func(t *testing.T, b []byte, command string) {
		_, rel, err := parsePackage(b, command)
		if err != nil || rel == "" {
			return
		}
		p := filepath.Join("/pkg", rel)
		if filepath.IsAbs(rel) || (p != "/pkg" && !strings.HasPrefix(p, "/pkg/")) {
			t.Fatalf("bin %q leaves the package: %s", rel, p)
		}
	})
}
