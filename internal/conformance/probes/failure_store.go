package probes

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"

	_ "modernc.org/sqlite" // the store's own driver (pure Go): the probe opens its own state dir's store
)

// Failure probes of the trusted side's records: the store and the
// evidence log. Each damages only the state directory it made.
func init() {
	conformance.Register(conformance.Probe{
		ID:     "failure.store",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable state or Evidence denies the affected crossing",
		Title:  "a store that is a directory, not a database, or locked refuses the run before the program starts",
		Run:    storeUnavailable,
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.evidence-log.key",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable Evidence denies the affected crossing",
		Title:  "an evidence-log key that is unsafe, malformed or gone refuses a gateway run before the program starts; nothing crosses",
		Run:    gatewayProbe(logKeyUnavailable),
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.evidence-log.append",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable Evidence denies the affected crossing (a crossing the log cannot record does not happen)",
		Title:  "with the evidence log refusing appends, a model crossing never reaches the upstream",
		Run:    gatewayProbe(logAppendRefused),
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.evidence-log.tampered",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable Evidence denies the affected crossing (a log that no longer verifies is not available evidence); §5: the Agent cannot rewrite authoritative Evidence",
		Title:  "after a logged receipt is changed in the store, a gateway run is refused and nothing crosses",
		Run:    gatewayProbe(logTampered),
	})
}

// storeDB is the store's database file in a state directory.
func storeDB(stateDir string) string { return filepath.Join(stateDir, "cordon.db") }

// storeUnavailable: three state directories whose store cannot serve,
// each made by the probe: the database path is a directory; it holds
// bytes that are not a database; a database another process holds
// locked (BEGIN EXCLUSIVE) for the whole run. Each run must be refused
// before start (no marker on the host). Control: a fresh state directory
// runs the same program.
func storeUnavailable(ctx context.Context, e *conformance.Env) conformance.Outcome {
	var facts []record.Fact
	check := func(what, st string) error {
		d, token, out, err := outDir(e, "out-"+strconv.Itoa(len(facts)))
		if err != nil {
			return err
		}
		r, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: out, Op: []string{"mark-owned", token, "/out/started"}})
		if err != nil {
			return err
		}
		_, serr := os.Lstat(filepath.Join(d, "started"))
		facts = append(facts, refusedFact("the run with "+what, r, "store_unavailable"),
			markerFact("the program's start marker after the run with "+what, serr == nil))
		return nil
	}
	dirDB := e.StateDir()
	if err := os.Mkdir(storeDB(dirDB), 0o700); err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := check("a store path that is a directory", dirDB); err != nil {
		return conformance.Outcome{Err: err}
	}
	junk := e.StateDir()
	if err := os.WriteFile(storeDB(junk), []byte(strings.Repeat("not a database\n", 512)), 0o600); err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := check("a store file that is not a database", junk); err != nil {
		return conformance.Outcome{Err: err}
	}
	locked := e.StateDir()
	if r, err := e.Run(ctx, conformance.RunOpts{StateDir: locked, Op: []string{"ids"}}); err != nil || r.Code != 0 {
		return errf("the run that makes the store to lock: exit %d, %v: %s", r.Code, err, r.Stderr)
	}
	unlock, err := lockStore(ctx, locked)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	err = check("a store another process holds locked", locked)
	unlock()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	d, token, out, err := outDir(e, "out-control")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	r, err := e.Run(ctx, conformance.RunOpts{Flags: out, Op: []string{"mark-owned", token, "/out/started"}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	_, serr := os.Lstat(filepath.Join(d, "started"))
	facts = append(facts, record.Fact{Name: "the same run with a fresh state directory", Want: "exit 0, marker present",
		Got: fmt.Sprintf("exit %d, marker %s", r.Code, present(serr == nil)), OK: r.Code == 0 && serr == nil,
		Source: "cordon run's exit status; the host directory bound at /out", Control: true})
	return conformance.Outcome{Hint: r.Hint(), Facts: facts}
}

// lockStore holds an exclusive lock on stateDir's store until unlock.
func lockStore(ctx context.Context, stateDir string) (unlock func(), err error) {
	db, err := sql.Open("sqlite", storeDB(stateDir))
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("lock the store: %w", err)
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}, nil
}

// storeExec runs statements on stateDir's store outside cordon: the
// damage a failure probe does to its own state directory.
func storeExec(ctx context.Context, stateDir string, stmts ...string) error {
	db, err := sql.Open("sqlite", storeDB(stateDir))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// logKeyUnavailable: after a gateway run made the state directory's
// evidence log (key, receipt, checkpoint), the key is made unsafe (mode
// 0644), malformed, then removed; each time a gateway run must be refused
// before start with the store unavailable, no marker, no upstream
// request. Control: the first run, and the same run once the key is
// restored, start and cross.
func logKeyUnavailable(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfg, err := modelConfig(e, "c.yaml", up.URL(), keyFile, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	if r, started, err := markedRun(ctx, e, st, "out-first", "--config", cfg); err != nil || !started || len(up.Seen()) != 1 {
		return errf("the gateway run that makes the evidence log: exit %d, started %v, %d upstream requests, %v: %s", r.Code, started, len(up.Seen()), err, r.Stderr)
	}
	logKey := filepath.Join(st, "evidence", "log.key")
	saved, err := os.ReadFile(logKey)
	if err != nil {
		return errf("the first gateway run left no evidence-log key: %v", err)
	}
	var facts []record.Fact
	for i, c := range []struct {
		what   string
		damage func() error
	}{
		{"an evidence-log key readable by others (mode 0644)", func() error { return os.Chmod(logKey, 0o644) }},
		{"a malformed evidence-log key", func() error { return os.WriteFile(logKey, []byte("PRIVATE+KEY+garbage\n"), 0o600) }},
		{"the evidence-log key gone (the log has checkpoints it signed)", func() error { return os.Remove(logKey) }},
	} {
		if err := c.damage(); err != nil {
			return conformance.Outcome{Err: err}
		}
		before := len(up.Seen())
		r, started, err := markedRun(ctx, e, st, "out-"+strconv.Itoa(i), "--config", cfg)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts = append(facts, refusedFact("the gateway run with "+c.what, r, "store_unavailable"),
			markerFact("the program's start marker after the run with "+c.what, started),
			countFact("requests the model upstream received from the run with "+c.what, len(up.Seen())-before, 0, false))
		_ = os.Remove(logKey)
		if err := os.WriteFile(logKey, saved, 0o600); err != nil {
			return conformance.Outcome{Err: err}
		}
	}
	before := len(up.Seen())
	r, started, err := markedRun(ctx, e, st, "out-restored", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := len(up.Seen()) - before
	facts = append(facts, record.Fact{Name: "the same gateway run with the key restored", Want: "started (marker present), 1 upstream request",
		Got: "marker " + present(started) + ", " + strconv.Itoa(n) + " upstream requests", OK: started && n == 1,
		Source: "the host directory bound at /out; the fake model upstream's request count", Control: true})
	return conformance.Outcome{Hint: r.Hint(), Facts: facts}
}

// logTampered: after a gateway run logged a receipt, the probe changes
// that receipt's body in its own store (around the append-only trigger,
// as root on the host could). `cordon evidence verify` must see it (the
// tamper is real), and the next gateway run must be refused: no marker,
// no upstream request. Control: the first run, on the intact log,
// started and crossed.
func logTampered(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfg, err := modelConfig(e, "c.yaml", up.URL(), keyFile, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	first, started, err := markedRun(ctx, e, st, "out-first", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	firstSeen := len(up.Seen())
	if err := storeExec(ctx, st,
		"DROP TRIGGER receipts_append_only_u",
		"UPDATE receipts SET body = replace(body, 'claude-probe-1', 'claude-probe-2')",
		"CREATE TRIGGER receipts_append_only_u BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END",
	); err != nil {
		return conformance.Outcome{Err: err}
	}
	v, err := e.Cordon(ctx, st, "evidence", "verify")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	detected := v.Code == 1 && strings.Contains(v.Stdout, "receipt_modified")
	r, after, err := markedRun(ctx, e, st, "out-after", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := len(up.Seen()) - firstSeen
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		{Name: "cordon evidence verify after receipt 1's body was changed", Want: "exit 1, receipt_modified", Got: fmt.Sprintf("exit %d, receipt_modified %s", v.Code, present(detected)),
			OK: detected, Source: "cordon evidence verify on the probe's state directory"},
		refusedFact("the gateway run on the changed log", r, "store_unavailable", "evidence_insufficient"),
		markerFact("the program's start marker after the run on the changed log", after),
		countFact("requests the model upstream received from the run on the changed log", n, 0, false),
		{Name: "the same gateway run on the intact log", Want: "exit 0, started (marker present), 1 upstream request",
			Got: fmt.Sprintf("exit %d, marker %s, %d upstream requests", first.Code, present(started), firstSeen), OK: first.Code == 0 && started && firstSeen == 1,
			Source: "cordon run's exit status; the host directory bound at /out; the fake model upstream's request count", Control: true},
	}}
}

// logAppendRefused: after a gateway run made the evidence log, the probe
// makes its own store refuse every new leaf (a trigger aborting inserts
// into log_leaves: the log is there but cannot record, as on a full or
// failing disk). The next gateway run's model crossing must never reach
// the upstream. Control: the first run, on the working log, reached it.
func logAppendRefused(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfg, err := modelConfig(e, "c.yaml", up.URL(), keyFile, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	first, _, err := markedRun(ctx, e, st, "out-first", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	firstSeen := len(up.Seen())
	rcs, err := receipts(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if err := storeExec(ctx, st, "CREATE TRIGGER probe_refuse_leaf BEFORE INSERT ON log_leaves BEGIN SELECT RAISE(ABORT, 'conformance probe: the evidence log refuses appends'); END"); err != nil {
		return conformance.Outcome{Err: err}
	}
	r, _, err := markedRun(ctx, e, st, "out-after", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := len(up.Seen()) - firstSeen
	after, err := receipts(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		countFact("requests the model upstream received while the log refused appends", n, 0, false),
		{Name: "receipts recorded while the log refused appends", Want: "0", Got: fmt.Sprint(len(after) - len(rcs)), OK: len(after) == len(rcs),
			Source: "the store, via cordon receipts --json"},
		{Name: "the same gateway run on the working log", Want: "exit 0, 1 upstream request, 1 receipt",
			Got: fmt.Sprintf("exit %d, %d upstream requests, %d receipts", first.Code, firstSeen, len(rcs)), OK: first.Code == 0 && firstSeen == 1 && len(rcs) == 1,
			Source: "cordon run's exit status; the fake model upstream's request count; the store", Control: true},
	}}
}
