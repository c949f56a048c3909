package attest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// strictUnmarshal decodes exactly one JSON value into v with no unknown
// fields (encoding/json alone matches field names case-insensitively and
// ignores unknown ones: exactKeys checks the names).
func strictUnmarshal(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return &trailingData{Offset: d.InputOffset()}
	}
	return nil
}

// trailingData: bytes after the one JSON value, from Offset.
type trailingData struct{ Offset int64 }

func (e *trailingData) Error() string {
	return fmt.Sprintf("data after the JSON value at byte %d", e.Offset)
}

// exactKeys checks that b is a JSON object whose keys are all in want,
// spelled exactly, each at most once, and each of want present.
func exactKeys(b []byte, what string, want ...string) error {
	d := json.NewDecoder(bytes.NewReader(b))
	at := func() string { return fmt.Sprintf("%s @byte %d", what, d.InputOffset()) }
	t, err := d.Token()
	if err != nil {
		return malformed(at(), "not JSON: %v", err)
	}
	if t != json.Delim('{') {
		return malformed(what, "not a JSON object")
	}
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return malformed(at(), "not JSON: %v", err)
		}
		k, _ := t.(string)
		known := false
		for _, w := range want {
			known = known || w == k
		}
		if !known {
			return malformed(what+"."+k, "unknown field %q (field names are exact)", k)
		}
		if seen[k] {
			return malformed(what+"."+k, "field %q twice", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return malformed(fmt.Sprintf("%s.%s @byte %d", what, k, d.InputOffset()), "not JSON: %v", err)
		}
	}
	if _, err := d.Token(); err != nil {
		return malformed(at(), "not JSON: %v", err)
	}
	for _, w := range want {
		if !seen[w] {
			return malformed(what+"."+w, "no field %q", w)
		}
	}
	return nil
}
