package record

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/store"
)

// ErrNoKey: the state dir has no evidence log key to sign a record with.
var ErrNoKey = errors.New("no evidence log key: create one with 'cordon evidence keygen' (or 'cordon evidence checkpoint'); an unsigned record is no record")

// SignAndLog signs r with the state dir's evidence log key, appends it to
// st's evidence log (attest.Append: a digest-only receipt, the envelope
// kept beside it) and returns the record file's bytes (attest.Marshal)
// and the receipt id. It never makes a key: without one it fails with
// ErrNoKey.
func SignAndLog(ctx context.Context, st *store.Store, stateDir string, r *Record) ([]byte, int64, error) {
	k, err := attest.LoadKey(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("sign conformance record: %w", ErrNoKey)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sign conformance record: %w", err)
	}
	env, err := Sign(r, k)
	if err != nil {
		return nil, 0, fmt.Errorf("sign conformance record: %w", err)
	}
	b, err := attest.Marshal(env)
	if err != nil {
		return nil, 0, err
	}
	id, err := attest.Append(ctx, st, env, attest.KindConformance, "", "")
	if err != nil {
		return nil, 0, fmt.Errorf("log conformance record: %w", err)
	}
	return b, id, nil
}
