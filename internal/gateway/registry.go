package gateway

import (
	"encoding/json"

	"golang.org/x/sync/semaphore"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// channel is one broker's entry in the registry: how the Authority
// serves that broker's channel. The envelope, the error table and the
// binding of a channel to its broker are the Authority's, the same for
// every broker; what differs is here.
type channel struct {
	// op is the internal operation an envelope op is served as; false
	// refuses it (unknown operation).
	op func(op string) (string, bool)
	// decode fills req from the body of req.Op.
	decode func(req *call, body []byte) error
	// encode is the body that answers req with resp; nil sends none.
	encode func(req call, resp reply) any
	// alone returns how to serve req outside the batch — the handler,
	// the bound of such operations in flight and their name — or a nil
	// handler to serve it in the batch (one store transaction per batch).
	alone func(s *Authority, req call) (serve func(call) reply, sem *semaphore.Weighted, what string)
}

// registry is every broker the Authority serves a channel for. Adding a
// broker adds its entry here and to Brokers (docs/adding-a-broker.md).
var registry = map[string]channel{
	model.Name:  metered,
	egress.Name: metered,
	tool.Name:   toolChannel,
	state.Name:  stateChannel,
	// ingress: metered like egress (a connection, its bytes), its process
	// started only when the configuration declares routes.
	ingress.Name: metered,
}

// Brokers are the brokers an Authority serves channels for, in the order
// the gateway process gets their channels.
var Brokers = []string{model.Name, egress.Name, tool.Name, state.Name, ingress.Name}

// metered is the channel of a metered broker (model, egress): reserve,
// settle and record its crossings against the workload's budgets.
var metered = channel{
	op: func(op string) (string, bool) {
		switch op {
		case crossing.OpReserve, crossing.OpSettle, crossing.OpSettleRecord, crossing.OpRecord:
			return op, true
		}
		return "", false
	},
	decode: decodeMetered,
	encode: func(req call, resp reply) any {
		switch req.Op {
		case crossing.OpReserve:
			return crossing.ReserveResponse{Res: resp.Res, State: resp.State}
		case crossing.OpSettle, crossing.OpSettleRecord:
			return crossing.SettleResponse{State: resp.State}
		}
		return nil
	},
	alone: func(s *Authority, req call) (func(call) reply, *semaphore.Weighted, string) {
		if s.needsApproval(req) {
			// Using an approval is its own transaction: never in the batch.
			return s.reserveApproved, s.toolOps, "operations"
		}
		return nil, nil, ""
	},
}

// decodeMetered decodes the body of a metered operation.
func decodeMetered(req *call, body []byte) error {
	switch req.Op {
	case crossing.OpReserve:
		var b crossing.ReserveRequest
		err := json.Unmarshal(body, &b)
		req.Want, req.Streams, req.Ask = b.Want, b.Streams, b.Ask
		return err
	case crossing.OpSettle, crossing.OpSettleRecord:
		var b struct {
			Res     *crossing.Reservation `json:"res"`
			Used    crossing.Amount       `json:"used"`
			Receipt *crossing.Receipt     `json:"receipt"`
		}
		err := json.Unmarshal(body, &b)
		req.Res, req.Used, req.Receipt = b.Res, b.Used, b.Receipt
		return err
	default: // record
		var b struct {
			Receipt *crossing.Receipt `json:"receipt"`
		}
		err := json.Unmarshal(body, &b)
		req.Receipt = b.Receipt
		return err
	}
}
