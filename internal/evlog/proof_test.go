package evlog

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

func TestProveEveryReceipt(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx := context.Background()
	record(t, st, 0, 37)
	checkpoint(t, l)
	for idx := int64(0); idx < 37; idx++ {
		id := receiptAt(t, st, idx)
		p, err := Prove(ctx, st, id)
		if err != nil {
			t.Fatalf("Prove(%d) = %v", id, err)
		}
		if p.Leaf != idx || p.TreeSize != 37 || p.ReceiptID != id {
			t.Errorf("Prove(%d) = leaf %d of %d, want leaf %d of 37", id, p.Leaf, p.TreeSize, idx)
		}
		if err := p.Check(l.Verifier()); err != nil {
			t.Errorf("Prove(%d).Check = %v", id, err)
		}
		rc, err := ParseReceipt([]byte(p.Receipt))
		if err != nil || rc.RequestDigest != receipt(int(idx)).RequestDigest {
			t.Errorf("ParseReceipt(proof of %d) = %+v, %v", id, rc, err)
		}
	}
}

func TestProofTampered(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx := context.Background()
	record(t, st, 0, 20)
	checkpoint(t, l)
	good, err := Prove(ctx, st, receiptAt(t, st, 9))
	if err != nil {
		t.Fatal(err)
	}
	// The proof survives JSON, as the CLI prints it.
	b, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	var back Proof
	if err := json.Unmarshal(b, &back); err != nil || back.Check(l.Verifier()) != nil {
		t.Fatalf("proof after a JSON round trip: %v / %v", err, back.Check(l.Verifier()))
	}
	other, otherV := testKey(t, "other-log", 9)
	forged, err := signCheckpoint(other, tlog.Tree{N: good.TreeSize, Hash: good.Root}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(p *Proof)
		want   error
	}{
		{"receipt changed", func(p *Proof) { p.Receipt = strings.Replace(p.Receipt, "within budget", "denied", 1) }, ErrProofFailed},
		{"proof hash flipped", func(p *Proof) { p.Hashes[1][0] ^= 1 }, ErrProofFailed},
		{"proof hash dropped", func(p *Proof) { p.Hashes = p.Hashes[1:] }, ErrProofFailed},
		{"other leaf index", func(p *Proof) { p.Leaf = 8 }, ErrProofFailed},
		{"leaf past the tree", func(p *Proof) { p.Leaf = 20 }, ErrProofFailed},
		{"tree size changed", func(p *Proof) { p.TreeSize = 21 }, ErrProofFailed},
		{"checkpoint signed by another key", func(p *Proof) { p.Checkpoint = forged.Note }, ErrBadSignature},
		{"checkpoint text changed", func(p *Proof) { p.Checkpoint = strings.Replace(p.Checkpoint, "\n20\n", "\n21\n", 1) }, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			p.Hashes = append([]tlog.Hash(nil), good.Hashes...)
			tc.change(&p)
			if err := p.Check(l.Verifier()); !errors.Is(err, tc.want) {
				t.Errorf("Check = %v, want %v", err, tc.want)
			}
		})
	}
	// A forged checkpoint verifies with its own key, but the proof only
	// matters with the log's.
	p := good
	p.Checkpoint = forged.Note
	if err := p.Check(otherV); err != nil {
		t.Errorf("Check(forged, its own key) = %v", err)
	}
}

func TestProveErrors(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx := context.Background()
	record(t, st, 0, 5)
	if _, err := Prove(ctx, st, receiptAt(t, st, 0)); !errors.Is(err, ErrNotCheckpointed) {
		t.Errorf("Prove before any checkpoint = %v, want ErrNotCheckpointed", err)
	}
	checkpoint(t, l)
	record(t, st, 5, 1)
	if _, err := Prove(ctx, st, receiptAt(t, st, 5)); !errors.Is(err, ErrNotCheckpointed) {
		t.Errorf("Prove after the checkpoint = %v, want ErrNotCheckpointed", err)
	}
	if _, err := Prove(ctx, st, 424242); !errors.Is(err, store.ErrNotInLog) {
		t.Errorf("Prove(unknown receipt) = %v, want store.ErrNotInLog", err)
	}
}
