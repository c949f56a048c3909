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
		Title:  "with the evidence log refusing appends, the upstream's answer never reaches the program and the run says it was withheld",
		Run:    gatewayProbe(logAppendRefused),
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.evidence-log.tampered",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable Evidence denies the affected crossing (a log that no longer verifies is not available evidence); §5: the Agent cannot rewrite authoritative Evidence",
		Title:  "a receipt changed under a checkpoint is reported by cordon evidence verify, and still after later runs; no checkpoint signs a changed new receipt; a changed signed tree refuses the next gateway run, nothing crosses",
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
	cfg, err := keyedModelConfig(e, up.URL(), key, "")
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

// logAppendRefused: after a gateway run made the evidence log, the probe
// makes its own store refuse every new leaf (a trigger aborting inserts
// into log_leaves: the log is there but cannot record, as on a full or
// failing disk). The store learns that only when the receipt is appended,
// after the upstream answered, so the call does reach the upstream (a
// control: the crossing was attempted); what the claim needs is that the
// answer never reaches the program (the model broker withholds it until
// its receipt commits, docs/evidence-log.md), that no receipt appears,
// and that the trusted side's run log says the answer was withheld.
// Control: the first run, on the working log, got the answer.
func logAppendRefused(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	cfg, err := keyedModelConfig(e, up.URL(), key, "")
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
	// Every append but the session's own signed receipt (refusing that
	// refuses the session before its program starts: no crossing to judge).
	if err := storeExec(ctx, st, "CREATE TRIGGER probe_refuse_leaf BEFORE INSERT ON log_leaves WHEN (SELECT broker FROM receipts WHERE id = NEW.receipt_id) IS NOT 'evidence' BEGIN SELECT RAISE(ABORT, 'conformance probe: the evidence log refuses appends'); END"); err != nil {
		return conformance.Outcome{Err: err}
	}
	logs := runLogs(st)
	r, _, err := markedRun(ctx, e, st, "out-after", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := len(up.Seen()) - firstSeen
	after, err := receipts(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	answered := func(name string) bool {
		b, _ := readSandboxFile(filepath.Join(e.Dir, name, "started.response"))
		return strings.Contains(b, "probe-answer")
	}
	withheld := strings.Contains(runLog(st, logs), "answer_withheld=true")
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		{Name: "the upstream's answer in what reached the program while the log refused appends", Want: "absent", Got: present(answered("out-after")), OK: !answered("out-after"),
			Source: "the response the program received, written beside its marker in the host directory bound at /out"},
		{Name: "receipts recorded while the log refused appends", Want: "0", Got: fmt.Sprint(len(after) - len(rcs)), OK: len(after) == len(rcs),
			Source: "the store, via cordon receipts --json"},
		{Name: "the trusted side's log of the crossing", Want: "answer_withheld=true", Got: present(withheld), OK: withheld,
			Source: "cordon run's log on the host (<state-dir>/logs/run-*.log)"},
		{Name: "the call was made: requests the model upstream received while the log refused appends", Want: "1", Got: fmt.Sprint(n), OK: n == 1,
			Source: "the fake model upstream on the host, request count", Control: true},
		{Name: "the same gateway run on the working log", Want: "exit 0, 1 upstream request, 1 receipt, the answer received",
			Got:    fmt.Sprintf("exit %d, %d upstream requests, %d receipts, answer %s", first.Code, firstSeen, len(rcs), present(answered("out-first"))),
			OK:     first.Code == 0 && firstSeen == 1 && len(rcs) == 1 && answered("out-first"),
			Source: "cordon run's exit status; the fake model upstream's request count; the store; the host directory bound at /out", Control: true},
	}}
}
