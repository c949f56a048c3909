package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
	"golang.org/x/mod/sumdb/note"
)

// Exit statuses of conformance verify.
const (
	exitNotVerified = 1
	exitVerifyUsage = 2
)

// verifyFlagsC are conformance verify's flags.
type verifyFlagsC struct {
	key, binary, config, policy, rootfs string
	log, asJSON                         bool
	// st, when set, is the store --log reads (tests); else the state dir's.
	st *store.Store
}

// verifyProblem is one reason a record is not verified: the check, where
// (envelope field, JSON path, binding) and what differs.
type verifyProblem struct {
	Check  string `json:"check"` // envelope, signature, statement, binding, log
	Where  string `json:"where"`
	Detail string `json:"detail"`
	Logged string `json:"logged,omitempty"` // the logged copy's value, or the digest the record binds
	Given  string `json:"given,omitempty"`  // the given record's value, or the file's digest
}

// verifyReport is conformance verify's result (--json prints it).
type verifyReport struct {
	OK        bool            `json:"ok"`
	Record    string          `json:"record"`
	KeyID     string          `json:"key_id,omitempty"`
	RunID     string          `json:"run_id,omitempty"`
	Claim     string          `json:"claim,omitempty"`
	Maturity  string          `json:"maturity,omitempty"`
	Checked   []string        `json:"checked"`
	Problems  []verifyProblem `json:"problems"`
	ReceiptID int64           `json:"receipt_id,omitempty"`
}

func (r *verifyReport) fail(check, where, detail string) {
	r.Problems = append(r.Problems, verifyProblem{Check: check, Where: where, Detail: detail})
}

func conformanceVerifyCmd(g *globals) *cobra.Command {
	var f verifyFlagsC
	cmd := &cobra.Command{
		Use:   "verify RECORD",
		Short: "Verify a signed conformance record: signature, bindings, evidence log",
		Long: `Verify a conformance record (the DSSE envelope 'cordon conformance run --out'
writes) with only the public key, and optionally against the artifacts it
binds and this host's evidence log:

  - the envelope's signature, with --key (a log.pub: 'cordon evidence
    pubkey' prints it) or <state-dir>/evidence/log.pub;
  - the in-toto statement's shape, and that its subjects are exactly the
    record's binary and bindings;
  - --binary/--config/--policy/--rootfs: each file's digest equals the
    one the record binds (a policy directory's *.cedar set; a rootfs tree);
  - --log: the record was appended to the evidence log (an inclusion proof
    against a signed checkpoint) and is byte-identical to the logged copy.

Each problem names what changed: the envelope field, the JSON path of the
statement that differs from the logged copy, or the binding that does not
match. Exit status: 0 verified, 1 not verified (the problems are listed),
2 usage.

Examples:
  cordon conformance verify record.json --key log.pub
  cordon conformance verify record.json --key log.pub --binary /usr/bin/cordon --config cordon.toml
  sudo cordon conformance verify record.json --log`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				fmt.Fprintln(cmd.ErrOrStderr(), "cordon: usage: cordon conformance verify RECORD [--key FILE] [--log] [--binary FILE] [--config FILE] [--policy DIR] [--rootfs DIR] [--json]")
				return &exitError{code: exitVerifyUsage}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := g.conformanceVerify(cmd.Context(), args[0], f)
			return printConformanceVerify(g.stdout, rep, f.asJSON)
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprintf(c.ErrOrStderr(), "cordon: usage: %s\n", textsafe.Line(err.Error()))
		return &exitError{code: exitVerifyUsage}
	})
	fl := cmd.Flags()
	fl.StringVar(&f.key, "key", "", "public key file (log.pub; default <state-dir>/evidence/log.pub)")
	fl.BoolVar(&f.log, "log", false, "also check the record is in this host's evidence log and equal to the logged copy")
	fl.StringVar(&f.binary, "binary", "", "check the record binds this cordon binary")
	fl.StringVar(&f.config, "config", "", "check the record binds this configuration file")
	fl.StringVar(&f.policy, "policy", "", "check the record binds this policy set (a directory of *.cedar, or one file)")
	fl.StringVar(&f.rootfs, "rootfs", "", "check the record binds this rootfs directory tree")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as one JSON object")
	return cmd
}

// conformanceVerify runs every check it can and collects the problems.
func (g *globals) conformanceVerify(ctx context.Context, path string, f verifyFlagsC) *verifyReport {
	rep := &verifyReport{Record: path, Checked: []string{}, Problems: []verifyProblem{}}
	b, err := safefile.ReadBounded(path, attest.MaxEnvelope, true)
	if err != nil {
		rep.fail("envelope", "file", err.Error())
		return rep
	}
	g.verifyRecord(ctx, rep, b, f)
	return rep
}

// verifyRecord checks the bytes of a record file.
func (g *globals) verifyRecord(ctx context.Context, rep *verifyReport, b []byte, f verifyFlagsC) {
	var rec *record.Record
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		rep.failErr("envelope", err)
	} else {
		checkCanonical(rep, env, b)
		rec = g.verifySignature(rep, env, f.key)
	}
	if rec != nil {
		rep.RunID, rep.Claim, rep.Maturity = rec.RunID, rec.Claim.Admitted, rec.Maturity.Is
		verifyBindings(rep, rec, f)
	}
	if f.log {
		g.verifyInLog(ctx, rep, b, f)
	}
	rep.OK = len(rep.Problems) == 0
}

// checkCanonical reports a file that is not byte for byte the envelope as
// cordon writes it (compact JSON, one newline): the signature covers the
// payload, not the bytes around it, so a change there is named here.
func checkCanonical(rep *verifyReport, env attest.Envelope, b []byte) {
	c, err := attest.Marshal(env)
	if err != nil || string(c) == string(b) {
		return
	}
	i := 0
	for i < len(c) && i < len(b) && c[i] == b[i] {
		i++
	}
	rep.fail("envelope", fmt.Sprintf("%s @byte %d", record.PathAt(c, i, "$"), i),
		"the file is not the envelope as cordon writes it (compact JSON and one newline): changed outside the signed payload")
}

func (r *verifyReport) failErr(check string, err error) {
	var fe *attest.FieldError
	if errors.As(err, &fe) {
		r.fail(check, fe.Field, fe.Problem)
		return
	}
	r.fail(check, "", err.Error())
}

// loadPub reads a vkey file (default the state dir's log.pub).
func (g *globals) loadPub(path string) (ed25519.PublicKey, string, note.Verifier, error) {
	if path == "" {
		path = filepath.Join(evlog.KeyDir(g.stateDir), evlog.PubFile)
	}
	b, err := safefile.ReadBounded(path, 4096, true)
	if err != nil {
		return nil, "", nil, fmt.Errorf("public key: %w", err)
	}
	pub, name, err := evlog.PublicKeyFromVkey(string(b))
	if err != nil {
		return nil, "", nil, fmt.Errorf("public key %s: %w", path, err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, "", nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return pub, evlog.KeyID(name, pub), v, nil
}

// verifySignature checks the signature and the statement; the record, or
// nil with the problem reported.
func (g *globals) verifySignature(rep *verifyReport, env attest.Envelope, keyPath string) *record.Record {
	pub, id, _, err := g.loadPub(keyPath)
	if err != nil {
		rep.fail("signature", "key", err.Error())
		return nil
	}
	rep.KeyID = id
	st, err := attest.VerifyKeyID(env, pub, id)
	if err != nil {
		check := "signature"
		if !errors.Is(err, attest.ErrSignature) {
			check = "envelope"
		}
		rep.failErr(check, err)
		return nil
	}
	rep.Checked = append(rep.Checked, "signature ("+id+")")
	rec, err := record.FromStatement(st)
	if err != nil {
		rep.failErr("statement", err)
		return nil
	}
	rep.Checked = append(rep.Checked, "statement")
	return rec
}

// verifyBindings compares each file given with the record's binding.
func verifyBindings(rep *verifyReport, rec *record.Record, f verifyFlagsC) {
	check := func(name, flagPath, bound string, digest func(string) (string, error)) {
		if flagPath == "" {
			return
		}
		got, err := digest(flagPath)
		switch {
		case err != nil:
			rep.fail("binding", name, fmt.Sprintf("cannot digest %s: %v", flagPath, err))
		case bound == record.None:
			rep.Problems = append(rep.Problems, verifyProblem{Check: "binding", Where: name, Detail: "the record binds no " + name, Logged: bound, Given: got})
		case got != bound:
			rep.Problems = append(rep.Problems, verifyProblem{Check: "binding", Where: name, Detail: fmt.Sprintf("%s does not match the record", flagPath), Logged: bound, Given: got})
		default:
			rep.Checked = append(rep.Checked, "binding "+name)
		}
	}
	check("binary", f.binary, "sha256:"+rec.Cordon.BinarySHA256, record.FileDigest)
	check("config", f.config, rec.Bindings.Config, record.FileDigest)
	check("policy", f.policy, rec.Bindings.PolicySet, record.PolicyDigest)
	check("rootfs", f.rootfs, rec.Bindings.Rootfs, record.RootfsDigest)
}

// maxLogged bounds how many logged records a changed record is compared with.
const maxLogged = 1000

// verifyInLog finds the record in the store's attestations, proves the
// receipt that logs it against the latest signed checkpoint, and, when
// the given record is not byte-identical to a logged one, diffs it with
// the closest logged copy.
func (g *globals) verifyInLog(ctx context.Context, rep *verifyReport, given []byte, f verifyFlagsC) {
	_, _, v, err := g.loadPub(f.key)
	if err != nil {
		rep.fail("log", "key", err.Error())
		return
	}
	st := f.st
	if st == nil {
		if st, err = g.openStore(); err != nil {
			rep.fail("log", "store", err.Error())
			return
		}
		defer st.Close()
	}
	a, err := st.AttestationByDigest(ctx, attest.Digest(given))
	if errors.Is(err, store.ErrNotFound) {
		logged, lerr := st.Attestations(ctx, attest.KindConformance, maxLogged)
		if lerr != nil || len(logged) == 0 {
			rep.fail("log", "record", "no logged record has this digest, and the log holds no conformance record to compare it with")
			return
		}
		a = closest(logged, given)
		rep.fail("log", fmt.Sprintf("receipt %d", a.ReceiptID), "the record differs from the copy logged by this receipt (the closest logged record)")
		if attest.Digest(a.Envelope) != a.Digest {
			rep.fail("log", fmt.Sprintf("receipt %d", a.ReceiptID), "the store's copy does not match the digest logged: the differences below are unreliable")
		}
		for _, c := range record.DiffEnvelopes(a.Envelope, given) {
			rep.Problems = append(rep.Problems, verifyProblem{Check: "log", Where: c.Path, Detail: "differs from the logged copy", Logged: c.Logged, Given: c.Given})
		}
		return
	}
	if err != nil {
		rep.fail("log", "store", err.Error())
		return
	}
	rep.ReceiptID = a.ReceiptID
	proveLogged(ctx, rep, st, v, a)
}

// proveLogged checks the inclusion proof of the receipt that logs a, and
// that the receipt names a's digest.
func proveLogged(ctx context.Context, rep *verifyReport, st *store.Store, v note.Verifier, a store.Attestation) {
	p, err := evlog.Prove(ctx, st, a.ReceiptID)
	if err != nil {
		rep.fail("log", fmt.Sprintf("receipt %d", a.ReceiptID), fmt.Sprintf("no inclusion proof: %v (a checkpoint covers it after 'cordon evidence checkpoint')", err))
		return
	}
	if err := p.Check(v); err != nil {
		rep.fail("log", fmt.Sprintf("receipt %d", a.ReceiptID), err.Error())
		return
	}
	var rc crossing.Receipt
	if err := json.Unmarshal([]byte(p.Receipt), &rc); err != nil || rc.Broker != attest.Broker || rc.RequestDigest != a.Digest {
		rep.fail("log", fmt.Sprintf("receipt %d", a.ReceiptID), "the logged receipt does not name this record's digest")
		return
	}
	rep.Checked = append(rep.Checked, fmt.Sprintf("log (receipt %d, leaf %d of a signed tree of %d)", a.ReceiptID, p.Leaf, p.TreeSize))
}

// closest is the logged envelope sharing the longest prefix plus suffix
// with given: a changed record's own logged copy.
func closest(logged []store.Attestation, given []byte) store.Attestation {
	best, score := logged[0], -1
	for _, a := range logged {
		e := a.Envelope
		p := 0
		for p < len(e) && p < len(given) && e[p] == given[p] {
			p++
		}
		s := 0
		for s < len(e)-p && s < len(given)-p && e[len(e)-1-s] == given[len(given)-1-s] {
			s++
		}
		if p+s > score {
			best, score = a, p+s
		}
	}
	return best
}

// printConformanceVerify prints the report; not verified is exit status 1.
func printConformanceVerify(w io.Writer, rep *verifyReport, asJSON bool) error {
	if asJSON {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintf(w, "verified: %s (run %s, claim %s, maturity %s)\n", textsafe.Line(rep.Record), textsafe.Line(rep.RunID), textsafe.Line(rep.Claim), textsafe.Line(rep.Maturity))
		for _, c := range rep.Checked {
			fmt.Fprintf(w, "  ok  %s\n", textsafe.Line(c))
		}
	} else {
		fmt.Fprintf(w, "NOT VERIFIED: %s\n", textsafe.Line(rep.Record))
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "  %s: %s: %s", p.Check, textsafe.Line(p.Where), textsafe.Line(p.Detail))
			switch {
			case p.Logged == "" && p.Given == "":
			case p.Check == "binding":
				fmt.Fprintf(w, " (record binds %s, file is %s)", textsafe.Line(p.Logged), textsafe.Line(p.Given))
			default:
				fmt.Fprintf(w, " (logged %s, given %s)", textsafe.Line(p.Logged), textsafe.Line(p.Given))
			}
			fmt.Fprintln(w)
		}
	}
	if !rep.OK {
		return &exitError{code: exitNotVerified}
	}
	return nil
}
