package gateway

import (
	"context"
	"log/slog"
	"time"

	stateauthority "github.com/cordon-project/cordon/internal/broker/state/authority"
	toolauthority "github.com/cordon-project/cordon/internal/broker/tool/authority"
	"github.com/cordon-project/cordon/internal/crossing"
)

// The brokers' trusted halves live in their folders
// (internal/broker/<name>/authority); the sandbox's Authority gives them
// what is the sandbox's: its identity, policy with it as the principal,
// approvals and the bound on denial receipts (root). What is the
// gateway's — the receipt budget, the crossing rate, the channel — stays
// here, around each call to a half.

// root is the sandbox's Authority as the brokers' trusted halves see it.
type root struct{ s *Authority }

var (
	_ stateauthority.Root = root{}
	_ toolauthority.Root  = root{}
)

func (r root) Identity() crossing.Identity { return r.s.ID }

func (r root) Decide(ask crossing.Ask) (*crossing.PolicyDecision, error) { return r.s.decide(ask) }

func (r root) DecideEach() func(crossing.Ask) (*crossing.PolicyDecision, error) {
	read := r.s.budgetOnce()
	return func(ask crossing.Ask) (*crossing.PolicyDecision, error) { return r.s.decideIn(ask, read) }
}

func (r root) SkipApprovals() bool { return r.s.skipApprovals() }

func (r root) UseApproval(ctx context.Context, d *crossing.PolicyDecision, action, target, digest string, shown any) (*crossing.ApprovalRef, error) {
	return r.s.useApproval(ctx, d, action, target, digest, shown)
}

func (r root) AdmitDenial(now time.Time) (int64, bool) { return r.s.denials.admit(now) }

func (r root) Logger() *slog.Logger { return r.s.log() }

// initHalves makes the brokers' trusted halves of this sandbox, once.
func (s *Authority) initHalves() {
	s.stateAuth = &stateauthority.Authority{Root: root{s}, Store: s.Store, Policy: s.State, ConfigDigest: s.ConfigDigest}
	s.toolAuth = &toolauthority.Authority{Root: root{s}, Store: s.Store, Policy: s.Tools}
}

// log is the Authority's logger (discarding when none is set).
func (s *Authority) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}
