package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeRequest checks that DecodeRequest never panics, refuses with an
// *Error of a known kind, and accepts only requests that keep the
// protocol's rules and survive a round trip. Seeds:
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"version":"cordon-host/v1","id":1,"op":"ping"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !KnownKind(e.Kind) || e.Message == "" {
				t.Fatalf("DecodeRequest(%q) = %v, want an *Error of a known kind", b, err)
			}
			if req.ID > MaxID {
				t.Fatalf("DecodeRequest(%q).ID = %d on error", b, req.ID)
			}
			return
		}
		if len(b) > MaxFrame || !utf8.Valid(b) || req.Version != Version || req.ID == 0 || req.ID > MaxID || ValidOp(req.Op) != nil {
			t.Fatalf("DecodeRequest(%q) accepted %+v", b, req)
		}
		if req.Args != nil && (len(req.Args) == 0 || req.Args[0] != '{') {
			t.Fatalf("DecodeRequest(%q) accepted args %s", b, req.Args)
		}
		enc, err := EncodeRequest(req)
		if err != nil {
			t.Fatalf("EncodeRequest(%+v) = %v", req, err)
		}
		again, err := DecodeRequest(enc)
		if err != nil {
			t.Fatalf("DecodeRequest(EncodeRequest(%+v)) = %v", req, err)
		}
		var want, got bytes.Buffer
		if err := compactArgs(&want, req.Args); err != nil {
			t.Fatal(err)
		}
		if err := compactArgs(&got, again.Args); err != nil {
			t.Fatal(err)
		}
		req.Args, again.Args = nil, nil
		if diff := cmp.Diff(req, again); diff != "" || want.String() != got.String() {
			t.Fatalf("round trip of %q (-first +second):\n%s\nargs %s vs %s", b, diff, want.String(), got.String())
		}
	})
}

// FuzzDecodeResponse is FuzzDecodeRequest for the client's side. Seeds:
// testdata/fuzz/FuzzDecodeResponse.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"version":"cordon-host/v1","id":1,"final":true,"result":{"ok":true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := DecodeResponse(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !KnownKind(e.Kind) || e.Message == "" {
				t.Fatalf("DecodeResponse(%q) = %v, want an *Error of a known kind", b, err)
			}
			return
		}
		if len(b) > MaxFrame || resp.Version != Version || resp.ID > MaxID {
			t.Fatalf("DecodeResponse(%q) accepted %+v", b, resp)
		}
		if resp.Error != nil && (!resp.Final || resp.Result != nil || !KnownKind(resp.Error.Kind) || resp.Error.Message == "") {
			t.Fatalf("DecodeResponse(%q) accepted error %+v", b, resp)
		}
		enc, err := EncodeResponse(resp)
		if err != nil {
			t.Fatalf("EncodeResponse(%+v) = %v", resp, err)
		}
		again, err := DecodeResponse(enc)
		if err != nil {
			t.Fatalf("DecodeResponse(EncodeResponse(%+v)) = %v", resp, err)
		}
		var want, got bytes.Buffer
		if err := compactArgs(&want, resp.Result); err != nil {
			t.Fatal(err)
		}
		if err := compactArgs(&got, again.Result); err != nil {
			t.Fatal(err)
		}
		resp.Result, again.Result = nil, nil
		if diff := cmp.Diff(resp, again); diff != "" || want.String() != got.String() {
			t.Fatalf("round trip of %q (-first +second):\n%s", b, diff)
		}
	})
}

// compactArgs writes raw compacted and with HTML characters escaped, as
// json.Marshal re-encodes a RawMessage.
func compactArgs(w *bytes.Buffer, raw []byte) error {
	if raw == nil {
		return nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return err
	}
	json.HTMLEscape(w, c.Bytes())
	return nil
}
