package attest

import (
	"bytes"
	"encoding/json"
	"errors"
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
		return errors.New("data after the JSON value")
	}
	return nil
}

// exactKeys checks that b is a JSON object whose keys are all in want,
// spelled exactly, each at most once, and each of want present.
func exactKeys(b []byte, what string, want ...string) error {
	d := json.NewDecoder(bytes.NewReader(b))
	t, err := d.Token()
	if err != nil {
		return malformed(what, "not JSON: %v", err)
	}
	if t != json.Delim('{') {
		return malformed(what, "not a JSON object")
	}
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return malformed(what, "not JSON: %v", err)
		}
		k, _ := t.(string)
		known := false
		for _, w := range want {
			known = known || w == k
		}
		if !known {
			return malformed(what, "unknown field %q", k)
		}
		if seen[k] {
			return malformed(what, "field %q twice", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return malformed(what+"."+k, "not JSON: %v", err)
		}
	}
	if _, err := d.Token(); err != nil {
		return malformed(what, "not JSON: %v", err)
	}
	for _, w := range want {
		if !seen[w] {
			return malformed(what, "no field %q", w)
		}
	}
	return nil
}
