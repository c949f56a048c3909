package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/conformance/report"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
	"github.com/cordon-project/cordon/internal/store"
)

// recordSink signs a conformance record with the evidence log's key of
// the state dir and appends it to that log. It is opened before the
// first probe runs, so that a run that cannot sign is refused before it
// spends minutes on probes.
type recordSink struct {
	st  *store.Store
	log *evlog.Log
	key attest.Key
}

// openRecordSink opens the store and the evidence log of the state dir.
// The log's key is made on first use, exactly as `cordon run` makes it
// (evlog.Open: only for a log with no checkpoints); a log whose key is
// gone is refused with what to do.
func (g *globals) openRecordSink() (*recordSink, error) {
	st, err := g.openStore()
	if err != nil {
		return nil, err
	}
	l, err := evlog.Open(st, g.stateDir)
	if err != nil {
		st.Close()
		return nil, failure.Failf(failure.KindEvidence, "conformance --out", "cannot sign the record with the evidence log's key of %s: %v (restore %s, or use another --state-dir; 'cordon evidence keygen' makes a key for a log with no checkpoints)",
			g.stateDir, err, filepath.Join(evlog.KeyDir(g.stateDir), evlog.KeyFile))
	}
	k, err := attest.LoadKey(g.stateDir)
	if err != nil {
		st.Close()
		return nil, failure.Failf(failure.KindEvidence, "conformance --out", "load the evidence log's key: %v", err)
	}
	return &recordSink{st: st, log: l, key: k}, nil
}

func (s *recordSink) Close() {
	if s != nil {
		s.st.Close()
	}
}

// write signs rec, writes the DSSE envelope to path (never through a
// symlink), appends it to the evidence log and signs a checkpoint that
// covers it, so that `cordon conformance verify --log` can prove its
// inclusion. It returns the receipt id.
func (s *recordSink) write(ctx context.Context, rec *record.Record, path string) (int64, error) {
	env, err := record.Sign(rec, s.key)
	if err != nil {
		return 0, failure.Fail(failure.KindEvidence, "sign the conformance record", err)
	}
	// The envelope as written must verify with the key's public half (the
	// log.pub a third party is handed).
	if _, err := attest.Verify(env, s.key.Private.Public().(ed25519.PublicKey)); err != nil {
		return 0, failure.Fail(failure.KindInternal, "the signed conformance record does not verify", err)
	}
	b, err := attest.Marshal(env)
	if err != nil {
		return 0, failure.Fail(failure.KindInternal, "conformance record", err)
	}
	if err := writeFileSafe(path, b); err != nil {
		return 0, err
	}
	id, err := attest.Append(ctx, s.st, env, attest.KindConformance, "", "conformance")
	if err != nil {
		return 0, failure.Fail(failure.KindStore, "log the conformance record", err)
	}
	if _, err := s.log.Checkpoint(ctx); err != nil {
		return id, failure.Fail(failure.KindEvidence, "checkpoint the evidence log", err)
	}
	return id, nil
}

// newRecord starts the record of a run: the binary under test, the
// provider with the capability descriptor it probed, the level and
// profile requested.
func (g *globals) newRecord(ctx context.Context, f conformanceRunFlags) (*record.Record, sandbox.Capability, error) {
	prov, err := g.newProvider(registry.Options{Logger: g.logger()})
	if err != nil {
		return nil, sandbox.Capability{}, err
	}
	c, err := prov.Probe(ctx)
	if err != nil {
		// The provider could not say what it can do: it claims nothing.
		c = sandbox.Capability{Schema: sandbox.CapabilitySchema, Provider: g.provider, Missing: []string{"probe: " + err.Error()}}
	}
	b, err := record.CurrentBuild(Version)
	if err != nil {
		return nil, c, failure.Fail(failure.KindInternal, "conformance record", fmt.Errorf("digest this binary: %w", err))
	}
	rec, err := record.New(record.Inputs{Build: b, Provider: record.Provider{Name: c.Provider, Version: c.Version, Capability: c},
		Level: f.level, Profile: f.profile})
	if err != nil {
		return nil, c, failure.Fail(failure.KindInternal, "conformance record", err)
	}
	return rec, c, nil
}

// finishRecord adds what the run observed: host facts, the results, the
// window's end, and the claim judged from them.
func finishRecord(rec *record.Record, rep *conformance.Report, c sandbox.Capability) {
	rec.Host = conformance.HostFacts(rep, c)
	rec.Window.Started = rep.Started
	rec.Finish(rep.Results, rep.Finished)
}

// writeFileSafe writes b to path (0644), never through a symlink.
func writeFileSafe(path string, b []byte) error {
	abs, err := filepath.Abs(path)
	if err == nil {
		err = safefile.WriteFile(abs, b, 0o644)
	}
	if err != nil {
		return failure.Failf(failure.KindUsage, "conformance", "write %s: %v", path, err)
	}
	return nil
}

// writeReport writes the readable HTML report of rec; v says whether
// the record was signed (and its signature checked) by this run.
func writeReport(path string, rec *record.Record, v report.Verification) error {
	var buf bytes.Buffer
	if err := report.Render(&buf, rec, v); err != nil {
		return failure.Fail(failure.KindInternal, "conformance --html", err)
	}
	return writeFileSafe(path, buf.Bytes())
}
