package record

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/store"
)

// TestSignAndLog: without a key, no record (and no receipt); with one,
// the bytes returned are the envelope the store keeps under the receipt.
func TestSignAndLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(dir, store.Pool{Base: 1 << 30, Size: 65536, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := SignAndLog(ctx, st, dir, Sample()); !errors.Is(err, ErrNoKey) {
		t.Fatalf("without a key: err = %v, want ErrNoKey", err)
	}
	if n, err := st.Attestations(ctx, "", 10); err != nil || len(n) != 0 {
		t.Fatalf("attestations after a refusal: %d, %v", len(n), err)
	}
	if _, err := evlog.GenerateKey(evlog.KeyDir(dir), "k"); err != nil {
		t.Fatal(err)
	}
	b, id, err := SignAndLog(ctx, st, dir, Sample())
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.AttestationByDigest(ctx, attest.Digest(b))
	if err != nil || a.ReceiptID != id || string(a.Envelope) != string(b) {
		t.Fatalf("stored = %+v, %v", a, err)
	}
}
