package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// maxLedgerMessage bounds one ledger message either way.
const maxLedgerMessage = 256 << 10

// maxLedgerInFlight bounds the requests the privileged side serves at once.
const maxLedgerInFlight = 256

// Denial receipts are rate-limited per sandbox (allowed crossings are
// always recorded): an agent hammering a refused route must not fill the
// store. Excess denials are counted and reported in the next one recorded.
const (
	denyReceiptsPerSecond = 50
	denyReceiptsBurst     = 200
)

type ledgerReq struct {
	ID      uint64                `json:"id"`
	Op      string                `json:"op"` // reserve, settle, settle_record, record, tool_*, state_*
	Broker  string                `json:"broker,omitempty"`
	Want    crossing.Amount       `json:"want,omitempty"`
	Streams int64                 `json:"streams,omitempty"`
	Ask     *crossing.Ask         `json:"ask,omitempty"` // reserve: the policy question
	Res     *crossing.Reservation `json:"res,omitempty"`
	Used    crossing.Amount       `json:"used,omitempty"`
	Receipt *crossing.Receipt     `json:"receipt,omitempty"`
	// Tool broker operations (toolledger.go).
	Tools    []tool.Ref    `json:"tools,omitempty"`
	Begin    *tool.Begin   `json:"begin,omitempty"`
	End      *tool.End     `json:"end,omitempty"`
	Approval string        `json:"approval,omitempty"`
	Wait     time.Duration `json:"wait,omitempty"`
	// State broker operations (stateledger.go); the op is "state_" and
	// the request's op.
	State *state.Request `json:"state,omitempty"`
}

type ledgerResp struct {
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

// LedgerServer answers the gateway's ledger requests from the store. The
// identity of every request is the sandbox's, set here: the gateway
// cannot spend or record for another workload.
type LedgerServer struct {
	Store  *store.Store
	ID     crossing.Identity
	Budget store.Budget
	Logger *slog.Logger
	// Policy decides every crossing with the sandbox's identity as the
	// principal; nil means policy.Default().
	Policy *policy.Set
	// Tools is the tool broker's privileged side; nil refuses tool ops.
	Tools *ToolPolicy
	// State bounds the sandbox's managed state; nil refuses state ops.
	State *StatePolicy
	// Ready is closed when the gateway reports it serves its listeners.
	Ready chan struct{}
	// Crossings bound what the sandbox's crossings cost the host
	// (crossbudget.go); the zero value limits nothing.
	Crossings CrossingLimits

	receipts receiptBudget
	// open are the sandbox's open reservations (lost.go).
	open map[int64]openCrossing
	// toolSlots are the tool calls begun that hold a receipt slot.
	toolSlots map[int64]bool

	denials bucket
	// approvals are the approvals used by open crossings (approvals.go).
	approvals grants
	mu        sync.Mutex
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

// Serve answers requests on conn until it closes. Requests are answered
// in batches: whatever arrived while the previous batch was being written
// is handled in one transaction (group commit), each under its own
// savepoint.
func (s *LedgerServer) Serve(conn net.Conn) {
	var wmu sync.Mutex
	reply := func(resp ledgerResp) {
		b, _ := json.Marshal(resp)
		wmu.Lock()
		_, _ = conn.Write(b)
		wmu.Unlock()
	}
	reqs := make(chan ledgerReq, maxLedgerInFlight)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.batches(reqs, reply)
	}()
	defer func() {
		close(reqs)
		<-done
	}()
	tools := semaphore.NewWeighted(maxToolOps)
	states := semaphore.NewWeighted(maxStateOps)
	buf := make([]byte, maxLedgerMessage)
	for {
		n, err := conn.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var req ledgerReq
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			s.Logger.Error("ledger: malformed request from the gateway", "err", err)
			return
		}
		if req.Op == "ready" {
			if s.Ready != nil {
				close(s.Ready)
				s.Ready = nil
			}
			continue
		}
		if strings.HasPrefix(req.Op, "tool_") {
			// Tool operations may wait (for an approval): never in the batch.
			if !tools.TryAcquire(1) {
				reply(ledgerResp{ID: req.ID, Err: "too many tool operations in flight", Kind: "unavailable"})
				continue
			}
			go func() {
				defer tools.Release(1)
				reply(s.handleTool(req))
			}()
			continue
		}
		if s.needsApproval(req) {
			// Using an approval is its own transaction: never in the batch.
			if !tools.TryAcquire(1) {
				reply(ledgerResp{ID: req.ID, Err: "too many operations in flight", Kind: "unavailable"})
				continue
			}
			go func() {
				defer tools.Release(1)
				reply(s.reserveApproved(req))
			}()
			continue
		}
		if strings.HasPrefix(req.Op, "state_") {
			// Each state operation is its own transaction, with its receipt.
			if !states.TryAcquire(1) {
				reply(ledgerResp{ID: req.ID, Err: "too many state operations in flight", Kind: "unavailable"})
				continue
			}
			go func() {
				defer states.Release(1)
				reply(s.handleState(req))
			}()
			continue
		}
		reqs <- req
	}
}

// maxLedgerBatch bounds the requests committed together.
const maxLedgerBatch = 64

func (s *LedgerServer) batches(reqs <-chan ledgerReq, reply func(ledgerResp)) {
	for first := range reqs {
		batch := []ledgerReq{first}
	drain:
		for len(batch) < maxLedgerBatch {
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
		resps := make([]ledgerResp, len(batch))
		err := s.Store.Batch(context.Background(), func(tx *store.Tx) {
			for i, r := range batch {
				resps[i] = s.handle(tx, r)
			}
		})
		for i := range resps {
			if err != nil {
				resps[i] = ledgerResp{ID: batch[i].ID, Err: err.Error(), Kind: "unavailable"}
			}
			reply(resps[i])
		}
	}
}

// ledgerOps are the store operations a request may make; *store.Tx in a
// batch.
type ledgerOps interface {
	BudgetState(workload string, b store.Budget) (crossing.BudgetState, error)
	Reserve(id crossing.Identity, broker string, want crossing.Amount, streams int64, b store.Budget) (crossing.Reservation, crossing.BudgetState, error)
	SettleRecord(r crossing.Reservation, usage crossing.Amount, b store.Budget, rc *crossing.Receipt) (crossing.BudgetState, error)
	Record(rc crossing.Receipt) (int64, error)
}

func (s *LedgerServer) handle(ops ledgerOps, req ledgerReq) ledgerResp {
	resp := ledgerResp{ID: req.ID}
	var err error
	switch req.Op {
	case "reserve":
		if req.Broker != "model" && req.Broker != "egress" {
			err = fmt.Errorf("unknown broker %q", req.Broker)
			break
		}
		// Every reservation takes a receipt slot (crossbudget.go): a
		// crossing writes its receipt when it settles, and any
		// reservation left open by a gateway that dies is receipted as
		// lost — an egress tunnel's byte chunks too, or a compromised
		// gateway could hold (and lose) unbounded many. A crossing that
		// opens (main) also counts against the crossing rate; the byte
		// chunks of an open tunnel do not.
		main := req.Broker == "model" || req.Want.Connections > 0
		if err = s.admitCrossing(main, ops.Record); err != nil {
			break
		}
		var d *crossing.PolicyDecision
		if d, err = s.askPolicyIn(req, ops.BudgetState); err != nil {
			resp.Res.Policy = d
			s.receipts.end(false)
			break
		}
		if d != nil && d.ApprovalRequired && !s.skipApprovals() {
			// Decided differently from needsApproval a moment ago (a
			// policy reading context.budget): never let it through here.
			resp.Res.Policy = d
			err = fmt.Errorf("%w: the crossing needs an approval; retry it", crossing.ErrUnavailable)
			s.receipts.end(false)
			break
		}
		resp.Res, resp.State, err = ops.Reserve(s.ID, req.Broker, req.Want, req.Streams, s.Budget)
		if err == nil {
			resp.Res.Policy = d
			s.remember(resp.Res.ID, d, resp.State)
			s.opened(resp.Res.ID, req.Broker, req.Ask, main)
		} else {
			s.receipts.end(false)
		}
	case "settle":
		if req.Res == nil {
			err = errors.New("settle without a reservation")
			break
		}
		r := *req.Res
		r.Identity = s.ID
		resp.State, err = ops.SettleRecord(r, req.Used, s.Budget, nil)
		if err == nil {
			// Nothing of the reservation stays keyed by its id: the store
			// reuses a settled reservation's id, and a later reservation
			// must not inherit its decision or approval. (An egress
			// connection's record names its approval by id: grants.byID.)
			s.forget(r.ID)
			s.unbindGrant(r.ID)
			switch held, main := s.closed(r.ID); {
			case main:
				s.receipts.settled() // its receipt comes in a record
			case held:
				s.receipts.end(false) // a byte chunk: no receipt
			}
		}
	case "settle_record":
		if req.Res == nil || req.Receipt == nil {
			err = errors.New("settle_record without a reservation and a receipt")
			break
		}
		r := *req.Res
		r.Identity = s.ID
		rc := *req.Receipt
		rc.Identity = s.ID
		rc.Policy = s.forget(r.ID)
		rc.Approval = s.settledGrant(r.ID) // only an approval this side used
		resp.State, err = ops.SettleRecord(r, req.Used, s.Budget, &rc)
		if err == nil {
			if held, _ := s.closed(r.ID); held {
				s.receipts.end(true)
			} else {
				s.receipts.wrote() // a reservation of an earlier gateway
			}
		}
	case "record":
		if req.Receipt == nil {
			err = errors.New("record without a receipt")
			break
		}
		rc := *req.Receipt
		rc.Identity = s.ID
		if rc.Broker == state.Name {
			// The privileged side writes every state receipt itself.
			err = errors.New("record: state receipts come only from state operations")
			break
		}
		if rc.Broker == tool.Name && rc.Decision == crossing.Allow {
			// A tool call is recorded allowed only by tool_end, from the
			// call this side began.
			err = errors.New("record: an allowed tool receipt comes only from tool_end")
			break
		}
		// Fields only this side may set (tool_end, settle_record); an
		// approval only when this side used it for an open crossing.
		if rc.Decision != crossing.Allow || !s.recordedGrant(rc.Approval) {
			rc.Approval = ""
		}
		rc.CallKey, rc.ResultDigest = "", ""
		if rc.Policy != nil {
			rc.Policy.Digest = s.policy().Digest() // what decided is this side's set
		}
		if rc.Decision != crossing.Allow {
			// A refusal's receipt needs a slot of the receipt budget;
			// past the bound it is counted, not written.
			if s.admitCrossing(false, ops.Record) != nil {
				break
			}
			if dropped, ok := s.denials.admit(time.Now()); !ok {
				s.receipts.end(false)
				break
			} else if dropped > 0 {
				rc.Reason += fmt.Sprintf(" (and %d more denials not recorded: rate limit)", dropped)
			}
			_, err = ops.Record(rc)
			s.receipts.end(err == nil)
			break
		}
		// An allowed crossing's receipt is always written: it takes the
		// slot its crossing held until it settled. One no crossing
		// settled (only a compromised gateway sends it, or a settle that
		// failed) needs a slot of its own: past the bound it is refused.
		if !s.receipts.takePending() {
			if err = s.admitCrossing(false, ops.Record); err != nil {
				break
			}
		}
		_, err = ops.Record(rc)
		s.receipts.end(err == nil)
	default:
		err = fmt.Errorf("unknown ledger op %q", req.Op)
	}
	if err != nil {
		resp.Err, resp.Kind = err.Error(), errKind(err)
	}
	return resp
}

// errKind is the wire kind of a refusal; the client maps it back.
func errKind(err error) string {
	switch {
	case errors.Is(err, crossing.ErrBudgetExceeded):
		return "budget"
	case errors.Is(err, crossing.ErrPolicyDenied):
		return "policy"
	case errors.Is(err, tool.ErrKeyReused):
		return kindKeyReused
	case errors.Is(err, tool.ErrInProgress):
		return kindInProgress
	case errors.Is(err, tool.ErrQuarantined):
		return kindQuarantined
	case errors.Is(err, tool.ErrDenied):
		return kindApprovalDenied
	case errors.Is(err, crossing.ErrApprovalPending):
		return kindApprovalPending
	case errors.Is(err, crossing.ErrApprovalDenied):
		return kindCrossingApprovalDenied
	}
	return "unavailable"
}

// ledgerClient is the gateway's side: a crossing.Ledger over the socket.
type ledgerClient struct {
	conn    net.Conn
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan ledgerResp
	closed  bool
}

var _ crossing.Ledger = (*ledgerClient)(nil)

func newLedgerClient(conn net.Conn) *ledgerClient {
	c := &ledgerClient{conn: conn, pending: map[uint64]chan ledgerResp{}}
	go c.read()
	return c
}

func (c *ledgerClient) read() {
	buf := make([]byte, maxLedgerMessage)
	for {
		n, err := c.conn.Read(buf)
		if err != nil || n == 0 {
			break
		}
		var resp ledgerResp
		if json.Unmarshal(buf[:n], &resp) != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	c.mu.Lock()
	c.closed = true
	for id, ch := range c.pending {
		ch <- ledgerResp{ID: id, Err: "ledger connection closed", Kind: "unavailable"}
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

func (c *ledgerClient) call(ctx context.Context, req ledgerReq) (ledgerResp, error) {
	req.ID = c.next.Add(1)
	ch := make(chan ledgerResp, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ledgerResp{}, fmt.Errorf("%w: ledger connection closed", crossing.ErrUnavailable)
	}
	c.pending[req.ID] = ch
	c.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil {
		_, err = c.conn.Write(b)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return ledgerResp{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	select {
	case resp := <-ch:
		switch resp.Kind {
		case "":
			return resp, nil
		case "budget":
			return resp, fmt.Errorf("%w: %s", crossing.ErrBudgetExceeded, resp.Err)
		case "policy":
			return resp, fmt.Errorf("%w: %s", crossing.ErrPolicyDenied, resp.Err)
		default:
			if err := toolError(resp); err != nil {
				return resp, err
			}
			if err := approvalError(resp); err != nil {
				return resp, err
			}
			return resp, fmt.Errorf("%w: %s", crossing.ErrUnavailable, resp.Err)
		}
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return ledgerResp{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, ctx.Err())
	}
}

func (c *ledgerClient) Reserve(ctx context.Context, _ crossing.Identity, broker string, want crossing.Amount, streams int64) (crossing.Reservation, crossing.BudgetState, error) {
	req := ledgerReq{Op: "reserve", Broker: broker, Want: want, Streams: streams}
	if a, ok := crossing.AskFrom(ctx); ok {
		req.Ask = &a
	}
	resp, err := c.call(ctx, req)
	return resp.Res, resp.State, err
}

func (c *ledgerClient) Settle(ctx context.Context, r crossing.Reservation, used crossing.Amount) (crossing.BudgetState, error) {
	resp, err := c.call(ctx, ledgerReq{Op: "settle", Res: &r, Used: used})
	return resp.State, err
}

func (c *ledgerClient) SettleRecord(ctx context.Context, r crossing.Reservation, used crossing.Amount, rc crossing.Receipt) (crossing.BudgetState, error) {
	resp, err := c.call(ctx, ledgerReq{Op: "settle_record", Res: &r, Used: used, Receipt: &rc})
	return resp.State, err
}

var _ crossing.SettleRecorder = (*ledgerClient)(nil)

func (c *ledgerClient) Record(ctx context.Context, rc crossing.Receipt) error {
	_, err := c.call(ctx, ledgerReq{Op: "record", Receipt: &rc})
	return err
}

// ready tells the ledger server the gateway serves its listeners.
func (c *ledgerClient) ready() error {
	b, _ := json.Marshal(ledgerReq{Op: "ready"})
	_, err := c.conn.Write(b)
	return err
}
