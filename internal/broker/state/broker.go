package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/loglimit"
)

// Error types in the JSON body of every refusal: {"error": {"type": …,
// "message": …}}.
const (
	kindInvalid      = "invalid_request"
	kindNotFound     = "not_found"
	kindNoEndpoint   = "no_such_endpoint"
	kindMethod       = "method_not_allowed"
	kindPrecondition = "precondition_failed"
	kindQuota        = "quota_exceeded"
	kindTooLarge     = "value_too_large"
	kindDenied       = "denied"
	kindUnavailable  = "unavailable"
	kindNoIdentity   = "no_identity"
	// An operator must approve this exact operation first (409), or
	// denied it (403).
	kindApprovalPending = "approval_pending"
	kindApprovalDenied  = "approval_denied"
	kindBudget          = "budget_exceeded"
)

// opTimeout bounds one operation's round trip to the privileged side.
const opTimeout = 30 * time.Second

// Options configure a Broker.
type Options struct {
	Authority Authority
	Logger    *slog.Logger
}

// Broker serves the state API to the agent.
type Broker struct {
	authority Authority
	log       *slog.Logger
	warns     loglimit.Bucket // the WARN lines of refusals (the agent's to repeat)
}

// New returns the state broker.
func New(o Options) (*Broker, error) {
	if o.Authority == nil {
		return nil, errors.New("state broker: no authority")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Broker{authority: o.Authority, log: o.Logger}, nil
}

// outcome is what one request came to, for the log line.
type outcome struct {
	id      crossing.Identity
	op, key string
	status  int
	reason  string
	receipt int64
	start   time.Time
}

// ServeHTTP serves the state API.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o := &outcome{start: time.Now()}
	defer b.logOutcome(r.Context(), o)
	id, ok := crossing.IdentityFrom(r.Context())
	if !ok {
		// A gateway bug: every listener binds an identity. No scope, so
		// nothing is done.
		b.refuse(w, o, http.StatusForbidden, kindNoIdentity, "the gateway did not identify this sandbox; nothing was done", nil)
		return
	}
	o.id = id
	req, ref := parseRequest(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header)
	if ref != nil {
		if ref.allow != "" {
			w.Header().Set("Allow", ref.allow)
		}
		b.refuse(w, o, ref.status, ref.kind, ref.msg, nil)
		return
	}
	o.op, o.key = req.Op, req.Key
	switch req.Op {
	case OpPut:
		v, ref := readValue(r)
		if ref != nil {
			b.refuse(w, o, ref.status, ref.kind, ref.msg, nil)
			return
		}
		req.Value = v
	case OpReset:
		if n, _ := io.ReadFull(r.Body, make([]byte, 1)); n > 0 {
			b.refuse(w, o, http.StatusBadRequest, kindInvalid, "reset takes no body", nil)
			return
		}
	}
	if req.Op == OpExport {
		b.export(r.Context(), w, o)
		return
	}
	// The operation completes once asked even if the agent goes away: its
	// receipt says what was done.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), opTimeout)
	defer cancel()
	resp, err := b.authority.State(ctx, req)
	o.receipt = resp.Receipt
	if err != nil {
		b.refuseErr(w, o, resp, err)
		return
	}
	setCommon(w)
	h := w.Header()
	if resp.Receipt != 0 {
		h.Set("X-Cordon-Receipt", strconv.FormatInt(resp.Receipt, 10))
	}
	o.status, o.reason = http.StatusOK, req.Op
	switch req.Op {
	case OpGet:
		e := resp.Entry
		if e == nil {
			b.refuseErr(w, o, resp, fmt.Errorf("%w: get without an entry", crossing.ErrUnavailable))
			return
		}
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(len(e.Value)))
		h.Set("ETag", ETag(e.Version))
		h.Set("Last-Modified", e.Updated.UTC().Format(http.TimeFormat))
		h.Set("X-Cordon-Written-By", e.Provenance.SandboxID)
		h.Set("X-Cordon-Write-Receipt", strconv.FormatInt(e.Provenance.Receipt, 10))
		h.Set("X-Cordon-Trust", TrustAgent)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(e.Value)
	case OpPut:
		if resp.Entry == nil {
			b.refuseErr(w, o, resp, fmt.Errorf("%w: put without an entry", crossing.ErrUnavailable))
			return
		}
		h.Set("ETag", ETag(resp.Entry.Version))
		if resp.Created {
			o.status = http.StatusCreated
		}
		writeJSON(w, o.status, resp.Entry)
	case OpDelete:
		o.status = http.StatusNoContent
		w.WriteHeader(http.StatusNoContent)
	case OpList:
		l := listing{Entries: resp.Entries, More: resp.More, Usage: resp.Usage}
		if l.Entries == nil {
			l.Entries = []Entry{}
		}
		if resp.More && len(resp.Entries) > 0 {
			l.Next = resp.Entries[len(resp.Entries)-1].Key
		}
		writeJSON(w, http.StatusOK, l)
	case OpReset:
		writeJSON(w, http.StatusOK, struct {
			Deleted int64 `json:"deleted"`
			Receipt int64 `json:"receipt"`
		}{resp.Deleted, resp.Receipt})
	}
}

// listing is the body of GET /v1/state.
type listing struct {
	Entries []Entry `json:"entries"`
	More    bool    `json:"more"`
	// Next is the after= of the next page, when More.
	Next  string `json:"next,omitempty"`
	Usage *Usage `json:"usage,omitempty"`
}

// readValue reads a put's body, up to the largest value any
// configuration allows; the privileged side applies the configured bound.
func readValue(r *http.Request) ([]byte, *refusal) {
	tooLarge := &refusal{status: http.StatusRequestEntityTooLarge, kind: kindTooLarge,
		msg: fmt.Sprintf("the value is larger than %d bytes, the most any configuration allows", MaxValueBytesLimit)}
	if r.ContentLength > MaxValueBytesLimit {
		return nil, tooLarge
	}
	v, err := io.ReadAll(io.LimitReader(r.Body, MaxValueBytesLimit+1))
	if err != nil {
		return nil, badRequest("reading the value: %v", err)
	}
	if len(v) > MaxValueBytesLimit {
		return nil, tooLarge
	}
	return v, nil
}

// export streams every entry of the scope as one JSON document, page by
// page, each page bounded in time on its own. Once the document has
// started, a failed page cuts the response short (the connection is
// aborted), so a partial export can never be taken for a whole one; an
// agent that goes away stops it (a read: nothing is left half done).
func (b *Broker) export(rctx context.Context, w http.ResponseWriter, o *outcome) {
	var after string
	var n int
	for page := 0; ; page++ {
		ctx, cancel := context.WithTimeout(rctx, opTimeout)
		resp, err := b.authority.State(ctx, Request{Op: OpExport, After: after})
		cancel()
		if page == 0 {
			o.receipt = resp.Receipt
			if err != nil {
				b.refuseErr(w, o, resp, err)
				return
			}
			setCommon(w)
			w.Header().Set("Content-Type", "application/json")
			if resp.Receipt != 0 {
				w.Header().Set("X-Cordon-Receipt", strconv.FormatInt(resp.Receipt, 10))
			}
			head, _ := json.Marshal(struct {
				Scope *Scope `json:"scope"`
				Usage *Usage `json:"usage"`
			}{resp.Scope, resp.Usage})
			w.WriteHeader(http.StatusOK)
			// {"scope":…,"usage":…,"entries":[ … ]}
			_, _ = w.Write(head[:len(head)-1])
			_, _ = io.WriteString(w, `,"entries":[`)
			o.status, o.reason = http.StatusOK, "export"
		} else if err != nil {
			o.status, o.reason = 0, "export cut short: "+err.Error()
			panic(http.ErrAbortHandler)
		}
		for _, e := range resp.Entries {
			if e.Key <= after && page > 0 {
				// The privileged side went backwards: never loop.
				o.reason = "export cut short: pages out of order"
				panic(http.ErrAbortHandler)
			}
			sep := ",\n"
			if n == 0 {
				sep = "\n"
			}
			eb, _ := json.Marshal(e)
			_, _ = io.WriteString(w, sep)
			_, _ = w.Write(eb)
			n++
		}
		if !resp.More || len(resp.Entries) == 0 {
			break
		}
		after = resp.Entries[len(resp.Entries)-1].Key
	}
	_, _ = io.WriteString(w, "\n]}\n")
}

// refuseErr answers an authority refusal. Absent (and foreign) entries get
// one fixed answer.
func (b *Broker) refuseErr(w http.ResponseWriter, o *outcome, resp Response, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		b.refuse(w, o, http.StatusNotFound, kindNotFound, ErrNotFound.Error(), nil)
	case errors.Is(err, ErrPrecondition):
		extra := map[string]any{}
		if resp.Current > 0 {
			extra["current_etag"] = ETag(resp.Current)
		}
		b.refuse(w, o, http.StatusPreconditionFailed, kindPrecondition, err.Error(), extra)
	case errors.Is(err, ErrQuota):
		b.refuse(w, o, http.StatusInsufficientStorage, kindQuota, err.Error(),
			map[string]any{"quota": resp.Quota, "limit": resp.Limit, "used": resp.Used, "needed": resp.Needed})
	case errors.Is(err, ErrTooLarge):
		b.refuse(w, o, http.StatusRequestEntityTooLarge, kindTooLarge, err.Error(), map[string]any{"limit": resp.Limit})
	case errors.Is(err, ErrInvalid):
		b.refuse(w, o, http.StatusBadRequest, kindInvalid, err.Error(), nil)
	case errors.Is(err, crossing.ErrApprovalPending) && resp.Approval != nil:
		o.reason = err.Error()
		b.refuse(w, o, http.StatusConflict, kindApprovalPending,
			"approval pending: this exact operation needs an operator's approval (id "+resp.Approval.ID+", expires "+
				resp.Approval.Expires.UTC().Format(time.RFC3339)+"). Nothing was done. Retry the same request once it is approved.",
			map[string]any{"approval_id": resp.Approval.ID, "expires": resp.Approval.Expires.UTC()})
	case errors.Is(err, crossing.ErrApprovalDenied):
		o.reason = err.Error()
		extra := map[string]any{}
		if resp.Approval != nil {
			extra["approval_id"] = resp.Approval.ID
		}
		b.refuse(w, o, http.StatusForbidden, kindApprovalDenied, "an operator denied this exact operation, or too many approvals are waiting; nothing was done", extra)
	case errors.Is(err, crossing.ErrBudgetExceeded):
		// The sandbox's crossing rate or receipt bound: nothing was done.
		o.reason = err.Error()
		b.refuse(w, o, http.StatusTooManyRequests, kindBudget, "cordon: "+err.Error(), nil)
	case errors.Is(err, crossing.ErrPolicyDenied):
		// Not the policy's ids or text: only that it refused.
		o.reason = err.Error()
		b.refuse(w, o, http.StatusForbidden, kindDenied, "denied by policy", nil)
	default:
		b.log.Error("state authority unavailable", "err", err)
		o.reason = err.Error()
		b.refuse(w, o, http.StatusServiceUnavailable, kindUnavailable, "cordon: the state store is unavailable; nothing was done", nil)
	}
}

// refuse writes a JSON error. Its bytes depend only on the arguments: no
// Date, nothing of the request.
func (b *Broker) refuse(w http.ResponseWriter, o *outcome, status int, kind, msg string, extra map[string]any) {
	o.status = status
	if o.reason == "" {
		o.reason = msg
	}
	body := map[string]any{"type": kind, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	setCommon(w)
	writeJSON(w, status, map[string]any{"error": body})
}

// setCommon sets what every answer carries. The Date header is
// suppressed so that two answers with the same content are the same
// bytes (an absent and a foreign entry's 404 included).
func setCommon(w http.ResponseWriter) {
	h := w.Header()
	h["Date"] = nil
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"type":"unavailable","message":"cordon: encoding the answer failed"}}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// logOutcome is the one log line of a request.
func (b *Broker) logOutcome(ctx context.Context, o *outcome) {
	decision, lvl := crossing.Allow, slog.LevelInfo
	switch {
	case o.status == http.StatusNotFound, o.status == http.StatusPreconditionFailed:
		// What a working agent meets: a key it has not written yet, a
		// concurrent write. Refusals, but not alarms.
		decision = crossing.Deny
	case o.status >= 400 || o.status == 0:
		decision, lvl = crossing.Deny, slog.LevelWarn
	}
	if !b.log.Enabled(ctx, lvl) {
		return
	}
	var extra []slog.Attr
	if lvl > slog.LevelInfo {
		dropped, ok := b.warns.Admit(time.Now())
		if !ok {
			return
		}
		if dropped > 0 {
			extra = append(extra, slog.Int64("suppressed", dropped))
		}
	}
	b.log.LogAttrs(ctx, lvl, "state crossing", append([]slog.Attr{
		slog.String("workload", o.id.Workload),
		slog.String("broker", Name),
		slog.String("decision", decision),
		slog.String("reason", o.reason),
		slog.String("rule", ""),
		slog.Int64("receipt", o.receipt),
		slog.String("sandbox_id", o.id.SandboxID),
		slog.String("action", o.op),
		slog.String("key", o.key),
		slog.Int("status", o.status),
		slog.Duration("duration", time.Since(o.start))}, extra...)...)
}
