package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/failure"
)

// The codec: frames to messages and back. It knows nothing of sockets;
// any transport that moves whole frames (a SOCK_SEQPACKET datagram today,
// a length-prefixed TLS record later) can carry them.

var (
	opRE   = regexp.MustCompile(`^[a-z][a-z._-]{0,31}$`)
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

// The members a frame may have. Names are matched exactly (encoding/json
// alone would also accept "OP" for "op").
var (
	requestFields  = []string{"version", "id", "op", "args"}
	responseFields = []string{"version", "id", "final", "error", "result"}
	errorFields    = []string{"kind", "message", "failure"}
)

// ValidOp reports whether op is a well-formed operation name: a lower-case
// letter, then up to 31 of a-z, '.', '_' and '-'.
func ValidOp(op string) error {
	if opRE.MatchString(op) {
		return nil
	}
	return Errorf(KindBadRequest, "bad operation name %s: an operation name is a lower-case letter followed by up to 31 of a-z, '.', '_' and '-'", show(op))
}

// ValidName checks a sandbox or volume name: 1 to 63 characters of a-z,
// 0-9, '_' and '-', starting with a letter or a digit. So a name is never
// empty, ".", "..", and never holds '/', '.', NUL, a space or an
// upper-case letter: it can become a path component, a cgroup or a unit
// name as it is. The daemon checks every name it receives with it.
func ValidName(s string) error {
	if nameRE.MatchString(s) {
		return nil
	}
	const rule = "a name is 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or a digit"
	var why string
	switch {
	case s == "":
		why = "it is empty"
	case s == "." || s == "..":
		why = "it is a path element"
	case strings.ContainsRune(s, '/'):
		why = "it contains '/'"
	case strings.ContainsRune(s, 0):
		why = "it contains NUL"
	case strings.ContainsRune(s, '.'):
		why = "it contains '.'"
	case strings.IndexFunc(s, unicode.IsSpace) >= 0:
		why = "it contains a space"
	case len(s) > 63:
		why = fmt.Sprintf("it is %d bytes long", len(s))
	case s[0] == '-' || s[0] == '_':
		why = "it starts with '" + s[:1] + "'"
	default:
		why = "it contains a character outside the set"
	}
	return Errorf(KindBadRequest, "bad name %s: %s; %s", show(s), why, rule)
}

// EncodeRequest encodes r as a frame, setting Version when it is empty.
// It refuses what DecodeRequest would refuse.
func EncodeRequest(r Request) ([]byte, error) {
	if r.Version == "" {
		r.Version = Version
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, Errorf(KindBadRequest, "encode request: %v", err)
	}
	if _, err := DecodeRequest(b); err != nil {
		return nil, err
	}
	return b, nil
}

// EncodeResponse encodes r as a frame, setting Version when it is empty.
// It refuses what DecodeResponse would refuse: a result over MaxFrame is
// an *Error of KindTooLarge.
func EncodeResponse(r Response) ([]byte, error) {
	if r.Version == "" {
		r.Version = Version
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, Errorf(KindInternal, "encode response: %v", err)
	}
	if _, err := DecodeResponse(b); err != nil {
		return nil, err
	}
	return b, nil
}

// DecodeRequest parses one request frame strictly: one JSON object in
// UTF-8, at most MaxFrame bytes and MaxDepth deep, no member name twice in
// any object (names compared as encoding/json matches them, ignoring
// case), exactly the members of Request and no other, Version equal to
// this package's, an ID from 1 to MaxID, an operation name that passes
// ValidOp and Args, when present, an object. Every error is an *Error; a
// version mismatch is KindVersion and says which versions met. On error
// the returned Request carries the ID when the frame had a readable one, so
// that the refusal can answer it. The result does not retain b.
func DecodeRequest(b []byte) (Request, error) {
	var req Request
	fields, err := checkFrame(b, "request")
	if err != nil {
		return req, err
	}
	// The ID first, leniently, so that every later refusal can answer it.
	id, idOK := decodeID(fields["id"])
	req.ID = id
	// The version before anything else about the members: a client of
	// another version may well send members this one does not know, and
	// it must hear about the version, not about the members.
	v, ok := decodeString(fields["version"])
	if !ok {
		return req, Errorf(KindVersion, "this daemon speaks %s; the client sent no version: upgrade the client or the daemon", Version)
	}
	if v != Version {
		return req, Errorf(KindVersion, "this daemon speaks %s; the client sent %s: upgrade the client or the daemon", Version, show(v))
	}
	req.Version = v
	if err := onlyFields(fields, requestFields, "request"); err != nil {
		return req, err
	}
	if !idOK || id == 0 {
		return req, Errorf(KindBadRequest, "malformed request: id must be an integer from 1 to %d", uint64(MaxID))
	}
	op, ok := decodeString(fields["op"])
	if !ok {
		return req, Errorf(KindBadRequest, "malformed request: op must be a string")
	}
	if err := ValidOp(op); err != nil {
		return req, err
	}
	req.Op = op
	if a, ok := fields["args"]; ok {
		if len(a) == 0 || a[0] != '{' {
			return req, Errorf(KindBadRequest, "malformed request: args must be an object")
		}
		req.Args = a
	}
	return req, nil
}

// DecodeResponse parses one response frame with the rules of
// DecodeRequest, as a client: Version must match (else KindVersion), the ID
// may be 0 (a refusal of the connection), final is a boolean, error is an
// object with exactly kind (one of the Kind constants) and a non-empty
// message, an error response is final and carries no result, and result,
// when present, is any JSON value but null. The result does not retain b.
func DecodeResponse(b []byte) (Response, error) {
	var resp Response
	fields, err := checkFrame(b, "response")
	if err != nil {
		return resp, err
	}
	v, ok := decodeString(fields["version"])
	if !ok {
		return resp, Errorf(KindVersion, "this client speaks %s; the daemon sent no version: upgrade the client or the daemon", Version)
	}
	if v != Version {
		return resp, Errorf(KindVersion, "this client speaks %s; the daemon sent %s: upgrade the client or the daemon", Version, show(v))
	}
	resp.Version = v
	if err := onlyFields(fields, responseFields, "response"); err != nil {
		return resp, err
	}
	id, ok := decodeID(fields["id"])
	if !ok {
		return resp, Errorf(KindBadRequest, "malformed response: id must be an integer from 0 to %d", uint64(MaxID))
	}
	resp.ID = id
	if f, ok := fields["final"]; ok {
		switch string(f) {
		case "true":
			resp.Final = true
		case "false":
		default:
			return resp, Errorf(KindBadRequest, "malformed response: final must be true or false")
		}
	}
	if e, ok := fields["error"]; ok {
		resp.Error, err = decodeError(e)
		if err != nil {
			return resp, err
		}
		if !resp.Final {
			return resp, Errorf(KindBadRequest, "malformed response: an error response must be final")
		}
	}
	if r, ok := fields["result"]; ok {
		if string(r) == "null" {
			return resp, Errorf(KindBadRequest, "malformed response: result must not be null; leave it out")
		}
		if resp.Error != nil {
			return resp, Errorf(KindBadRequest, "malformed response: a response carries an error or a result, not both")
		}
		resp.Result = r
	}
	return resp, nil
}

// DecodeArgs decodes a request's Args into v, refusing members v does not
// declare. DecodeRequest has already refused duplicate members, so the
// case-insensitive matching of encoding/json is unambiguous. Absent args
// decode as {}. Errors are *Error of KindBadRequest.
func DecodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return Errorf(KindBadRequest, "bad args: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return Errorf(KindBadRequest, "bad args: trailing data")
	}
	return nil
}

// checkFrame checks everything about a frame that does not depend on what
// it carries, and splits its top-level object into members (copies).
func checkFrame(b []byte, what string) (map[string]json.RawMessage, error) {
	if len(b) > MaxFrame {
		return nil, Errorf(KindTooLarge, "%s of %d bytes exceeds the limit of %d bytes", what, len(b), MaxFrame)
	}
	if !utf8.Valid(b) {
		return nil, Errorf(KindBadRequest, "malformed %s: not valid UTF-8", what)
	}
	if err := walk(b); err != nil {
		return nil, Errorf(KindBadRequest, "malformed %s: %v", what, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, Errorf(KindBadRequest, "malformed %s: %v", what, err)
	}
	return fields, nil
}

// walk checks the syntax of b token by token: exactly one value, an
// object, nested at most MaxDepth deep, no object naming a member twice
// (under the case folding encoding/json applies when it matches names).
func walk(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	type level struct {
		object bool
		key    bool // the next token is a member name or '}'
		names  map[string]bool
	}
	var stack []*level
	for first := true; ; first = false {
		tok, err := d.Token()
		if err == io.EOF {
			if first {
				return errors.New("empty frame")
			}
			return errors.New("unexpected end of frame")
		}
		if err != nil {
			return fmt.Errorf("at byte %d: %v", d.InputOffset(), err)
		}
		if first && tok != json.Delim('{') {
			return errors.New("a frame is one JSON object")
		}
		var top *level
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		switch {
		case top != nil && top.object && top.key && tok != json.Delim('}'):
			name := tok.(string) // the decoder yields only names here
			k := foldName(name)
			if top.names[k] {
				return fmt.Errorf("member %s appears twice in one object", show(name))
			}
			top.names[k] = true
			top.key = false
			continue
		case tok == json.Delim('{') || tok == json.Delim('['):
			if len(stack) == MaxDepth {
				return fmt.Errorf("nested deeper than %d", MaxDepth)
			}
			l := &level{object: tok == json.Delim('{'), key: true}
			if l.object {
				l.names = map[string]bool{}
			}
			stack = append(stack, l)
			continue
		case tok == json.Delim('}') || tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended.
		if len(stack) == 0 {
			if _, err := d.Token(); err != io.EOF {
				return errors.New("data after the frame's object")
			}
			return nil
		}
		if top := stack[len(stack)-1]; top.object {
			top.key = true
		}
	}
}

// foldName maps s to a key equal for two names exactly when
// strings.EqualFold holds, which is how encoding/json matches member
// names to fields: every rune becomes the smallest rune of its simple
// case-folding orbit.
func foldName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}

// onlyFields refuses members outside allowed, naming the first (sorted).
func onlyFields(fields map[string]json.RawMessage, allowed []string, what string) error {
	var unknown []string
	for k := range fields {
		if !contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return Errorf(KindBadRequest, "malformed %s: unknown member %s (a %s %s has exactly: %s)",
		what, show(unknown[0]), Version, what, strings.Join(allowed, ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// decodeString decodes raw as a JSON string; absent or another type is
// not ok.
func decodeString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// decodeID decodes an ID: an integer literal from 0 to MaxID.
func decodeID(raw json.RawMessage) (uint64, bool) {
	var id uint64
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' || json.Unmarshal(raw, &id) != nil || id > MaxID {
		return 0, false
	}
	return id, true
}

// decodeError decodes a response's error member.
func decodeError(raw json.RawMessage) (*Error, error) {
	var fields map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return nil, Errorf(KindBadRequest, "malformed response: error must be an object")
	}
	if err := onlyFields(fields, errorFields, "error"); err != nil {
		return nil, err
	}
	kind, ok := decodeString(fields["kind"])
	if !ok || !KnownKind(kind) {
		return nil, Errorf(KindBadRequest, "malformed response: error kind %s is not one of %s's", show(kind), Version)
	}
	msg, ok := decodeString(fields["message"])
	if !ok || msg == "" {
		return nil, Errorf(KindBadRequest, "malformed response: error message must be a non-empty string")
	}
	var fk failure.Kind
	if raw, ok := fields["failure"]; ok {
		s, ok := decodeString(raw)
		if !ok || !failure.Known(failure.Kind(s)) {
			return nil, Errorf(KindBadRequest, "malformed response: failure kind %s is not a known failure kind", show(s))
		}
		fk = failure.Kind(s)
	}
	return &Error{Kind: kind, Message: msg, Failure: fk}, nil
}

// show renders a peer-supplied string for a message: as is when it is a
// short run of harmless characters, else quoted and cut to 64 bytes.
func show(s string) string {
	safe := len(s) > 0 && len(s) <= 64
	for i := 0; safe && i < len(s); i++ {
		c := s[i]
		safe = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("./_-", c) >= 0
	}
	if safe {
		return s
	}
	if len(s) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}
