package tool

import (
	"context"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Operations of the tool broker on the authority channel (its trusted
// half: internal/broker/tool/authority). Refusals' receipts use
// crossing.OpRecord.
const (
	OpFilter = "filter"
	OpBegin  = "begin"
	OpAwait  = "await"
	OpEnd    = "end"
)

// FilterRequest asks which of the tools policy lets the workload call.
type FilterRequest struct {
	Tools []Ref `json:"tools"`
}

// FilterResponse answers FilterRequest, one entry per tool in order.
type FilterResponse struct {
	Allowed []bool `json:"allowed"`
}

// AwaitRequest waits at most Wait for approval Approval to be decided.
type AwaitRequest struct {
	Approval string        `json:"approval"`
	Wait     time.Duration `json:"wait,omitempty"`
}

// AwaitResponse is the approval's state.
type AwaitResponse struct {
	State string `json:"state"`
}

// EndResponse is the id of the durable receipt.
type EndResponse struct {
	Receipt int64 `json:"receipt_id"`
}

// Remote is the Authority the tool broker uses in the gateway process: each
// method is one operation over the authority channel.
type Remote struct{ C crossing.Caller }

var _ Authority = Remote{}

func (r Remote) Filter(ctx context.Context, refs []Ref) ([]bool, error) {
	var out FilterResponse
	err := r.C.Call(ctx, OpFilter, FilterRequest{Tools: refs}, &out)
	return out.Allowed, err
}

func (r Remote) Begin(ctx context.Context, b Begin) (Began, error) {
	var out Began
	err := r.C.Call(ctx, OpBegin, b, &out)
	return out, err
}

func (r Remote) AwaitApproval(ctx context.Context, id string, wait time.Duration) (string, error) {
	var out AwaitResponse
	err := r.C.Call(ctx, OpAwait, AwaitRequest{Approval: id, Wait: wait}, &out)
	return out.State, err
}

func (r Remote) End(ctx context.Context, e End) (int64, error) {
	var out EndResponse
	err := r.C.Call(ctx, OpEnd, e, &out)
	return out.Receipt, err
}

func (r Remote) Record(ctx context.Context, rc crossing.Receipt) error {
	return crossing.Remote{C: r.C}.Record(ctx, rc)
}
