package cli

import (
	"context"
	"fmt"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
)

// signReceipt signs the admitted session's evidence record (its
// containment receipt: docs/session-receipts.md) with the evidence log's
// key, appends it to the log and writes it where --receipt says. It runs
// after admission and before the program's first instruction; a receipt
// that cannot be signed or logged refuses the session (never run
// unreceipted).
func (r *aRun) signReceipt(ctx context.Context) error {
	cfgDigest := ""
	if r.plan != nil && r.plan.Config() != nil {
		cfgDigest = r.plan.Config().Digest
	}
	rc, err := sessionreceipt.Sign(ctx, r.st, r.g.stateDir, r.l.Record, binaryDigest(r.g.stateDir), cfgDigest)
	if err != nil {
		return failure.Failf(failure.KindStore, "session receipt", "%v; the program was not started", err)
	}
	r.out.ReceiptID, r.out.ReceiptDigest = rc.ReceiptID, rc.Digest
	r.tr.mark("receipt")
	if r.f.receiptFile == "" {
		return nil
	}
	b, err := attest.Marshal(rc.Envelope)
	if err != nil {
		return failure.Fail(failure.KindInternal, "session receipt", err)
	}
	// The same care as --evidence: never through a symlink (writeRecord).
	if err := safefile.WriteFile(r.f.receiptFile, b, 0o644); err != nil {
		return fmt.Errorf("--receipt: %w", evidencePathError(err))
	}
	return nil
}
