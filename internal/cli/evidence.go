package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// maxCheckpointFile bounds a --checkpoint file.
const maxCheckpointFile = 64 << 10

func evidenceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Verify the evidence log of receipts, prove a receipt, manage the log's key",
		Long: `Every receipt cordon records (one per crossing: model request, egress
connection, tool call) is a leaf of an append-only Merkle log in the store,
appended in the same transaction as the receipt, before the agent gets its
response. Checkpoints sign the log's size and root hash with an ed25519 key
kept in <state-dir>/evidence/log.key (0600, root only); the public key is
<state-dir>/evidence/log.pub.

Anyone with the public key and a checkpoint can detect a later change to
any receipt or checkpoint: 'cordon evidence verify' rebuilds the tree from
the receipts and reports each change with its position. Copy checkpoints
off the host (and the public key with them): the key lives on this host,
so root here could rewrite the log and re-sign it, but not a checkpoint
already published elsewhere. See docs/evidence-log.md.

Examples:
  sudo cordon evidence checkpoint > /mnt/audit/cp-$(date +%s).txt
  sudo cordon evidence verify
  sudo cordon evidence verify --checkpoint /mnt/audit/cp-1767225600.txt
  sudo cordon evidence verify --receipt 42
  sudo cordon evidence pubkey > cordon-log.pub`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(evidenceVerifyCmd(g), evidenceCheckpointCmd(g), evidenceKeygenCmd(g), evidencePubkeyCmd(g), evidenceVerifyReceiptCmd(g))
	return cmd
}

// verifyOutput is the --json output of cordon evidence verify.
type verifyOutput struct {
	OK         bool         `json:"ok"`
	Report     evlog.Report `json:"report"`
	Proof      *evlog.Proof `json:"proof,omitempty"`
	ProofError string       `json:"proof_error,omitempty"`
}

func evidenceVerifyCmd(g *globals) *cobra.Command {
	var (
		asJSON      bool
		receipt     int64
		pubkey      string
		checkpoints []string
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the whole evidence log; print a receipt's inclusion proof",
		Long: `Check the whole evidence log against the receipts in the store and every
checkpoint, with the public key (default <state-dir>/evidence/log.pub):

  - each leaf's receipt exists and hashes to the leaf hash stored with it,
    and each receipt is a leaf exactly once;
  - each stored tree hash is the one its children give;
  - each checkpoint's signature verifies, and the tree rebuilt from the
    receipts alone has, at the checkpoint's size, the root it signed;
  - no checkpoint signs more leaves than the log has.

Checkpoints given with --checkpoint (notes printed by 'cordon evidence
checkpoint' and kept elsewhere) are checked the same way: they catch a log
rewritten and re-signed on this host.

It prints "ok: …" and exits 0, or prints each problem with its kind and
position (leaf index and receipt id, stored-hash index, or checkpoint size)
and exits 1. Kinds: receipt_modified, receipt_missing, receipt_not_in_log,
receipt_in_log_twice, leaf_missing, hash_mismatch, hash_missing, hash_extra,
checkpoint_bad_signature, checkpoint_malformed, checkpoint_size_mismatch,
checkpoint_root_mismatch, checkpoint_beyond_log.

With --receipt ID it also prints that receipt's inclusion proof in the tree
of the latest checkpoint (leaf index, tree size, root, proof hashes in
base64, the signed checkpoint note) and checks it; a receipt newer than
the latest checkpoint has no proof until the next one
('cordon evidence checkpoint').

Examples:
  sudo cordon evidence verify
  sudo cordon evidence verify --json | jq '.report.problems'
  sudo cordon evidence verify --receipt 42
  cordon evidence verify --state-dir /srv/copy-of-state --pubkey cordon-log.pub \
      --checkpoint cp-1767225600.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vf := verifyFlags{asJSON: asJSON, receipt: receipt, withProof: cmd.Flags().Changed("receipt"), pubkey: pubkey, checkpoints: checkpoints}
			return g.evidenceVerify(cmd.Context(), vf)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the report (and proof) as one JSON object")
	fl.Int64Var(&receipt, "receipt", 0, "also print and check the inclusion proof of the receipt with this id")
	fl.StringVar(&pubkey, "pubkey", "", "verifier key file (default <state-dir>/evidence/log.pub)")
	fl.StringArrayVar(&checkpoints, "checkpoint", nil, "also check this signed checkpoint note kept elsewhere (repeatable)")
	return cmd
}

// verifyFlags are evidence verify's flags.
type verifyFlags struct {
	asJSON      bool
	receipt     int64
	withProof   bool // --receipt was given
	pubkey      string
	checkpoints []string
}

// evidenceVerify checks the whole log (and one receipt's proof) and prints
// the report; a failed check exits 1.
func (g *globals) evidenceVerify(ctx context.Context, f verifyFlags) error {
	if err := requireRoot("evidence verify"); err != nil {
		return err
	}
	if f.pubkey == "" {
		f.pubkey = filepath.Join(evlog.KeyDir(g.stateDir), evlog.PubFile)
	}
	v, err := evlog.LoadVerifier(f.pubkey)
	if errors.Is(err, fs.ErrNotExist) {
		return failure.Failf(failure.KindUsage, "evidence verify", "no public key at %s: the log's key is made by the first checkpoint or by 'cordon evidence keygen'; pass --pubkey FILE to use another", f.pubkey)
	}
	if err != nil {
		return failure.Fail(failure.KindUsage, "evidence verify", err)
	}
	var external [][]byte
	for _, path := range f.checkpoints {
		b, err := readSmall(path, maxCheckpointFile)
		if err != nil {
			return failure.Fail(failure.KindUsage, "evidence verify --checkpoint", err)
		}
		external = append(external, b)
	}
	st, err := g.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := evlog.Verify(ctx, st, v, external...)
	if err != nil {
		return failure.Fail(failure.KindStore, "evidence verify", err)
	}
	out := verifyOutput{OK: rep.OK(), Report: rep}
	if f.withProof {
		if err := proveInto(ctx, st, v, f.receipt, &out); err != nil {
			return err
		}
	}
	if f.asJSON {
		if err := writeJSON(g.stdout, out); err != nil {
			return err
		}
	} else {
		printVerify(g.stdout, out, f.withProof, f.receipt)
	}
	if !out.OK {
		return &exitError{code: 1}
	}
	return nil
}

// proveInto adds receipt's inclusion proof, checked with v, to out; a
// receipt without a proof yet is a failed check, not an error.
func proveInto(ctx context.Context, st *store.Store, v note.Verifier, receipt int64, out *verifyOutput) error {
	p, err := evlog.Prove(ctx, st, receipt)
	switch {
	case errors.Is(err, store.ErrNotInLog), errors.Is(err, evlog.ErrNotCheckpointed):
		out.ProofError = err.Error()
	case err != nil:
		return failure.Fail(failure.KindStore, "evidence verify --receipt", err)
	default:
		out.Proof = &p
		if err := p.Check(v); err != nil {
			out.ProofError = err.Error()
		}
	}
	if out.ProofError != "" {
		out.OK = false
	}
	return nil
}

func printVerify(w io.Writer, out verifyOutput, withProof bool, receipt int64) {
	rep := out.Report
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "PROBLEM %s\n", textsafe.Line(fmt.Sprint(p)))
	}
	if rep.Omitted > 0 {
		fmt.Fprintf(w, "PROBLEM … and %d more not listed\n", rep.Omitted)
	}
	latest := "no checkpoint yet"
	if c := rep.Latest; c != nil {
		latest = fmt.Sprintf("latest checkpoint size %d root %s", c.Size, c.Root)
		if !c.Time.IsZero() {
			latest += " signed " + c.Time.Format(time.RFC3339)
		}
	}
	status := "ok:"
	if !rep.OK() {
		status = fmt.Sprintf("FAILED: %d problems in", len(rep.Problems)+rep.Omitted)
	}
	fmt.Fprintf(w, "%s %d receipts, %d leaves, %d checkpoints, %s; %d leaves not yet signed (key %s)\n",
		status, rep.Receipts, rep.Size, rep.Checkpoints, latest, rep.Unsigned, rep.Verifier)
	if !withProof {
		return
	}
	if p := out.Proof; p != nil {
		fmt.Fprintf(w, "\nreceipt %d is leaf %d of the tree of %d leaves with root %s\n", p.ReceiptID, p.Leaf, p.TreeSize, p.Root)
		fmt.Fprintf(w, "leaf data (the receipt as stored): %s\n", textsafe.JSON([]byte(p.Receipt)))
		fmt.Fprintf(w, "proof hashes (golang.org/x/mod/sumdb/tlog RecordProof, base64):\n")
		for _, h := range p.Hashes {
			fmt.Fprintf(w, "  %s\n", h)
		}
		fmt.Fprintf(w, "signed checkpoint:\n")
		for _, line := range strings.Split(strings.TrimSuffix(p.Checkpoint, "\n"), "\n") {
			fmt.Fprintln(w, strings.TrimRight("  "+textsafe.Line(line), " "))
		}
	}
	if out.ProofError != "" {
		fmt.Fprintf(w, "proof of receipt %d: FAILED: %s\n", receipt, textsafe.Line(out.ProofError))
		return
	}
	fmt.Fprintf(w, "proof of receipt %d: ok\n", receipt)
}

func evidenceCheckpointCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Sign a checkpoint of the evidence log now and print it",
		Long: `Sign a checkpoint of the evidence log if it grew since the latest one, and
print the latest checkpoint: a signed note (golang.org/x/mod/sumdb/note)
holding the log's size, root hash and signing time. Before signing, the
growth is checked against the receipts and the previous checkpoint; if the
log was changed since, nothing is signed and the command fails.

Save the output somewhere the host cannot rewrite (another machine, a
ticket, a transparency log): 'cordon evidence verify --checkpoint FILE'
then proves the log still holds what it held when the checkpoint was made.
The first checkpoint creates the key if there is none.

Examples:
  sudo cordon evidence checkpoint
  sudo cordon evidence checkpoint | ssh audit@backup 'cat > cordon-cp-$(date +%s)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("evidence checkpoint"); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			defer st.Close()
			l, err := evlog.Open(st, g.stateDir)
			if err != nil {
				return failure.Fail(failure.KindStore, "evidence checkpoint", err)
			}
			c, err := l.Checkpoint(cmd.Context())
			if err != nil {
				return failure.Fail(failure.KindStore, "evidence checkpoint", err)
			}
			if c.Note == "" {
				fmt.Fprintln(g.stderr, "cordon: the evidence log is empty: nothing to sign")
				return nil
			}
			if asJSON {
				return writeJSON(g.stdout, c)
			}
			_, err = io.WriteString(g.stdout, c.Note)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint as JSON (size, root, time, note)")
	return cmd
}

func evidenceKeygenCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create the evidence log's signing key",
		Long: `Create the ed25519 key that signs the evidence log's checkpoints:
<state-dir>/evidence/log.key (0600, in a 0700 directory, root only) and its
public key <state-dir>/evidence/log.pub (0644). Without it, the first
checkpoint creates one named cordon-evidence@<hostname>; keygen lets you
choose the name (it appears on every signature line).

It never replaces a key, and makes none for a log that already has
checkpoints: the next checkpoint must verify the previous one, so a new
key could not extend them (key rotation is not supported yet).

Examples:
  sudo cordon evidence keygen
  sudo cordon evidence keygen --name cordon-evidence@build-17.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("evidence keygen"); err != nil {
				return err
			}
			st, err := g.openStore() // creates and checks the state dir
			if err != nil {
				return err
			}
			dir := evlog.KeyDir(g.stateDir)
			exists := func() error {
				return failure.Failf(failure.KindUsage, "evidence keygen", "%s already exists; keygen never replaces a key", filepath.Join(dir, evlog.KeyFile))
			}
			if _, err := os.Lstat(filepath.Join(dir, evlog.KeyFile)); err == nil {
				st.Close()
				return exists()
			}
			err = evlog.CheckNoCheckpoints(cmd.Context(), st)
			st.Close()
			if errors.Is(err, evlog.ErrKeyMissing) {
				return failure.Fail(failure.KindUsage, "evidence keygen", err)
			}
			if err != nil {
				return failure.Fail(failure.KindStore, "evidence keygen", err)
			}
			if name == "" {
				name = evlog.DefaultKeyName()
			}
			vkey, err := evlog.GenerateKey(dir, name)
			if errors.Is(err, evlog.ErrKeyExists) {
				return exists()
			}
			if err != nil {
				return failure.Fail(failure.KindUsage, "evidence keygen", err)
			}
			fmt.Fprintf(g.stderr, "cordon: wrote %s (private, 0600) and %s\n", filepath.Join(dir, evlog.KeyFile), filepath.Join(dir, evlog.PubFile))
			fmt.Fprintln(g.stdout, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "key name: printable, no spaces or '+' (default cordon-evidence@<hostname>)")
	return cmd
}

func evidencePubkeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pubkey",
		Short: "Print the evidence log's public (verifier) key",
		Long: `Print the public key that verifies the evidence log's checkpoints, in
golang.org/x/mod/sumdb/note verifier-key form (name+hash+base64). Hand it,
with checkpoints, to whoever audits this host; 'cordon evidence verify
--pubkey FILE' reads it.

Example:
  sudo cordon evidence pubkey > cordon-log.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := filepath.Join(evlog.KeyDir(g.stateDir), evlog.PubFile)
			_, err := evlog.LoadVerifier(path) // only a valid key is printed
			if errors.Is(err, fs.ErrNotExist) {
				return failure.Failf(failure.KindUsage, "evidence pubkey", "no public key at %s: the first checkpoint or 'cordon evidence keygen' makes the key", path)
			}
			if err != nil {
				return failure.Fail(failure.KindUsage, "evidence pubkey", err)
			}
			b, err := readSmall(path, maxCheckpointFile)
			if err != nil {
				return failure.Fail(failure.KindUsage, "evidence pubkey", err)
			}
			fmt.Fprintln(g.stdout, strings.TrimSpace(string(b)))
			return nil
		},
	}
}

// readSmall reads a file of at most limit bytes.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
