package crossing

import "context"

// Caller sends one operation of a broker to the root side over the
// authority channel and decodes its answer into out (also when the answer
// is a refusal, returned as its typed error). The channel is bound to one
// broker: the root side stamps it, never the message.
type Caller interface {
	Call(ctx context.Context, op string, in, out any) error
}

// Operations of a metered crossing (model, egress; record also for the
// tool broker's refusals) on the authority channel.
const (
	OpReserve      = "reserve"
	OpSettle       = "settle"
	OpSettleRecord = "settle_record"
	OpRecord       = "record"
)

// ReserveRequest asks to hold budget for one crossing; Ask is the policy
// question of a crossing that opens.
type ReserveRequest struct {
	Want    Amount `json:"want,omitempty"`
	Streams int64  `json:"streams,omitempty"`
	Ask     *Ask   `json:"ask,omitempty"`
}

// ReserveResponse is the reservation (its Policy also when refused) and
// the budget after it.
type ReserveResponse struct {
	Res   Reservation `json:"res"`
	State BudgetState `json:"state"`
}

// SettleRequest settles a reservation with what was used, and with
// settle_record records the crossing's receipt in the same commit.
type SettleRequest struct {
	Res     Reservation `json:"res"`
	Used    Amount      `json:"used,omitempty"`
	Receipt *Receipt    `json:"receipt,omitempty"`
}

// SettleResponse is the budget after a settlement.
type SettleResponse struct {
	State BudgetState `json:"state"`
}

// RecordRequest records one receipt.
type RecordRequest struct {
	Receipt Receipt `json:"receipt"`
}

// Remote is the Authority a broker in the gateway process uses: each
// method is one operation over the channel.
type Remote struct{ C Caller }

var (
	_ Authority      = Remote{}
	_ SettleRecorder = Remote{}
)

// Reserve sends the policy question bound to ctx (WithAsk) with the
// reservation; the identity and the broker are the channel's.
func (r Remote) Reserve(ctx context.Context, _ Identity, _ string, want Amount, streams int64) (Reservation, BudgetState, error) {
	req := ReserveRequest{Want: want, Streams: streams}
	if a, ok := AskFrom(ctx); ok {
		req.Ask = &a
	}
	var out ReserveResponse
	err := r.C.Call(ctx, OpReserve, req, &out)
	return out.Res, out.State, err
}

func (r Remote) Settle(ctx context.Context, res Reservation, used Amount) (BudgetState, error) {
	var out SettleResponse
	err := r.C.Call(ctx, OpSettle, SettleRequest{Res: res, Used: used}, &out)
	return out.State, err
}

func (r Remote) SettleRecord(ctx context.Context, res Reservation, used Amount, rc Receipt) (BudgetState, error) {
	var out SettleResponse
	err := r.C.Call(ctx, OpSettleRecord, SettleRequest{Res: res, Used: used, Receipt: &rc}, &out)
	return out.State, err
}

func (r Remote) Record(ctx context.Context, rc Receipt) error {
	return r.C.Call(ctx, OpRecord, RecordRequest{Receipt: rc}, nil)
}
