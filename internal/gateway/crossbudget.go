package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// Every crossing costs the host work outside the sandbox's limits: the
// privileged side evaluates policy and writes its receipt (and the
// evidence log's leaf) to the store, in SQLite, in a process no cgroup of
// the sandbox bounds. CrossingLimits bound that per sandbox, for every
// crossing kind alike (model, egress, tool, state, and refusals that are
// receipted):
//
//   - Rate: crossings opened per second (a token bucket of Burst). Past
//     it a crossing is refused before any policy or store work, with
//     crossing.ErrBudgetExceeded; the refusal's receipt is rate-limited
//     like every denial.
//   - MaxReceipts: the receipts the sandbox may add to the store. A
//     crossing is admitted only while its receipt fits (receipts written
//   - crossings open + settled crossings whose receipt is still to
//     come < MaxReceipts), so an allowed crossing is never left
//     unrecorded. The first refusal past it writes one marker receipt
//     (reason receipt_budget_exhausted); after it crossings are refused
//     with crossing.ErrBudgetExceeded and counted in memory, not
//     receipted, and the count is recorded in one receipt when the
//     gateway stops (reason receipt_budget_refusals). Every open
//     reservation (an egress tunnel's byte chunks too) holds a slot, so
//     the gateway_lost receipts of what a dying gateway left open fit;
//     an allowed receipt no settled crossing stands for takes a slot of
//     its own. A sandbox's receipts are therefore at most MaxReceipts +
//     2, plus the gateway_lost receipts of reservations an earlier
//     gateway of the sandbox left.
type CrossingLimits struct {
	MaxReceipts int64
	Rate        float64
	Burst       int64
}

// Defaults of CrossingLimits; config.Crossings carries the same.
const (
	DefaultMaxReceipts  = 100000
	DefaultCrossingRate = 50
	DefaultBurst        = 500
)

// Reasons of the receipt budget's two receipts, and of the receipt of
// allowed crossings whose own receipt never came.
const (
	ReasonReceiptBudgetExhausted = "receipt_budget_exhausted"
	ReasonReceiptBudgetRefusals  = "receipt_budget_refusals"
	ReasonReceiptMissing         = "receipt_missing"
)

// receiptBudget is a sandbox's CrossingLimits in force. The zero value
// limits nothing.
type receiptBudget struct {
	mu      sync.Mutex
	lim     CrossingLimits
	written int64 // receipts of the sandbox in the store (counted at start)
	open    int64 // admitted crossings that may still write one receipt
	pending int64 // settled crossings whose receipt comes in a separate record
	// exhausted: the marker is written (or the bound was already reached
	// when the gateway started); refused counts what was refused since.
	exhausted bool
	refused   int64
	tokens    float64
	last      time.Time
}

// admit opens a crossing that will write at most one receipt. rate: it
// also counts against the crossing rate (not for a refusal's receipt:
// denials have their own bucket). marker is set when this call is the
// first refusal past the bound: the caller records the marker.
func (b *receiptBudget) admit(now time.Time, rate bool) (marker *crossing.Receipt, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rate {
		if err := b.take(now); err != nil {
			return nil, err
		}
	}
	if m := b.lim.MaxReceipts; m > 0 && b.written+b.open+b.pending >= m {
		if rate {
			b.refused++ // a refusal's own receipt is not a second crossing
		}
		if !b.exhausted {
			b.exhausted = true
			marker = &crossing.Receipt{
				Time: now.UTC(), Broker: "gateway", Action: "receipt_budget", Decision: crossing.Deny,
				Reason: fmt.Sprintf("%s: this sandbox has %d receipts, the bound is %d; further crossings are refused and counted, not receipted",
					ReasonReceiptBudgetExhausted, b.written, m),
			}
			b.written++
		}
		return marker, fmt.Errorf("%w: receipts: this sandbox reached its bound of %d receipts", crossing.ErrBudgetExceeded, m)
	}
	b.open++
	return nil, nil
}

// rated takes n tokens of the crossing rate for work that writes no
// receipt (a tools/list's policy decisions); none when fewer are left.
func (b *receiptBudget) rated(now time.Time, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeN(now, max(n, 1))
}

// take takes a token of the crossing rate; b.mu is held.
func (b *receiptBudget) take(now time.Time) error { return b.takeN(now, 1) }

// takeN takes n tokens of the crossing rate, or none; b.mu is held.
func (b *receiptBudget) takeN(now time.Time, n int) error {
	if b.lim.Rate <= 0 {
		return nil
	}
	burst := float64(max(b.lim.Burst, 1))
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*b.lim.Rate)
	b.last = now
	need := min(float64(n), burst) // a burst below n still lets it through, at the burst's cost
	if b.tokens < need {
		return fmt.Errorf("%w: crossing rate: more than %g per second (burst %d) from this sandbox", crossing.ErrBudgetExceeded, b.lim.Rate, b.lim.Burst)
	}
	b.tokens -= need
	return nil
}

// end closes an admitted crossing; wrote: it wrote its receipt.
func (b *receiptBudget) end(wrote bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open--
	if wrote {
		b.written++
	}
}

// settled closes an admitted crossing whose receipt comes later in its
// own record (egress settles, then records).
func (b *receiptBudget) settled() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open--
	b.pending++
}

// takePending turns the pending receipt of a settled crossing back into
// an open slot for its record; false when no crossing is pending.
func (b *receiptBudget) takePending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == 0 {
		return false
	}
	b.pending--
	b.open++
	return true
}

// wrote counts a receipt written outside admit: a lost crossing's (never
// refused: it records budget that was charged), or the receipt of a
// crossing an earlier gateway of the sandbox opened.
func (b *receiptBudget) wrote() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written++
}

// takeRefused returns and clears the count of unreceipted refusals.
func (b *receiptBudget) takeRefused() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.refused
	b.refused = 0
	return n
}

// initReceipts sets the limits and counts what the sandbox already has in
// the store (a daemon sandbox whose gateway was restarted keeps its
// count).
func (s *Authority) initReceipts(ctx context.Context) error {
	lim := s.Crossings
	n := int64(0)
	if lim.MaxReceipts > 0 {
		var err error
		if n, err = s.Store.CountReceipts(ctx, s.ID.Workload, s.ID.SandboxID); err != nil {
			return err
		}
	}
	b := &s.receipts
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lim, b.written = lim, n
	b.exhausted = lim.MaxReceipts > 0 && n >= lim.MaxReceipts
	return nil
}

// admitCrossing admits a crossing, or refuses it; rec records the marker
// when this is the first refusal past the bound.
func (s *Authority) admitCrossing(rate bool, rec func(crossing.Receipt) (int64, error)) error {
	marker, err := s.receipts.admit(time.Now(), rate)
	if marker != nil {
		marker.Identity = s.ID
		sp := s.Trace.Start("gateway")
		sp.Stamp(marker)
		id, rerr := rec(*marker)
		sp.End(marker, id, rerr)
		if rerr != nil {
			s.log().Error("record the receipt budget's marker", "err", rerr)
		}
	}
	return err
}

// finishReceipts records how many crossings were refused past the bound
// without a receipt of their own, and how many allowed ones never got
// the receipt the gateway owed: once, when the gateway stops.
func (s *Authority) finishReceipts(ctx context.Context) {
	s.finishOwed(ctx)
	n := s.receipts.takeRefused()
	if n == 0 {
		return
	}
	rc := crossing.Receipt{Time: time.Now().UTC(), Identity: s.ID, Broker: "gateway", Action: "receipt_budget", Decision: crossing.Deny,
		Reason: fmt.Sprintf("%s: %d crossings were refused past the bound of %d receipts", ReasonReceiptBudgetRefusals, n, s.receipts.lim.MaxReceipts)}
	sp := s.Trace.Start("gateway")
	sp.Stamp(&rc)
	id, err := s.Store.RecordReceipt(ctx, rc)
	sp.End(&rc, id, err)
	if err != nil {
		s.log().Error("record the receipt budget's refusals", "err", err, "refused", n)
	}
}

// owe notes an allowed crossing of broker settled without its receipt,
// which the gateway owes in a record.
func (s *Authority) owe(broker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owed == nil {
		s.owed = map[string]int64{}
	}
	s.owed[broker]++
}

// paid notes the record of a crossing of broker that settled without it;
// false when none is owed.
func (s *Authority) paid(broker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owed[broker] == 0 {
		return false
	}
	s.owed[broker]--
	return true
}

// finishOwed records, per broker, how many allowed crossings settled
// without the receipt the gateway owed in a record (only a compromised
// gateway, or one that died between the two, leaves one): no allowed
// crossing goes unreceipted. Each takes the slot its crossing held.
func (s *Authority) finishOwed(ctx context.Context) {
	s.mu.Lock()
	owed := s.owed
	s.owed = nil
	s.mu.Unlock()
	for _, broker := range Brokers {
		n := owed[broker]
		if n == 0 {
			continue
		}
		rc := crossing.Receipt{Time: time.Now().UTC(), Identity: s.ID, Broker: broker, Action: ReasonReceiptMissing, Decision: crossing.Allow,
			Reason: fmt.Sprintf("%s: %d allowed crossings settled without the receipt the gateway owed", ReasonReceiptMissing, n)}
		sp := s.Trace.Start("gateway")
		sp.Stamp(&rc)
		id, err := s.Store.RecordReceipt(ctx, rc)
		sp.End(&rc, id, err)
		if err != nil {
			s.log().Error("record the missing receipts", "err", err, "broker", broker, "missing", n)
		}
		for range n {
			if s.receipts.takePending() {
				s.receipts.end(err == nil)
			}
		}
	}
}

// recordNow records one receipt in its own transaction (outside a batch).
func (s *Authority) recordNow(rc crossing.Receipt) (int64, error) {
	return s.Store.RecordReceipt(context.Background(), rc)
}

// toolBegun keeps the slot of a call that goes ahead until its tool_end;
// any other answer (approval pending, a replay, a refusal) gives it back.
func (s *Authority) toolBegun(b tool.Began, err error) {
	if err != nil || b.Status != tool.StatusGo {
		s.receipts.end(false)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.toolSlots == nil {
		s.toolSlots = map[int64]bool{}
	}
	s.toolSlots[b.Call] = true
}

// toolEnded closes a call's slot; a call begun by an earlier gateway of
// the sandbox had none, and its receipt is counted all the same.
func (s *Authority) toolEnded(call int64, wrote bool) {
	s.mu.Lock()
	slot := s.toolSlots[call]
	delete(s.toolSlots, call)
	s.mu.Unlock()
	switch {
	case slot:
		s.receipts.end(wrote)
	case wrote:
		s.receipts.wrote()
	}
}
