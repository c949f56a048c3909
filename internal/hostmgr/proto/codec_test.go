package proto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/google/go-cmp/cmp"
)

func TestDecodeRequest(t *testing.T) {
	good := []struct {
		in   string
		want Request
	}{
		{`{"version":"cordon-host/v1","id":1,"op":"ping"}`, Request{Version: Version, ID: 1, Op: "ping"}},
		{` {"op":"sandbox.create","id":9007199254740991,"version":"cordon-host/v1","args":{"name":"a","n":[1,{"x":null}]}} `,
			Request{Version: Version, ID: MaxID, Op: "sandbox.create", Args: json.RawMessage(`{"name":"a","n":[1,{"x":null}]}`)}},
		{`{"version":"cordon-host\/v1","id":2,"op":"a-b_c.d","args":{}}`, Request{Version: Version, ID: 2, Op: "a-b_c.d", Args: json.RawMessage(`{}`)}},
		// The same name in different objects is fine.
		{`{"version":"cordon-host/v1","id":3,"op":"x","args":{"a":{"a":1},"b":{"a":2}}}`,
			Request{Version: Version, ID: 3, Op: "x", Args: json.RawMessage(`{"a":{"a":1},"b":{"a":2}}`)}},
	}
	for _, tc := range good {
		got, err := DecodeRequest([]byte(tc.in))
		if err != nil {
			t.Errorf("DecodeRequest(%q) = %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("DecodeRequest(%q) (-want +got):\n%s", tc.in, diff)
		}
	}

	deep := `{"version":"cordon-host/v1","id":1,"op":"x","args":` + strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth) + `}`
	okDeep := `{"version":"cordon-host/v1","id":1,"op":"x","args":{"a":` + strings.Repeat(`[`, MaxDepth-2) + strings.Repeat(`]`, MaxDepth-2) + `}}`
	if _, err := DecodeRequest([]byte(okDeep)); err != nil {
		t.Errorf("DecodeRequest(depth %d) = %v, want nil", MaxDepth, err)
	}

	bad := []struct {
		name, in, kind, msg string
		id                  uint64
	}{
		{"empty", ``, KindBadRequest, "empty frame", 0},
		{"space", `   `, KindBadRequest, "empty frame", 0},
		{"not json", `hello`, KindBadRequest, "malformed request", 0},
		{"truncated", `{"version":"cordon-host/v1","id":1,"op":"x"`, KindBadRequest, "malformed request", 0},
		{"array", `[1]`, KindBadRequest, "one JSON object", 0},
		{"string", `"x"`, KindBadRequest, "one JSON object", 0},
		{"two objects", `{"version":"cordon-host/v1","id":1,"op":"x"}{}`, KindBadRequest, "data after", 0},
		{"trailing", `{"version":"cordon-host/v1","id":1,"op":"x"} x`, KindBadRequest, "data after", 0},
		{"bad utf8", "{\"version\":\"cordon-host/v1\",\"id\":1,\"op\":\"x\",\"args\":{\"a\":\"\xff\"}}", KindBadRequest, "UTF-8", 0},
		{"control char", "{\"version\":\"cordon-host/v1\",\"id\":1,\"op\":\"x\",\"args\":{\"a\":\"\x01\"}}", KindBadRequest, "malformed", 0},
		{"dup op", `{"version":"cordon-host/v1","id":1,"op":"ping","op":"stop"}`, KindBadRequest, `member op appears twice`, 0},
		{"dup folded", `{"version":"cordon-host/v1","id":1,"op":"ping","OP":"stop"}`, KindBadRequest, `member OP appears twice`, 0},
		{"dup escaped", `{"version":"cordon-host/v1","id":1,"op":"ping","\u006fp":"stop"}`, KindBadRequest, `appears twice`, 0},
		{"dup kelvin", `{"version":"cordon-host/v1","id":1,"op":"x","args":{"k":1,"\u212a":2}}`, KindBadRequest, `appears twice`, 0},
		{"dup nested", `{"version":"cordon-host/v1","id":1,"op":"x","args":{"name":"a","name":"b"}}`, KindBadRequest, `member name appears twice`, 0},
		{"dup version", `{"version":"cordon-host/v1","version":"cordon-host/v1","id":1,"op":"x"}`, KindBadRequest, `appears twice`, 0},
		{"too deep", deep, KindBadRequest, "nested deeper than 32", 0},
		{"unknown field", `{"version":"cordon-host/v1","id":4,"op":"x","path":"/etc"}`, KindBadRequest, `unknown member path`, 4},
		{"case variant", `{"version":"cordon-host/v1","id":4,"Op":"x"}`, KindBadRequest, `unknown member Op`, 4},
		{"no version", `{"id":5,"op":"x"}`, KindVersion, "this daemon speaks cordon-host/v1; the client sent no version: upgrade the client or the daemon", 5},
		{"version number", `{"version":1,"id":5,"op":"x"}`, KindVersion, "sent no version", 5},
		{"version v2", `{"version":"cordon-host/v2","id":5,"op":"x","new":true}`, KindVersion, "this daemon speaks cordon-host/v1; the client sent cordon-host/v2: upgrade the client or the daemon", 5},
		{"version case", `{"version":"Cordon-Host/v1","id":5,"op":"x"}`, KindVersion, "the client sent Cordon-Host/v1", 5},
		{"version odd", `{"version":"v1\n; rm -rf /","id":5,"op":"x"}`, KindVersion, `the client sent "v1\n; rm -rf /"`, 5},
		{"no id", `{"version":"cordon-host/v1","op":"x"}`, KindBadRequest, "id must be", 0},
		{"id zero", `{"version":"cordon-host/v1","id":0,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"id negative", `{"version":"cordon-host/v1","id":-1,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"id float", `{"version":"cordon-host/v1","id":1.5,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"id exp", `{"version":"cordon-host/v1","id":1e3,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"id string", `{"version":"cordon-host/v1","id":"1","op":"x"}`, KindBadRequest, "id must be", 0},
		{"id null", `{"version":"cordon-host/v1","id":null,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"id big", `{"version":"cordon-host/v1","id":9007199254740992,"op":"x"}`, KindBadRequest, "id must be", 0},
		{"no op", `{"version":"cordon-host/v1","id":6}`, KindBadRequest, "op must be a string", 6},
		{"op null", `{"version":"cordon-host/v1","id":6,"op":null}`, KindBadRequest, "op must be a string", 6},
		{"op empty", `{"version":"cordon-host/v1","id":6,"op":""}`, KindBadRequest, `bad operation name ""`, 6},
		{"op upper", `{"version":"cordon-host/v1","id":6,"op":"Ping"}`, KindBadRequest, "bad operation name Ping", 6},
		{"op digit", `{"version":"cordon-host/v1","id":6,"op":"1ping"}`, KindBadRequest, "bad operation name", 6},
		{"op slash", `{"version":"cordon-host/v1","id":6,"op":"../ping"}`, KindBadRequest, "bad operation name", 6},
		{"op space", `{"version":"cordon-host/v1","id":6,"op":"ping; id"}`, KindBadRequest, "bad operation name", 6},
		{"op nul", `{"version":"cordon-host/v1","id":6,"op":"ping\u0000"}`, KindBadRequest, "bad operation name", 6},
		{"op long", `{"version":"cordon-host/v1","id":6,"op":"` + strings.Repeat("a", 33) + `"}`, KindBadRequest, "bad operation name", 6},
		{"args null", `{"version":"cordon-host/v1","id":7,"op":"x","args":null}`, KindBadRequest, "args must be an object", 7},
		{"args array", `{"version":"cordon-host/v1","id":7,"op":"x","args":[]}`, KindBadRequest, "args must be an object", 7},
		{"args string", `{"version":"cordon-host/v1","id":7,"op":"x","args":"rm -rf /"}`, KindBadRequest, "args must be an object", 7},
		{"too large", `{"version":"cordon-host/v1","id":1,"op":"x","args":{"a":"` + strings.Repeat("a", MaxFrame) + `"}}`, KindTooLarge, "exceeds the limit of 262144 bytes", 0},
	}
	for _, tc := range bad {
		got, err := DecodeRequest([]byte(tc.in))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: DecodeRequest(%.60q) = %v, want an *Error", tc.name, tc.in, err)
			continue
		}
		if e.Kind != tc.kind || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: DecodeRequest(%.60q) = %v, want kind %s with %q", tc.name, tc.in, err, tc.kind, tc.msg)
		}
		if got.ID != tc.id {
			t.Errorf("%s: DecodeRequest(%.60q).ID = %d, want %d", tc.name, tc.in, got.ID, tc.id)
		}
	}
}

func TestDecodeRequestDoesNotRetain(t *testing.T) {
	b := []byte(`{"version":"cordon-host/v1","id":1,"op":"x","args":{"a":"b"}}`)
	req, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'z'
	}
	if string(req.Args) != `{"a":"b"}` {
		t.Errorf("Args = %s after the frame changed", req.Args)
	}
}

func TestDecodeResponse(t *testing.T) {
	good := []struct {
		in   string
		want Response
	}{
		{`{"version":"cordon-host/v1","id":1,"final":true}`, Response{Version: Version, ID: 1, Final: true}},
		{`{"version":"cordon-host/v1","id":1}`, Response{Version: Version, ID: 1}},
		{`{"version":"cordon-host/v1","id":1,"final":false,"result":{"state":"started"}}`, Response{Version: Version, ID: 1, Result: json.RawMessage(`{"state":"started"}`)}},
		{`{"version":"cordon-host/v1","id":1,"final":true,"result":[1,2]}`, Response{Version: Version, ID: 1, Final: true, Result: json.RawMessage(`[1,2]`)}},
		{`{"version":"cordon-host/v1","id":0,"final":true,"error":{"kind":"unavailable","message":"busy"}}`,
			Response{Version: Version, Final: true, Error: &Error{Kind: KindUnavailable, Message: "busy"}}},
		// The failure kind rides beside the wire kind, end to end.
		{`{"version":"cordon-host/v1","id":2,"final":true,"error":{"kind":"unauthorized","message":"no","failure":"policy_rejected"}}`,
			Response{Version: Version, ID: 2, Final: true, Error: &Error{Kind: KindUnauthorized, Message: "no", Failure: failure.KindPolicyRejected}}},
	}
	for _, tc := range good {
		got, err := DecodeResponse([]byte(tc.in))
		if err != nil {
			t.Errorf("DecodeResponse(%q) = %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("DecodeResponse(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
	bad := []struct{ name, in, kind, msg string }{
		{"v2", `{"version":"cordon-host/v2","id":1,"final":true,"extra":1}`, KindVersion, "this client speaks cordon-host/v1; the daemon sent cordon-host/v2: upgrade the client or the daemon"},
		{"no version", `{"id":1,"final":true}`, KindVersion, "the daemon sent no version"},
		{"dup", `{"version":"cordon-host/v1","id":1,"final":false,"final":true}`, KindBadRequest, "appears twice"},
		{"unknown", `{"version":"cordon-host/v1","id":1,"final":true,"files":[3]}`, KindBadRequest, "unknown member files"},
		{"final null", `{"version":"cordon-host/v1","id":1,"final":null}`, KindBadRequest, "final must be"},
		{"final string", `{"version":"cordon-host/v1","id":1,"final":"yes"}`, KindBadRequest, "final must be"},
		{"id null", `{"version":"cordon-host/v1","id":null,"final":true}`, KindBadRequest, "id must be"},
		{"no id", `{"version":"cordon-host/v1","final":true}`, KindBadRequest, "id must be"},
		{"error not final", `{"version":"cordon-host/v1","id":1,"error":{"kind":"internal","message":"x"}}`, KindBadRequest, "must be final"},
		{"error null", `{"version":"cordon-host/v1","id":1,"final":true,"error":null}`, KindBadRequest, "error must be an object"},
		{"error kind", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"oops","message":"x"}}`, KindBadRequest, "error kind oops"},
		{"error no message", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"internal"}}`, KindBadRequest, "message must be"},
		{"error extra", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"internal","message":"x","path":"/"}}`, KindBadRequest, "unknown member path"},
		{"failure kind", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"internal","message":"x","failure":"oops"}}`, KindBadRequest, "failure kind oops"},
		{"failure not string", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"internal","message":"x","failure":1}}`, KindBadRequest, "failure kind"},
		{"error and result", `{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"internal","message":"x"},"result":{}}`, KindBadRequest, "not both"},
		{"result null", `{"version":"cordon-host/v1","id":1,"final":true,"result":null}`, KindBadRequest, "must not be null"},
		{"too large", `{"version":"cordon-host/v1","id":1,"final":true,"result":"` + strings.Repeat("a", MaxFrame) + `"}`, KindTooLarge, "exceeds"},
	}
	for _, tc := range bad {
		_, err := DecodeResponse([]byte(tc.in))
		var e *Error
		if !errors.As(err, &e) || e.Kind != tc.kind || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: DecodeResponse(%.60q) = %v, want kind %s with %q", tc.name, tc.in, err, tc.kind, tc.msg)
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	req := Request{ID: 42, Op: "volume.create", Args: json.RawMessage(`{"name": "data"}`)}
	b, err := EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":"cordon-host/v1","id":42,"op":"volume.create","args":{"name":"data"}}`; string(b) != want {
		t.Errorf("EncodeRequest = %s, want %s", b, want)
	}
	got, err := DecodeRequest(b)
	if err != nil || got.ID != 42 || got.Op != req.Op || string(got.Args) != `{"name":"data"}` {
		t.Errorf("DecodeRequest(EncodeRequest) = %+v, %v", got, err)
	}
	if _, err := EncodeRequest(Request{ID: 0, Op: "x"}); KindOf(err) != KindBadRequest {
		t.Errorf("EncodeRequest(id 0) = %v, want bad_request", err)
	}

	b, err = EncodeResponse(Response{ID: 3, Error: Errorf(KindNotFound, "no sandbox %s", "a")})
	if KindOf(err) != KindBadRequest {
		t.Errorf("EncodeResponse(non-final error) = %s, %v; want bad_request", b, err)
	}
	b, err = EncodeResponse(Response{ID: 3, Final: true, Error: Errorf(KindNotFound, "no sandbox %s", "a")})
	if want := `{"version":"cordon-host/v1","id":3,"final":true,"error":{"kind":"not_found","message":"no sandbox a"}}`; err != nil || string(b) != want {
		t.Errorf("EncodeResponse = %s, %v; want %s", b, err, want)
	}
	if _, err := EncodeResponse(Response{ID: 3, Final: true, Error: &Error{Kind: "nope", Message: "x"}}); err == nil {
		t.Errorf("EncodeResponse(unknown kind) = nil, want an error")
	}
	big := json.RawMessage(`"` + strings.Repeat("x", MaxFrame) + `"`)
	if _, err := EncodeResponse(Response{ID: 3, Final: true, Result: big}); KindOf(err) != KindTooLarge {
		t.Errorf("EncodeResponse(big) = %v, want too_large", err)
	}
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "0", "web-1", "my_box", strings.Repeat("a", 63), "9lives"} {
		if err := ValidName(s); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", s, err)
		}
	}
	for _, tc := range []struct{ in, why string }{
		{"", "it is empty"},
		{".", "it is a path element"},
		{"..", "it is a path element"},
		{"a/b", "contains '/'"},
		{"../etc", "contains '/'"},
		{"/", "contains '/'"},
		{"a\x00", "contains NUL"},
		{"a.b", "contains '.'"},
		{"a b", "contains a space"},
		{"a\tb", "contains a space"},
		{"Web", "outside the set"},
		{"-a", "starts with '-'"},
		{"_a", "starts with '_'"},
		{strings.Repeat("a", 64), "64 bytes long"},
		{"é", "outside the set"},
		{"a\n", "contains a space"},
	} {
		err := ValidName(tc.in)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindBadRequest || !strings.Contains(e.Message, tc.why) || !strings.Contains(e.Message, "a name is 1 to 63 characters") {
			t.Errorf("ValidName(%q) = %v, want bad_request saying %q and the rule", tc.in, err, tc.why)
		}
	}
}

func TestDecodeArgs(t *testing.T) {
	var a struct {
		Name string `json:"name"`
	}
	if err := DecodeArgs(json.RawMessage(`{"name":"x"}`), &a); err != nil || a.Name != "x" {
		t.Errorf("DecodeArgs = %v, %+v", err, a)
	}
	if err := DecodeArgs(nil, &a); err != nil {
		t.Errorf("DecodeArgs(nil) = %v", err)
	}
	if err := DecodeArgs(json.RawMessage(`{"name":"x","path":"/etc"}`), &a); KindOf(err) != KindBadRequest {
		t.Errorf("DecodeArgs(unknown member) = %v, want bad_request", err)
	}
	if err := DecodeArgs(json.RawMessage(`{"name":1}`), &a); KindOf(err) != KindBadRequest {
		t.Errorf("DecodeArgs(wrong type) = %v, want bad_request", err)
	}
}

func TestShow(t *testing.T) {
	for in, want := range map[string]string{
		"cordon-host/v2":        "cordon-host/v2",
		"":                      `""`,
		"a b":                   `"a b"`,
		strings.Repeat("é", 40): `"` + strings.Repeat("é", 32) + `"…`,
	} {
		if got := show(in); got != want {
			t.Errorf("show(%q) = %s, want %s", in, got, want)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	frame := []byte(`{"version":"cordon-host/v1","id":2,"op":"sandbox.create","args":{"name":"web-1","level":"DEDICATED_CONTAINER","argv":["/bin/sh","-c","id"],"env":["A=b","C=d"],"volumes":[{"name":"data","ro":true}]}}`)
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := DecodeRequest(frame); err != nil {
			b.Fatal(err)
		}
	}
}
