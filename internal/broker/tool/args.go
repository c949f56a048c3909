package tool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// ErrArguments is wrapped by every argument refusal.
var ErrArguments = errors.New("invalid tool arguments")

// schema is an upstream tool's input schema, resolved once.
type schema struct {
	resolved *jsonschema.Resolved
	// props are the top-level properties the schema declares: any other
	// top-level argument is refused, whatever additionalProperties says.
	props map[string]bool
}

// compileSchema resolves an upstream tool's input schema. Remote
// references are not followed (no loader): a schema that needs one is
// refused and the tool is not offered.
func compileSchema(raw any) (*schema, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("input schema: type %q, want \"object\"", s.Type)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	props := map[string]bool{}
	for k := range s.Properties {
		props[k] = true
	}
	return &schema{resolved: r, props: props}, nil
}

// checkArguments validates raw arguments against the tool's schema and
// returns them in canonical form (keys sorted, no insignificant space,
// numbers as written) with their digest. Absent arguments are {}.
func (s *schema) checkArguments(raw json.RawMessage, max int) (canon []byte, digest string, err error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	if len(raw) > max {
		return nil, "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrArguments, len(raw), max)
	}
	if err := strictJSON(raw); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrArguments, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, "", fmt.Errorf("%w: arguments must be a JSON object", ErrArguments)
	}
	var unknown []string
	for k := range obj {
		if !s.props[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		for i, u := range unknown {
			unknown[i] = fmt.Sprintf("%q", clip(u, 64))
		}
		return nil, "", fmt.Errorf("%w: unknown field(s) %s", ErrArguments, strings.Join(unknown, ", "))
	}
	if err := s.resolved.Validate(obj); err != nil {
		return nil, "", fmt.Errorf("%w: %s", ErrArguments, clip(err.Error(), 512))
	}
	canon, err = canonical(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrArguments, err)
	}
	return canon, Digest(canon), nil
}

// Digest is "sha256:<hex>" of b.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// canonical re-encodes JSON with sorted object keys, numbers exactly as
// written and no HTML escaping: the same value always has the same bytes.
func canonical(raw []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Canonical is canonical for the privileged side, which recomputes the
// digest an approval is bound to from the arguments it shows.
func Canonical(raw []byte) ([]byte, error) {
	if err := strictJSON(raw); err != nil {
		return nil, err
	}
	return canonical(raw)
}

// maxDepth bounds nesting in frames and arguments.
const maxDepth = 64

// strictJSON accepts exactly one JSON value with no duplicate object
// member and nesting of at most maxDepth: parsers that keep the first or
// the last duplicate would disagree about what was asked.
func strictJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := strictValue(d, 0); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func strictValue(d *json.Decoder, depth int) error {
	if depth > maxDepth {
		return errors.New("JSON nested too deeply")
	}
	t, err := d.Token()
	if err != nil {
		return fmt.Errorf("malformed JSON: %v", err)
	}
	switch t {
	case json.Delim('{'):
		seen := map[string]bool{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return fmt.Errorf("malformed JSON: %v", err)
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("duplicate member %q", clip(key, 64))
			}
			seen[key] = true
			if err := strictValue(d, depth+1); err != nil {
				return err
			}
		}
		_, err = d.Token()
	case json.Delim('['):
		for d.More() {
			if err := strictValue(d, depth+1); err != nil {
				return err
			}
		}
		_, err = d.Token()
	}
	if err != nil {
		return fmt.Errorf("malformed JSON: %v", err)
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
