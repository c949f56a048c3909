package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/cordon-project/cordon/internal/broker/state"
	stateauthority "github.com/cordon-project/cordon/internal/broker/state/authority"
	"github.com/cordon-project/cordon/internal/broker/tool"
	toolauthority "github.com/cordon-project/cordon/internal/broker/tool/authority"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// maxAuthorityInFlight bounds the requests the privileged side serves at once.
const maxAuthorityInFlight = 256

// Denial receipts are rate-limited per sandbox (allowed crossings are
// always recorded): an agent hammering a refused route must not fill the
// store. Excess denials are counted and reported in the next one recorded.
const (
	denyReceiptsPerSecond = 50
	denyReceiptsBurst     = 200
)

// call is one request of an authority channel as the handlers take it,
// decoded from its envelope by decodeCall (the broker is the channel's,
// the op the internal one: tool_*, state_*). The JSON tags serve the
// fuzzers, which decode arbitrary bytes into it.
type call struct {
	ID      uint64                `json:"id"`
	Op      string                `json:"op"` // reserve, settle, settle_record, record, tool_*, state_*
	Broker  string                `json:"broker,omitempty"`
	Want    crossing.Amount       `json:"want,omitempty"`
	Streams int64                 `json:"streams,omitempty"`
	Ask     *crossing.Ask         `json:"ask,omitempty"` // reserve: the policy question
	Res     *crossing.Reservation `json:"res,omitempty"`
	Used    crossing.Amount       `json:"used,omitempty"`
	Receipt *crossing.Receipt     `json:"receipt,omitempty"`
	// Tool broker operations (tool.go).
	Tools    []tool.Ref    `json:"tools,omitempty"`
	Begin    *tool.Begin   `json:"begin,omitempty"`
	End      *tool.End     `json:"end,omitempty"`
	Approval string        `json:"approval,omitempty"`
	Wait     time.Duration `json:"wait,omitempty"`
	// State broker operations (state.go); the op is "state_" and
	// the request's op.
	State *state.Request `json:"state,omitempty"`
}

// reply is a handler's answer to a call; encodeReply puts it in the
// envelope, its body the one the call's op answers with.
type reply struct {
	ID    uint64               `json:"id"`
	Res   crossing.Reservation `json:"res"`
	State crossing.BudgetState `json:"state"`
	Err   string               `json:"err,omitempty"`
	Kind  string               `json:"kind,omitempty"` // "budget", "policy", "unavailable", tool kinds
	// Tool broker answers.
	Allowed       []bool      `json:"allowed,omitempty"`
	Began         *tool.Began `json:"began,omitempty"`
	ReceiptID     int64       `json:"receipt_id,omitempty"`
	ApprovalState string      `json:"approval_state,omitempty"`
	// State broker answer.
	StateResp *state.Response `json:"state_resp,omitempty"`
}

// Authority answers the gateway's authority requests from the store. The
// identity of every request is the sandbox's, set here: the gateway
// cannot spend or record for another workload.
type Authority struct {
	Store  *store.Store
	ID     crossing.Identity
	Budget store.Budget
	Logger *slog.Logger
	// Policy decides every crossing with the sandbox's identity as the
	// principal; nil means policy.Default().
	Policy *policy.Set
	// ConfigDigest is the digest of the sandbox's configuration, stamped
	// on the receipts this side records for the brokers.
	ConfigDigest string
	// Tools is the tool broker's privileged side; nil refuses tool ops.
	Tools *ToolPolicy
	// State bounds the sandbox's managed state; nil refuses state ops.
	State *StatePolicy
	// Ready is closed when the gateway reports it serves its listeners:
	// when ReadyWant channels (at least one) have each reported ready.
	Ready     chan struct{}
	ReadyWant int
	readyFrom map[string]bool
	// Crossings bound what the sandbox's crossings cost the host
	// (crossbudget.go); the zero value limits nothing.
	Crossings CrossingLimits
	// Trace is the sandbox session's trace (internal/telemetry): a span
	// per crossing, its ids in every receipt; nil makes none and clears
	// whatever ids a broker's receipt carried.
	Trace *telemetry.Session

	receipts receiptBudget
	// ingress grants the ingress broker's dials, one per admitted
	// connection (ingress_gate.go); nil: no route is declared and every
	// ingress.connect is refused.
	ingress *ingressGate
	// open are the sandbox's open reservations (lost.go); maxOpen bounds
	// them (0: maxOpenReservations).
	open    map[int64]openCrossing
	maxOpen int
	// toolSlots are the tool calls begun that hold a receipt slot.
	toolSlots map[int64]bool
	// owed counts, per broker, the allowed crossings settled whose
	// receipt the gateway still owes in a record (crossbudget.go).
	owed map[string]int64

	denials bucket
	// served is when this side began serving (initLimits): no receipt
	// it writes for a broker is of a crossing older than that.
	served time.Time
	// approvals are the approvals used by open crossings (approvals.go).
	approvals grants
	mu        sync.Mutex
	// toolOps and stateOps bound the operations served outside the
	// batch, over every channel of the sandbox.
	limitsOnce        sync.Once
	toolOps, stateOps *semaphore.Weighted
	// The brokers' trusted halves (halves.go).
	halvesOnce sync.Once
	stateAuth  *stateauthority.Authority
	toolAuth   *toolauthority.Authority
	// decided keeps the policy decision of each open reservation, so the
	// receipt carries what this side decided, not what the gateway says.
	decided map[int64]*crossing.PolicyDecision
}

// bucket is a token bucket for denial receipts.
type bucket struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
}

// admit takes a token; when none is left it counts a drop. It returns how
// many were dropped since the last admitted one.
func (b *bucket) admit(now time.Time) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens, b.last = denyReceiptsBurst, now
	}
	b.tokens = min(denyReceiptsBurst, b.tokens+now.Sub(b.last).Seconds()*denyReceiptsPerSecond)
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		return 0, false
	}
	b.tokens--
	d := b.dropped
	b.dropped = 0
	return d, true
}

// Serve answers the requests of one authority channel, bound to broker,
// until conn closes. One Authority serves every channel of its sandbox
// at once (one per broker; the budgets, receipt bounds and approvals are
// the sandbox's, shared); each message must name the channel's broker
// and one of its operations, or it is refused. Metered requests are
// answered in batches: whatever arrived while the previous batch was
// being written is handled in one transaction (group commit), each under
// its own savepoint.
func (s *Authority) Serve(conn net.Conn, broker string) {
	ch, ok := registry[broker]
	if !ok {
		s.log().Error("authority: no such broker; the channel is closed", "broker", broker)
		conn.Close()
		return
	}
	s.initLimits()
	var wmu sync.Mutex
	send := func(req call, resp reply) {
		b := wire.AppendResponse(nil, encodeReply(ch, req, resp))
		wmu.Lock()
		_, _ = conn.Write(b)
		wmu.Unlock()
	}
	reqs := make(chan call, maxAuthorityInFlight)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.batches(reqs, send)
	}()
	defer func() {
		close(reqs)
		<-done
	}()
	buf := make([]byte, wire.MaxMessage)
	for {
		n, err := conn.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var env wire.Request
		if err := json.Unmarshal(buf[:n], &env); err != nil {
			s.log().Error("authority: malformed request from the gateway", "broker", broker, "err", err)
			return
		}
		if env.Op == wire.OpReady {
			s.ready(broker)
			continue
		}
		req, err := decodeCall(env, broker, ch)
		if err != nil {
			send(req, reply{ID: env.ID, Err: err.Error(), Kind: wire.Kind(err)})
			continue
		}
		s.dispatch(ch, req, reqs, send)
	}
}

// ready records that the channel of broker reports its process serves,
// and closes Ready once ReadyWant channels have.
func (s *Authority) ready(broker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readyFrom == nil {
		s.readyFrom = map[string]bool{}
	}
	s.readyFrom[broker] = true
	if len(s.readyFrom) < max(s.ReadyWant, 1) {
		return
	}
	if s.Ready != nil {
		close(s.Ready)
		s.Ready = nil
	}
}

// initLimits makes the bounds of operations in flight, shared by every
// channel of the sandbox.
func (s *Authority) initLimits() {
	s.limitsOnce.Do(func() {
		s.served = time.Now()
		s.toolOps = semaphore.NewWeighted(maxToolOps)
		s.stateOps = semaphore.NewWeighted(maxStateOps)
	})
}

// dispatch serves req: on its own (bounded) when its broker's entry
// says so — tool operations, approvals and state operations — else in
// the batch.
func (s *Authority) dispatch(ch channel, req call, batch chan<- call, send func(call, reply)) {
	serve, sem, what := ch.alone(s, req)
	if serve == nil {
		batch <- req
		return
	}
	if !sem.TryAcquire(1) {
		send(req, reply{ID: req.ID, Err: "too many " + what + " in flight", Kind: wire.KindUnavailable})
		return
	}
	go func() {
		defer sem.Release(1)
		send(req, serve(req))
	}()
}

// decodeCall checks env against the channel's broker and decodes its
// body with the broker's entry. The broker is the channel's, never the
// message's.
func decodeCall(env wire.Request, broker string, ch channel) (call, error) {
	req := call{ID: env.ID, Broker: broker}
	if env.Broker != broker {
		return req, fmt.Errorf("%w: this channel serves the %s broker, not %q", crossing.ErrPolicyDenied, broker, clipID(env.Broker))
	}
	op, ok := ch.op(env.Op)
	if !ok {
		return req, fmt.Errorf("unknown %s operation %q", broker, clipID(env.Op))
	}
	req.Op = op
	body := env.Body
	if len(body) == 0 {
		body = []byte("{}")
	}
	if err := ch.decode(&req, body); err != nil {
		return req, fmt.Errorf("%w: malformed %s %s request: %v", crossing.ErrPolicyDenied, broker, env.Op, err)
	}
	return req, nil
}

// encodeReply is resp in the envelope, its body the one the broker's
// entry answers req's op with.
func encodeReply(ch channel, req call, resp reply) wire.Response {
	out := wire.Response{ID: resp.ID}
	if resp.Err != "" {
		kind := resp.Kind
		if kind == "" {
			kind = wire.KindUnavailable
		}
		out.Error = &wire.Error{Kind: kind, Message: resp.Err}
	}
	if ch.encode == nil {
		return out
	}
	if body := ch.encode(req, resp); body != nil {
		out.Body, _ = json.Marshal(body)
	}
	return out
}

// maxAuthorityBatch bounds the requests committed together.
const maxAuthorityBatch = 64

func (s *Authority) batches(reqs <-chan call, send func(call, reply)) {
	for first := range reqs {
		batch := []call{first}
	drain:
		for len(batch) < maxAuthorityBatch {
			select {
			case r, ok := <-reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		resps := make([]reply, len(batch))
		err := s.Store.Batch(context.Background(), func(tx *store.Tx) {
			for i, r := range batch {
				resps[i] = s.handle(tx, r)
			}
		})
		for i := range resps {
			if err != nil {
				resps[i] = reply{ID: batch[i].ID, Err: err.Error(), Kind: wire.KindUnavailable}
			}
			send(batch[i], resps[i])
		}
	}
}

// authorityOps are the store operations a request may make; *store.Tx in a
// batch.
type authorityOps interface {
	BudgetState(workload string, b store.Budget) (crossing.BudgetState, error)
	Reserve(id crossing.Identity, broker string, want crossing.Amount, streams int64, b store.Budget) (crossing.Reservation, crossing.BudgetState, error)
	SettleRecord(r crossing.Reservation, usage crossing.Amount, b store.Budget, rc *crossing.Receipt) (crossing.BudgetState, error)
	Record(rc crossing.Receipt) (int64, error)
}

func (s *Authority) handle(ops authorityOps, req call) reply {
	resp := reply{ID: req.ID}
	var err error
	switch req.Op {
	case "reserve":
		err = s.reserve(ops, req, &resp)
	case "settle":
		resp.State, err = s.settle(ops, req)
	case "settle_record":
		resp.State, err = s.settleRecord(ops, req)
	case "record":
		err = s.record(ops, req)
	default:
		err = fmt.Errorf("unknown authority op %q", req.Op)
	}
	if err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
	}
	return resp
}
