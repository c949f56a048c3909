package model

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// approvalPendingStatus answers a model request that waits for an
// operator's approval: 409 Conflict, which the providers' SDKs retry on
// their own, and the agent's retry of the same request passes once the
// approval is given.
const approvalPendingStatus = http.StatusConflict

// approvalType is the error type of that answer in both providers' shapes.
const approvalType = "approval_pending"

// denyApproval refuses a request policy holds for an approval not given
// yet, with a provider-shaped error body that also names the approval:
//
//	{"type":"error","error":{"type":"approval_pending","message":…,"approval_id":"apr_…","expires":"…"}}
//	{"error":{"message":…,"type":"approval_pending","param":null,"code":"approval_pending","approval_id":"apr_…","expires":"…"}}
//	{"error":{"code":409,"message":…,"status":"ABORTED","reason":"approval_pending","approval_id":"apr_…","expires":"…"}}
func (b *Broker) denyApproval(ctx context.Context, w http.ResponseWriter, x *exchange, a *crossing.ApprovalRef) {
	exp := a.Expires.UTC().Format(time.RFC3339)
	msg := "approval pending: this exact request needs an operator's approval (id " + a.ID + ", expires " + exp +
		"). Nothing was forwarded. Retry the same request once it is approved."
	body := make([]byte, 0, 320)
	switch x.api {
	case apiGemini:
		body = append(body, `{"error":{"code":409,"message":`...)
		body = textsafe.AppendJSONString(body, msg)
		body = append(body, `,"status":"ABORTED","reason":"`+approvalType+`","approval_id":`...)
	case apiOpenAI:
		body = append(body, `{"error":{"message":`...)
		body = textsafe.AppendJSONString(body, msg)
		body = append(body, `,"type":"`+approvalType+`","param":null,"code":"`+approvalType+`","approval_id":`...)
	default:
		body = append(body, `{"type":"error","error":{"type":"`+approvalType+`","message":`...)
		body = textsafe.AppendJSONString(body, msg)
		body = append(body, `,"approval_id":`...)
	}
	body = textsafe.AppendJSONString(body, a.ID)
	body = append(body, `,"expires":`...)
	body = textsafe.AppendJSONString(body, exp)
	body = append(body, "}}"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Cordon-Broker", "model")
	h.Set("X-Cordon-Approval", a.ID)
	w.WriteHeader(approvalPendingStatus)
	w.Write(body)
	x.out += int64(len(body))
	x.status = approvalPendingStatus
	x.rc.Decision, x.rc.Reason = crossing.Deny, "approval pending: "+a.ID+" (expires "+exp+")"
	b.finish(ctx, x)
}
