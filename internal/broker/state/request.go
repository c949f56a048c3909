package state

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The endpoints besides Path/{key}.
const (
	exportPath = Path + ":export"
	resetPath  = Path + ":reset"
)

// refusal is a request refused before it reaches the authority.
type refusal struct {
	status int
	kind   string
	msg    string
	allow  string // Allow header of a 405
}

func (r *refusal) Error() string { return r.msg }

func badRequest(format string, args ...any) *refusal {
	return &refusal{status: http.StatusBadRequest, kind: kindInvalid, msg: fmt.Sprintf(format, args...)}
}

// parseRequest turns what the agent sent — the method, the path as it
// was escaped on the wire, the raw query and the precondition headers —
// into one operation. Nothing else of the request is read; the body (a
// put's value) is read by the caller.
//
// The path is taken escaped and may not contain '%': no key character
// needs escaping, so the key is exactly what was sent, and no two
// spellings of a path name the same entry.
func parseRequest(method, escapedPath, rawQuery string, h http.Header) (Request, *refusal) {
	if strings.Contains(escapedPath, "%") {
		return Request{}, badRequest("percent-encoding is not allowed in state paths: keys are made of A-Z, a-z, 0-9, '.', '_', '-' and '/'")
	}
	var req Request
	var allow string
	switch {
	case escapedPath == Path:
		req.Op, allow = OpList, "GET"
	case escapedPath == exportPath:
		req.Op, allow = OpExport, "GET"
	case escapedPath == resetPath:
		req.Op, allow = OpReset, "POST"
	case strings.HasPrefix(escapedPath, Path+"/"):
		req.Key, allow = escapedPath[len(Path)+1:], "GET, HEAD, PUT, DELETE"
		switch method {
		case http.MethodGet, http.MethodHead:
			req.Op = OpGet
		case http.MethodPut:
			req.Op = OpPut
		case http.MethodDelete:
			req.Op = OpDelete
		}
	default:
		return Request{}, &refusal{status: http.StatusNotFound, kind: kindNoEndpoint,
			msg: "no such endpoint: the state API is " + Path + ", " + Path + "/{key}, " + exportPath + " and " + resetPath}
	}
	switch {
	case req.Op == OpGet || req.Op == OpPut || req.Op == OpDelete:
	case (req.Op == OpList || req.Op == OpExport) && method == http.MethodGet,
		req.Op == OpReset && method == http.MethodPost:
	default:
		return Request{}, &refusal{status: http.StatusMethodNotAllowed, kind: kindMethod, msg: "method " + clip(method, 16) + " not allowed here; allowed: " + allow, allow: allow}
	}
	if req.Op == OpGet || req.Op == OpPut || req.Op == OpDelete {
		if err := ValidKey(req.Key); err != nil {
			return Request{}, badRequest("%v", err)
		}
	}
	if err := parseQuery(&req, rawQuery); err != nil {
		return Request{}, err
	}
	if err := parsePreconditions(&req, h); err != nil {
		return Request{}, err
	}
	return req, nil
}

// parseQuery reads a listing's prefix, after and limit, each at most
// once; other operations take no query.
func parseQuery(req *Request, raw string) *refusal {
	if raw == "" {
		if req.Op == OpList {
			req.Limit = DefaultListLimit
		}
		return nil
	}
	if req.Op != OpList {
		return badRequest("this endpoint takes no query parameters")
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return badRequest("malformed query")
	}
	req.Limit = DefaultListLimit
	for k, vs := range q {
		if len(vs) != 1 {
			return badRequest("query parameter %q given more than once", clip(k, 32))
		}
		v := vs[0]
		switch k {
		case "prefix", "after":
			if err := ValidCursor(v); err != nil {
				return badRequest("%s: %v", k, err)
			}
			if k == "prefix" {
				req.Prefix = v
			} else {
				req.After = v
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit || strconv.Itoa(n) != v {
				return badRequest("limit: want a number from 1 to %d", MaxListLimit)
			}
			req.Limit = n
		default:
			return badRequest("unknown query parameter %q (want prefix, after or limit)", clip(k, 32))
		}
	}
	return nil
}

// parsePreconditions reads If-Match ("<version>" or *) on put and delete
// and If-None-Match (only *) on put. Preconditions the broker does not
// evaluate are refused rather than ignored: a client relying on one
// would lose an update without knowing.
func parsePreconditions(req *Request, h http.Header) *refusal {
	im, inm := h.Values("If-Match"), h.Values("If-None-Match")
	if len(h.Values("If-Unmodified-Since")) > 0 {
		return badRequest("If-Unmodified-Since is not supported; use If-Match with the entry's ETag")
	}
	if len(im) == 0 && len(inm) == 0 {
		return nil
	}
	switch {
	case req.Op != OpPut && req.Op != OpDelete:
		return badRequest("If-Match and If-None-Match apply to PUT and DELETE only")
	case len(im) > 0 && len(inm) > 0:
		return badRequest("send If-Match or If-None-Match, not both")
	case len(im) > 1 || len(inm) > 1:
		return badRequest("send one If-Match or If-None-Match header")
	case len(inm) == 1:
		if req.Op != OpPut || strings.TrimSpace(inm[0]) != "*" {
			return badRequest(`If-None-Match takes only "*" (create only), on PUT`)
		}
		req.IfAbsent = true
		return nil
	}
	v := strings.TrimSpace(im[0])
	if v == "*" {
		req.IfExists = true
		return nil
	}
	n, ok := ParseETag(v)
	if !ok {
		return badRequest(`If-Match: want one ETag as the broker sent it, e.g. "3", or *`)
	}
	req.IfMatch = n
	return nil
}

// ETag is the entity tag of version v: the decimal version in quotes.
func ETag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// ParseETag reads an ETag this broker made: a strong tag holding a
// positive decimal version without leading zeros.
func ParseETag(s string) (int64, bool) {
	if len(s) < 3 || len(s) > 21 || s[0] != '"' || s[len(s)-1] != '"' {
		return 0, false
	}
	d := s[1 : len(s)-1]
	n, err := strconv.ParseInt(d, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != d {
		return 0, false
	}
	return n, true
}

// clip shortens what the agent sent for an error message (the message
// is JSON-encoded; %q quotes it where it is a name).
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
