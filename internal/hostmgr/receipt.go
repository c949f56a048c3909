package hostmgr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
	"github.com/cordon-project/cordon/internal/store"
)

// ReceiptInfo is a daemon sandbox's signed containment receipt, as status
// shows it: the envelope as logged, its evidence-log receipt and digest.
type ReceiptInfo struct {
	ReceiptID int64           `json:"receipt_id"`
	Digest    string          `json:"digest"`
	Envelope  json.RawMessage `json:"envelope"`
}

// signReceipt signs and logs b's containment receipt (rec, as admitted)
// before its program starts; a receipt that cannot be signed or logged
// refuses the sandbox (docs/session-receipts.md).
func (d *Daemon) signReceipt(ctx context.Context, b *box, rec *evidence.Record) error {
	cfg := ""
	if b.spec.Gateway != nil {
		sum := sha256.Sum256(b.spec.Gateway.Config)
		cfg = "sha256:" + hex.EncodeToString(sum[:])
	}
	if _, err := sessionreceipt.Sign(ctx, d.o.Store, d.o.StateDir, rec, d.runtimeDigest(), cfg); err != nil {
		return failure.Failf(failure.KindStore, "session receipt", "%v; the program was not started", err)
	}
	return nil
}

// receipt is b's newest logged containment receipt, nil if it has none
// (a sandbox created before receipts existed).
func (d *Daemon) receipt(ctx context.Context, b *box) (*ReceiptInfo, error) {
	a, err := d.o.Store.SessionAttestation(ctx, attest.KindSession, b.rec.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &ReceiptInfo{ReceiptID: a.ReceiptID, Digest: a.Digest, Envelope: json.RawMessage(a.Envelope)}, nil
}

// runtimeDigest is the running binary's digest: the daemon's own
// (Options.RuntimeDigest), or, when it was given none (tests), read once
// from /proc/self/exe.
func (d *Daemon) runtimeDigest() string {
	if d.o.RuntimeDigest != "" {
		return d.o.RuntimeDigest
	}
	selfDigestOnce.Do(func() { selfDigest, _ = fileDigest("/proc/self/exe") })
	return selfDigest
}

var (
	selfDigestOnce sync.Once
	selfDigest     string
)
