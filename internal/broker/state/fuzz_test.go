package state

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzStateRequest: parsing what the agent sent never panics, and what
// it accepts is one well-formed operation: the key is exactly the path's
// suffix and valid, list bounds hold, at most one precondition is set and
// only where it applies, and an If-Match version is the one sent.
func FuzzStateRequest(f *testing.F) {
	f.Add("GET", "/v1/state/notes/a", "", "", "")
	f.Add("PUT", "/v1/state/notes/a", "", `"3"`, "")
	f.Add("PUT", "/v1/state/notes/a", "", "", "*")
	f.Add("DELETE", "/v1/state/a/b/c", "", "*", "")
	f.Add("GET", "/v1/state", "prefix=notes/&after=notes/a&limit=50", "", "")
	f.Add("GET", "/v1/state:export", "", "", "")
	f.Add("POST", "/v1/state:reset", "", "", "")
	f.Add("GET", "/v1/state/a%2F..%2Fb", "", "", "")
	f.Add("PUT", "/v1/state/a", "", `W/"1"`, "")
	f.Fuzz(func(t *testing.T, method, path, query, ifMatch, ifNoneMatch string) {
		h := http.Header{}
		if ifMatch != "" {
			h.Set("If-Match", ifMatch)
		}
		if ifNoneMatch != "" {
			h.Set("If-None-Match", ifNoneMatch)
		}
		req, ref := parseRequest(method, path, query, h)
		if ref != nil {
			if ref.status < 400 || ref.status > 499 || ref.kind == "" {
				t.Fatalf("refusal %+v", ref)
			}
			return
		}
		switch req.Op {
		case OpGet, OpPut, OpDelete:
			if err := ValidKey(req.Key); err != nil || path != Path+"/"+req.Key {
				t.Fatalf("%s %q: key %q (%v)", method, path, req.Key, err)
			}
			if req.Prefix != "" || req.After != "" || req.Limit != 0 {
				t.Fatalf("key operation with list fields: %+v", req)
			}
		case OpList:
			if path != Path || req.Limit < 1 || req.Limit > MaxListLimit || ValidCursor(req.Prefix) != nil || ValidCursor(req.After) != nil {
				t.Fatalf("list %+v from %q %q", req, path, query)
			}
		case OpExport, OpReset:
			if req.Key != "" || req.Limit != 0 || query != "" {
				t.Fatalf("%s %+v from %q", req.Op, req, query)
			}
		default:
			t.Fatalf("unknown op %q", req.Op)
		}
		conds := 0
		for _, c := range []bool{req.IfMatch != 0, req.IfExists, req.IfAbsent} {
			if c {
				conds++
			}
		}
		if conds > 1 || conds == 1 && req.Op != OpPut && req.Op != OpDelete || req.IfAbsent && req.Op != OpPut {
			t.Fatalf("preconditions %+v", req)
		}
		if req.IfMatch != 0 && ETag(req.IfMatch) != strings.TrimSpace(ifMatch) {
			t.Fatalf("If-Match %q read as %d", ifMatch, req.IfMatch)
		}
		if req.IfMatch < 0 {
			t.Fatalf("negative version %d", req.IfMatch)
		}
	})
}
