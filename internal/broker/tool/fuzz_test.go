package tool

import (
	"encoding/json"
	"testing"
)

// FuzzParseFrame: the front door never panics, and what it accepts is a
// single strict JSON object the SDK can decode.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read_file","arguments":{"path":"/a"}}}`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := parseFrame(b)
		if err != nil {
			return
		}
		var v map[string]any
		if json.Unmarshal(b, &v) != nil {
			t.Fatalf("accepted a frame encoding/json rejects: %q", b)
		}
		if len(fr.Method) > 128 || len(fr.ID) > 128 {
			t.Fatal("bounds not applied")
		}
	})
}

// FuzzArguments: argument checking never panics; accepted arguments are
// canonical (canonicalizing again changes nothing) and only use declared
// fields.
func FuzzArguments(f *testing.F) {
	f.Add([]byte(`{"path":"/tmp/a","n":1}`))
	f.Add([]byte(`{"path":"/tmp/a","extra":true}`))
	f.Add([]byte(`null`))
	s, err := compileSchema(map[string]any{"type": "object", "properties": map[string]any{
		"path": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"}}, "required": []string{"path"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		canon, digest, err := s.checkArguments(b, 4096)
		if err != nil {
			return
		}
		again, err := Canonical(canon)
		if err != nil || string(again) != string(canon) || Digest(again) != digest {
			t.Fatalf("not canonical: %q -> %q", canon, again)
		}
		var m map[string]any
		if json.Unmarshal(canon, &m) != nil {
			t.Fatal("canonical form is not an object")
		}
		for k := range m {
			if k != "path" && k != "n" {
				t.Fatalf("undeclared field %q accepted", k)
			}
		}
	})
}
