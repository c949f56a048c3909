package model

import (
	"net/http"
	"strconv"

	"github.com/cordon-project/cordon/internal/textsafe"
)

// api is the wire protocol of a request; it decides the shape of every
// refusal so the agent's SDK reports it as the provider's own error.
type api uint8

const (
	apiAnthropic api = iota + 1
	apiOpenAI
	apiGemini
)

func (a api) String() string {
	switch a {
	case apiOpenAI:
		return "openai"
	case apiGemini:
		return "gemini"
	}
	return "anthropic"
}

// kind is the closed set of refusals the broker answers with.
type kind uint8

const (
	kindInvalid     kind = iota // malformed request
	kindForbidden               // not allowed: model, attachment by reference, connector
	kindNotFound                // no such endpoint
	kindTooLarge                // request or attachment over a limit
	kindBudget                  // workload budget exhausted
	kindBusy                    // broker-wide stream slots exhausted
	kindInternal                // gateway bug (no identity)
	kindUpstream                // provider unreachable or misbehaving
	kindUnavailable             // authority or custodian unavailable
)

// kinds maps each refusal to its status and the providers' error types
// (Gemini's is a google.rpc status name).
var kinds = [...]struct {
	status                                    int
	anthropic, openaiType, openaiCode, gemini string
}{
	kindInvalid:     {400, "invalid_request_error", "invalid_request_error", "invalid_request", "INVALID_ARGUMENT"},
	kindForbidden:   {403, "permission_error", "permission_error", "permission_denied", "PERMISSION_DENIED"},
	kindNotFound:    {404, "not_found_error", "invalid_request_error", "unknown_url", "NOT_FOUND"},
	kindTooLarge:    {413, "request_too_large", "invalid_request_error", "request_too_large", "INVALID_ARGUMENT"},
	kindBudget:      {429, "rate_limit_error", "insufficient_quota", "insufficient_quota", "RESOURCE_EXHAUSTED"},
	kindBusy:        {429, "rate_limit_error", "requests", "rate_limit_exceeded", "RESOURCE_EXHAUSTED"},
	kindInternal:    {500, "api_error", "server_error", "internal_error", "INTERNAL"},
	kindUpstream:    {502, "api_error", "server_error", "upstream_error", "UNAVAILABLE"},
	kindUnavailable: {503, "overloaded_error", "server_error", "service_unavailable", "UNAVAILABLE"},
}

// refusal is a denial with the message shown to the agent. Messages are
// written by this package: never a secret, a host path or policy source.
type refusal struct {
	kind kind
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(k kind, msg string) *refusal { return &refusal{kind: k, msg: msg} }

// errorBody renders the provider-shaped JSON error body.
func errorBody(dst []byte, a api, k kind, msg string) []byte {
	t := kinds[k]
	if a == apiGemini {
		dst = append(dst, `{"error":{"code":`...)
		dst = strconv.AppendInt(dst, int64(t.status), 10)
		dst = append(dst, `,"message":`...)
		dst = textsafe.AppendJSONString(dst, msg)
		dst = append(dst, `,"status":`...)
		dst = textsafe.AppendJSONString(dst, t.gemini)
		return append(dst, "}}"...)
	}
	if a == apiOpenAI {
		dst = append(dst, `{"error":{"message":`...)
		dst = textsafe.AppendJSONString(dst, msg)
		dst = append(dst, `,"type":`...)
		dst = textsafe.AppendJSONString(dst, t.openaiType)
		dst = append(dst, `,"param":null,"code":`...)
		dst = textsafe.AppendJSONString(dst, t.openaiCode)
		return append(dst, "}}"...)
	}
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = textsafe.AppendJSONString(dst, t.anthropic)
	dst = append(dst, `,"message":`...)
	dst = textsafe.AppendJSONString(dst, msg)
	return append(dst, "}}"...)
}

// writeError answers with a provider-shaped error.
func writeError(w http.ResponseWriter, a api, k kind, msg string) int {
	body := errorBody(make([]byte, 0, 160), a, k, msg)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Cordon-Broker", "model")
	w.WriteHeader(kinds[k].status)
	w.Write(body)
	return len(body)
}

// errorEvent renders a provider-shaped SSE error event, used to end a
// stream that cannot go on (the status line has already been sent).
// resp marks the OpenAI Responses API, whose stream errors are typed
// events rather than chat's bare error objects.
func errorEvent(dst []byte, a api, resp bool, k kind, msg string) []byte {
	t := kinds[k]
	switch {
	case a == apiGemini:
		dst = append(dst, "data: "...)
		dst = errorBody(dst, a, k, msg)
	case a == apiAnthropic:
		dst = append(dst, "event: error\ndata: "...)
		dst = errorBody(dst, a, k, msg)
	case resp:
		dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
		dst = textsafe.AppendJSONString(dst, t.openaiCode)
		dst = append(dst, `,"message":`...)
		dst = textsafe.AppendJSONString(dst, msg)
		dst = append(dst, `,"param":null}`...)
	default:
		dst = append(dst, "data: "...)
		dst = errorBody(dst, a, k, msg)
	}
	return append(dst, "\n\n"...)
}

// quoteForMessage renders agent-supplied text for an error message or
// receipt: quoted, bounded, printable.
func quoteForMessage(b []byte) string {
	const max = 128
	cut := false
	if len(b) > max {
		b, cut = b[:max], true
	}
	q := strconv.QuoteToASCII(string(b))
	if cut {
		q += "…"
	}
	return q
}
