package probes

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// logTampered evidences what cordon claims about a changed evidence log,
// and no more. cordon does not re-read the whole log before a run (that is
// `cordon evidence verify`'s job); it checks what it signs and the newest
// signed tree. In the probe's own state directories, as root on the host
// could (around the append-only triggers):
//   - receipt 1's body, under a checkpoint, is changed: verify reports
//     receipt_modified; a later gateway run (which starts: the honest
//     limit) signs a new checkpoint, and verify still reports it;
//   - a receipt appended after the last checkpoint is changed: `cordon
//     evidence checkpoint` refuses to sign, names the leaf, and the newest
//     checkpoint stays the old one; the next gateway run is refused
//     (its receipts could never be signed), nothing crosses;
//   - the stored hash the newest checkpoint's root is computed from is
//     changed: the next gateway run is refused, nothing crosses.
//
// Controls: the intact log verifies and runs; an intact new receipt is
// checkpointed.
func logTampered(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	cfg, err := keyedModelConfig(e, up.URL(), key, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	first, started, err := markedRun(ctx, e, st, "out-first", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	firstSeen := len(up.Seen())
	facts := []record.Fact{{Name: "a gateway run on an intact log", Want: "exit 0, started (marker present), 1 upstream request",
		Got: fmt.Sprintf("exit %d, marker %s, %d upstream requests", first.Code, present(started), firstSeen), OK: first.Code == 0 && started && firstSeen == 1,
		Source: "cordon run's exit status; the host directory bound at /out; the fake model upstream's request count", Control: true}}
	verify := func(name string, want int, control bool) error {
		v, err := e.Cordon(ctx, st, "evidence", "verify")
		if err != nil {
			return err
		}
		modified := strings.Contains(v.Stdout, "receipt_modified")
		w := "exit 1, receipt_modified"
		ok := v.Code == 1 && modified
		if want == 0 {
			w, ok = "exit 0, no problem", v.Code == 0 && !modified
		}
		facts = append(facts, record.Fact{Name: name, Want: w, Got: fmt.Sprintf("exit %d, receipt_modified %s", v.Code, present(modified)),
			OK: ok, Source: "cordon evidence verify on the probe's state directory", Control: control})
		return nil
	}
	if err := verify("cordon evidence verify on the intact log", 0, true); err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := storeExec(ctx, st,
		"DROP TRIGGER receipts_append_only_u",
		// The first model crossing's receipt (each run logs its signed
		// session receipt first, broker evidence).
		"UPDATE receipts SET body = replace(body, 'claude-probe-1', 'claude-probe-2') WHERE id = (SELECT min(id) FROM receipts WHERE broker = 'model')",
		"CREATE TRIGGER receipts_append_only_u BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END",
	); err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := verify("cordon evidence verify after receipt 1's body was changed under a checkpoint", 1, false); err != nil {
		return conformance.Outcome{Err: err}
	}
	// The limit, stated: this run starts (its start reads no receipt
	// body) and signs a checkpoint over the log; the change stays found.
	later, _, err := markedRun(ctx, e, st, "out-later", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	size, err := latestCheckpoint(ctx, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if later.Code != 0 || size < 2 {
		return errf("the later gateway run signed no checkpoint over its receipt: exit %d, newest checkpoint size %d: %s", later.Code, size, firstLineOf(later.Stderr))
	}
	if err := verify(fmt.Sprintf("cordon evidence verify after a later run signed checkpoint %d", size), 1, false); err != nil {
		return conformance.Outcome{Err: err}
	}
	f, err := checkpointOverChangedLeaf(ctx, e, st, size)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	facts = append(facts, f...)
	// The changed receipt no checkpoint covers yet can never be signed
	// over: a gateway run on that log would record crossings that no
	// checkpoint will ever cover. It is refused, nothing crosses.
	before := len(up.Seen())
	r, after, err := markedRun(ctx, e, st, "out-tail-after", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	facts = append(facts,
		refusedFact("the gateway run after a receipt no checkpoint covers yet was changed", r, "store_unavailable"),
		markerFact("the program's start marker after the run on the changed unsigned receipt", after),
		countFact("requests the model upstream received from the run on the changed unsigned receipt", len(up.Seen())-before, 0, false))
	f, err = runOnChangedTree(ctx, e, up, cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: later.Hint(), Facts: append(facts, f...)}
}

// checkpointOverChangedLeaf appends two receipts to st's log through the
// store (as a crossing would, with no checkpoint after them): the first,
// intact, is checkpointed (control); the second's body is changed, and
// `cordon evidence checkpoint` must refuse, name its leaf, and sign
// nothing.
func checkpointOverChangedLeaf(ctx context.Context, e *conformance.Env, st string, size int64) ([]record.Fact, error) {
	rc := crossing.Receipt{Time: time.Now().UTC(), Identity: crossing.Identity{Workload: "conformance", Tenant: "probe", Purpose: "testing"},
		Broker: "model", Action: "anthropic.messages", Target: "claude-probe-1", Decision: crossing.Allow, Reason: "appended by the conformance probe"}
	appendReceipt := func() (int64, error) {
		s, err := store.Open(st, store.DefaultPool)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		return s.RecordReceipt(ctx, rc)
	}
	var facts []record.Fact
	checkpoint := func(name string, wantOK bool, wantSize int64, leaf string, control bool) error {
		r, err := e.Cordon(ctx, st, "evidence", "checkpoint")
		if err != nil {
			return err
		}
		got, err := latestCheckpoint(ctx, st)
		if err != nil {
			return err
		}
		want := fmt.Sprintf("exit 0, newest checkpoint size %d", wantSize)
		ok := r.Code == 0 && got == wantSize
		if !wantOK {
			want = fmt.Sprintf("non-zero exit naming %s, newest checkpoint size %d", leaf, wantSize)
			ok = r.Code != 0 && strings.Contains(r.Stderr, leaf+" ") && got == wantSize
		}
		facts = append(facts, record.Fact{Name: name, Want: want, Got: fmt.Sprintf("exit %d (%s), newest checkpoint size %d", r.Code, firstLineOf(r.Stderr), got),
			OK: ok, Source: "cordon evidence checkpoint's exit status and message; the probe's store (log_checkpoints)", Control: control})
		return nil
	}
	if _, err := appendReceipt(); err != nil {
		return nil, err
	}
	if err := checkpoint("cordon evidence checkpoint over an intact new receipt", true, size+1, "", true); err != nil {
		return nil, err
	}
	id, err := appendReceipt()
	if err != nil {
		return nil, err
	}
	if err := storeExec(ctx, st,
		"DROP TRIGGER receipts_append_only_u",
		fmt.Sprintf("UPDATE receipts SET body = replace(body, 'appended by', 'rewritten by') WHERE id = %d", id),
		"CREATE TRIGGER receipts_append_only_u BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END",
	); err != nil {
		return nil, err
	}
	leaf := fmt.Sprintf("leaf %d", size+1)
	if err := checkpoint("cordon evidence checkpoint over a new receipt changed before any checkpoint covered it", false, size+1, leaf, false); err != nil {
		return nil, err
	}
	return facts, nil
}

// runOnChangedTree: in a fresh state directory a gateway run logs one
// receipt (checkpoint of size 1, whose root is that leaf's stored hash);
// the stored hash is changed; the next gateway run must be refused before
// start, telling the operator to run cordon evidence verify, and nothing
// crosses. Control: the first run.
func runOnChangedTree(ctx context.Context, e *conformance.Env, up *fixture.ModelUpstream, cfg string) ([]record.Fact, error) {
	st := e.StateDir()
	before := len(up.Seen())
	first, started, err := markedRun(ctx, e, st, "out-tree-first", "--config", cfg)
	if err != nil {
		return nil, err
	}
	n := len(up.Seen()) - before
	if err := storeExec(ctx, st,
		"DROP TRIGGER log_hashes_append_only_u",
		// The newest stored hash: the top of the tree's rightmost complete
		// subtree, which the newest checkpoint's root is computed from
		// (a run logs its session receipt and its crossing: no longer a
		// one-leaf tree whose root is hash 0).
		"UPDATE log_hashes SET hash = randomblob(32) WHERE idx = (SELECT max(idx) FROM log_hashes)",
		"CREATE TRIGGER log_hashes_append_only_u BEFORE UPDATE ON log_hashes BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END",
	); err != nil {
		return nil, err
	}
	before = len(up.Seen())
	r, after, err := markedRun(ctx, e, st, "out-tree-after", "--config", cfg)
	if err != nil {
		return nil, err
	}
	told := strings.Contains(r.Stderr+outcomeOf(r).Error, "cordon evidence verify")
	return []record.Fact{
		refusedFact("the gateway run after the stored hash under the newest checkpoint was changed", r, "store_unavailable"),
		{Name: "the refusal names what to run", Want: "mentions cordon evidence verify", Got: firstLineOf(outcomeOf(r).Error), OK: told,
			Source: "cordon run's --json outcome (fd 3) and stderr"},
		markerFact("the program's start marker after the run on the changed tree", after),
		countFact("requests the model upstream received from the run on the changed tree", len(up.Seen())-before, 0, false),
		{Name: "the same gateway run before the stored hash was changed", Want: "exit 0, started (marker present), 1 upstream request",
			Got: fmt.Sprintf("exit %d, marker %s, %d upstream requests", first.Code, present(started), n), OK: first.Code == 0 && started && n == 1,
			Source: "cordon run's exit status; the host directory bound at /out; the fake model upstream's request count", Control: true},
	}, nil
}

// latestCheckpoint is the size of the newest checkpoint in stateDir's
// store, read outside cordon.
func latestCheckpoint(ctx context.Context, stateDir string) (int64, error) {
	db, err := sql.Open("sqlite", storeDB(stateDir))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, "SELECT coalesce(max(size), 0) FROM log_checkpoints").Scan(&n)
	return n, err
}
