package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// receiptVerifyOutput is verify-receipt's result (--json prints it).
type receiptVerifyOutput struct {
	OK        bool              `json:"ok"`
	SandboxID string            `json:"sandbox_id,omitempty"`
	Level     string            `json:"level_admitted,omitempty"`
	Mode      string            `json:"enforcement_mode,omitempty"`
	InSitu    string            `json:"in_situ,omitempty"`
	Subjects  map[string]string `json:"subjects,omitempty"`
	ReceiptID int64             `json:"receipt_id,omitempty"`
	Problems  []string          `json:"problems"`
}

func evidenceVerifyReceiptCmd(g *globals) *cobra.Command {
	var pubkey, binary, config string
	var asJSON, withLog bool
	cmd := &cobra.Command{
		Use:   "verify-receipt FILE",
		Short: "Verify a session's signed containment receipt with only the log's public key",
		Long: `Verify a session receipt ('cordon run --receipt FILE', or the "receipt"
envelope of 'cordon sandbox status --json'): a DSSE envelope over an in-toto
statement (predicateType https://cordon.dev/session-receipt/v1) whose
predicate is the session's evidence record, with its in-situ checks.

It checks the signature with --key (a log.pub; default
<state-dir>/evidence/log.pub), that the statement is a session receipt,
that every in-situ check and every boundary the admitted level needs was
OK, and with --binary/--config that the file's digest is the subject's.
With --log (root, on the host that ran the session) it also proves that
the receipt is in the evidence log under a signed checkpoint. Exit 1 when
any check fails. See docs/session-receipts.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := g.verifyReceipt(cmd.Context(), args[0], pubkey, binary, config, withLog)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(g.stdout, out); err != nil {
					return err
				}
			} else {
				printReceiptVerify(g.stdout, out)
			}
			if !out.OK {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pubkey, "key", "", "public key file (log.pub; default <state-dir>/evidence/log.pub), as for 'cordon conformance verify'")
	// --pubkey, as 'cordon evidence verify' spells it, says the same.
	fl.StringVar(&pubkey, "pubkey", "", "the same as --key")
	_ = fl.MarkHidden("pubkey")
	fl.StringVar(&binary, "binary", "", "check that this cordon binary is the one the receipt names")
	fl.StringVar(&config, "config", "", "check that this configuration file is the one the receipt names")
	fl.BoolVar(&withLog, "log", false, "also prove the receipt is in this host's evidence log (root)")
	fl.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	return cmd
}

func (g *globals) verifyReceipt(ctx context.Context, file, pubkey, binary, config string, withLog bool) (receiptVerifyOutput, error) {
	out := receiptVerifyOutput{Problems: []string{}}
	usage := func(err error) (receiptVerifyOutput, error) {
		return out, failure.Fail(failure.KindUsage, "evidence verify-receipt", err)
	}
	if pubkey == "" {
		pubkey = filepath.Join(evlog.KeyDir(g.stateDir), evlog.PubFile)
	}
	vkey, err := readSmall(pubkey, maxCheckpointFile)
	if err != nil {
		return usage(err)
	}
	pub, _, err := evlog.PublicKeyFromVkey(string(vkey))
	if err != nil {
		return usage(err)
	}
	b, err := readSmall(file, attest.MaxEnvelope)
	if err != nil {
		return usage(err)
	}
	v, err := sessionreceipt.Verify(b, pub)
	if err != nil {
		out.Problems = append(out.Problems, "receipt: "+err.Error())
		return out, nil
	}
	rec := v.Record
	out.SandboxID, out.Level, out.Mode, out.Subjects = rec.SandboxID, rec.LevelAdmitted.String(), rec.EnforcementMode, v.Subjects
	if rec.InSitu == nil {
		out.Problems = append(out.Problems, "in_situ: the record has no in-situ set")
	} else {
		bad := 0
		for _, c := range rec.InSitu.Checks {
			if !c.OK {
				bad++
				out.Problems = append(out.Problems, fmt.Sprintf("in_situ %s: want %q, got %q", c.Name, c.Want, c.Got))
			}
		}
		out.InSitu = fmt.Sprintf("%s set, %d of %d checks OK", rec.InSitu.Set, len(rec.InSitu.Checks)-bad, len(rec.InSitu.Checks))
		for _, m := range evidence.MissingInSitu(rec.InSitu) {
			out.Problems = append(out.Problems, "in_situ "+m)
		}
	}
	// The admitted level and mode must follow from the record's own facts
	// (a boundary is verified only over facts that are all OK), not only
	// from the verdicts it states.
	rejudged := map[string]evidence.Boundary{}
	for _, name := range evidence.Boundaries() {
		b := rec.Boundaries[name]
		ok := b.Verified && len(b.Facts) > 0
		for _, f := range b.Facts {
			ok = ok && f.OK
		}
		if b.Verified && !ok {
			out.Problems = append(out.Problems, fmt.Sprintf("boundary %s: stated verified, but its facts are not all OK (%d facts)", name, len(b.Facts)))
		}
		rejudged[name] = evidence.Boundary{Verified: ok}
	}
	if lvl, mode := evidence.Admit(rejudged); rec.LevelAdmitted > lvl || rec.EnforcementMode != mode {
		out.Problems = append(out.Problems, fmt.Sprintf("level: the record states %s (%s), its boundaries admit %s (%s)", rec.LevelAdmitted, rec.EnforcementMode, lvl, mode))
	}
	if rec.LevelAdmitted < rec.LevelRequested {
		out.Problems = append(out.Problems, fmt.Sprintf("level: admitted %s, below the requested %s", rec.LevelAdmitted, rec.LevelRequested))
	}
	for name, path := range map[string]string{sessionreceipt.SubjectBinary: binary, sessionreceipt.SubjectConfig: config} {
		if path == "" {
			continue
		}
		d, err := fileDigest(path)
		if err != nil {
			return usage(err)
		}
		if v.Subjects[name] != d {
			out.Problems = append(out.Problems, fmt.Sprintf("subject %s: the receipt names %q, %s is %s", name, v.Subjects[name], path, d))
		}
	}
	if withLog {
		if err := g.receiptInLog(ctx, b, &out); err != nil {
			return out, err
		}
	}
	out.OK = len(out.Problems) == 0
	return out, nil
}

// receiptInLog proves that the exact receipt bytes were logged.
func (g *globals) receiptInLog(ctx context.Context, b []byte, out *receiptVerifyOutput) error {
	if err := requireRoot("evidence verify-receipt --log"); err != nil {
		return err
	}
	st, err := g.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return failure.Fail(failure.KindUsage, "evidence verify-receipt", err)
	}
	canon, err := attest.Marshal(env)
	if err != nil {
		return failure.Fail(failure.KindInternal, "evidence verify-receipt", err)
	}
	a, err := st.AttestationByDigest(ctx, attest.Digest(canon))
	if err != nil {
		out.Problems = append(out.Problems, "log: "+err.Error())
		return nil
	}
	out.ReceiptID = a.ReceiptID
	v, err := evlog.LoadVerifier(filepath.Join(evlog.KeyDir(g.stateDir), evlog.PubFile))
	if err != nil {
		return failure.Fail(failure.KindUsage, "evidence verify-receipt", err)
	}
	var vo verifyOutput
	vo.OK = true
	if err := proveInto(ctx, st, v, a.ReceiptID, &vo); err != nil {
		return err
	}
	if !vo.OK {
		out.Problems = append(out.Problems, "log: "+vo.ProofError)
	}
	return nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func printReceiptVerify(w io.Writer, out receiptVerifyOutput) {
	for _, p := range out.Problems {
		fmt.Fprintf(w, "PROBLEM %s\n", textsafe.Line(p))
	}
	status := "ok:"
	if !out.OK {
		status = "FAILED:"
	}
	if out.SandboxID == "" {
		fmt.Fprintln(w, "FAILED: not a session receipt signed by this key")
		return
	}
	subj, _ := json.Marshal(out.Subjects)
	line := fmt.Sprintf("%s session %s admitted at %s (%s); in-situ: %s; subjects %s", status, out.SandboxID, out.Level, out.Mode, out.InSitu, subj)
	if out.ReceiptID > 0 {
		line += fmt.Sprintf("; in the evidence log as receipt %d", out.ReceiptID)
	}
	fmt.Fprintln(w, textsafe.Line(strings.TrimSpace(line)))
}
