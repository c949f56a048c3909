package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/approval"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/store"
)

// consoleURLFile is where `cordon approvals console` leaves its login URL,
// mode 0600, in the state directory.
const consoleURLFile = "console.url"

func approvalsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "Decide the approvals policy asks for: list, show, approve, deny, revoke, console",
		Long: `When policy requires approval for a crossing (a tool call that writes files,
a model call, an egress connection, a state write), the privileged side
records a pending approval bound to the exact request — the tenant, the
workload and the sandbox, the action, the resource and the request (a
tool's canonical arguments, a model request's body digest, an egress
host:port, a state key, operation and value digest) — summarized by a
SHA-256 digest. A tool call waits, bounded; a model call, an egress
connection or a state operation is refused at once as pending (HTTP 409,
or 403 for egress) and passes when retried once an operator approves it
here or in the web console. See docs/approvals.md.

An approval is good once, for that exact request only: a changed argument is
a different digest and needs its own approval; a consumed, denied, expired or
revoked approval never authorizes anything again. Nothing inside a sandbox
can approve: deciding needs root on the host (this command) or the console's
login token, and the console listens on the host's loopback, which a
sandbox's own network namespace cannot reach.

Examples:

  # what is waiting, with the exact arguments in one line each
  cordon approvals list

  # everything, including decided, consumed, revoked and expired approvals
  cordon approvals list --all --json

  # read the exact arguments before deciding
  cordon approvals show apr_0123456789abcdef01234567

  cordon approvals approve apr_0123456789abcdef01234567
  cordon approvals deny apr_0123456789abcdef01234567

  # withdraw an approval that has not been used yet
  cordon approvals revoke apr_0123456789abcdef01234567

  # the web console: prints a login URL for a browser on this host
  cordon approvals console

Refusals (an unknown id, an approval that is no longer pending) exit 125 and
say why: "approval apr_… not found", "approval apr_… is already consumed".`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(approvalsListCmd(g), approvalsShowCmd(g), approvalsDecideCmd(g, "approve"),
		approvalsDecideCmd(g, "deny"), approvalsDecideCmd(g, "revoke"), approvalsConsoleCmd(g))
	return cmd
}

// withStore runs fn with the store open, as root.
func (g *globals) withStore(op string, fn func(*store.Store) error) error {
	if err := requireRoot(op); err != nil {
		return err
	}
	st, err := g.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// approvalFailure gives a store error its failure kind: a refusal is the
// user's request being invalid; anything else is the store.
func approvalFailure(op string, err error) error {
	if errors.Is(err, store.ErrApprovalNotFound) || errors.Is(err, store.ErrApprovalDecided) {
		return failure.Fail(failure.KindUsage, op, err)
	}
	return failure.Fail(failure.KindStore, op, err)
}

// decider names the operator in DecidedBy and RevokedBy.
func decider() string { return fmt.Sprintf("cli uid %d", os.Getuid()) }

func approvalsListCmd(g *globals) *cobra.Command {
	var all, asJSON bool
	var f store.ApprovalFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List pending approvals (--all: every state)",
		Long: `List approvals, oldest first. Without --all only pending ones: those waiting
for a decision, with the workload, sandbox, action, target, request digest,
expiry and the arguments on one line (cut at 100 characters; 'cordon
approvals show ID' prints them in full). Characters that would not show on a
terminal are printed as \u escapes, so arguments cannot hide or reorder text.

Examples:

  cordon approvals list
  cordon approvals list --all --workload ci-agent --limit 20
  cordon approvals list --state consumed --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.State {
			case "":
				if !all {
					f.State = store.ApprovalPending
				}
			case store.ApprovalPending, store.ApprovalApproved, store.ApprovalDenied, store.ApprovalConsumed,
				store.ApprovalRevoked, store.ApprovalExpired:
			default:
				return failure.Failf(failure.KindUsage, "approvals list", "--state %q: want pending, approved, denied, consumed, revoked or expired", f.State)
			}
			return g.withStore("approvals list", func(st *store.Store) error {
				as, err := st.Approvals(cmd.Context(), f)
				if err != nil {
					return failure.Fail(failure.KindStore, "approvals list", err)
				}
				if asJSON {
					for _, a := range as {
						if err := writeJSON(g.stdout, approvalView(a)); err != nil {
							return err
						}
					}
					return nil
				}
				tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tWORKLOAD\tSANDBOX\tACTION\tTARGET\tEXPIRES\tDIGEST\tARGUMENTS")
				for _, a := range as {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, approval.DisplayText(a.Workload),
						approval.DisplayText(a.SandboxID), approval.DisplayText(a.Action), approval.DisplayText(a.Target),
						approval.ExpiresText(a.Expires), a.Digest, cut(approval.CompactJSON(a.Arguments), 100))
				}
				return tw.Flush()
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&all, "all", false, "every state, not only pending")
	fl.StringVar(&f.State, "state", "", "only this state: pending, approved, denied, consumed, revoked, expired")
	fl.StringVar(&f.Workload, "workload", "", "only this workload")
	fl.IntVar(&f.Limit, "limit", 0, "only the newest N")
	fl.BoolVar(&asJSON, "json", false, "print one JSON approval per line, arguments exact")
	return cmd
}

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func approvalsShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print one approval with its exact arguments",
		Long: `Print one approval: who asked (workload, sandbox), for what (action, target,
request digest), its state and history, and the exact arguments, indented.
Characters that would not show on a terminal are printed as \u escapes.

Example:

  cordon approvals show apr_0123456789abcdef01234567`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withStore("approvals show", func(st *store.Store) error {
				a, err := st.Approval(cmd.Context(), args[0])
				if err != nil {
					return approvalFailure("approvals show", err)
				}
				if asJSON {
					return writeJSON(g.stdout, approvalView(a))
				}
				printApproval(g.stdout, a)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the approval as JSON")
	return cmd
}

func printApproval(w io.Writer, a store.Approval) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("id", a.ID)
	row("state", a.State)
	row("workload", approval.DisplayText(a.Workload))
	row("sandbox", approval.DisplayText(a.SandboxID))
	row("action", approval.DisplayText(a.Action))
	row("target", approval.DisplayText(a.Target))
	row("digest", a.Digest)
	row("requested", rfc3339(a.Created))
	row("expires", approval.ExpiresText(a.Expires))
	row("decided", rfc3339(a.Decided))
	row("decided by", approval.DisplayText(a.DecidedBy))
	row("consumed", rfc3339(a.Consumed))
	row("revoked", rfc3339(a.Revoked))
	row("revoked by", approval.DisplayText(a.RevokedBy))
	if a.ReceiptID != 0 {
		row("receipt", fmt.Sprint(a.ReceiptID))
	}
	tw.Flush()
	fmt.Fprintf(w, "arguments:\n%s\n", approval.DisplayJSON(a.Arguments))
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// approvalJSON is the --json form of an approval.
type approvalJSON struct {
	ID        string          `json:"id"`
	State     string          `json:"state"`
	Workload  string          `json:"workload"`
	SandboxID string          `json:"sandbox_id"`
	Action    string          `json:"action"`
	Target    string          `json:"target"`
	Digest    string          `json:"digest"`
	Arguments json.RawMessage `json:"arguments"`
	Created   string          `json:"created"`
	Expires   string          `json:"expires"`
	Decided   string          `json:"decided,omitempty"`
	DecidedBy string          `json:"decided_by,omitempty"`
	Consumed  string          `json:"consumed,omitempty"`
	Revoked   string          `json:"revoked,omitempty"`
	RevokedBy string          `json:"revoked_by,omitempty"`
	ReceiptID int64           `json:"receipt_id,omitempty"`
}

func approvalView(a store.Approval) approvalJSON {
	return approvalJSON{ID: a.ID, State: a.State, Workload: a.Workload, SandboxID: a.SandboxID, Action: a.Action,
		Target: a.Target, Digest: a.Digest, Arguments: a.Arguments, Created: rfc3339(a.Created), Expires: rfc3339(a.Expires),
		Decided: rfc3339(a.Decided), DecidedBy: a.DecidedBy, Consumed: rfc3339(a.Consumed), Revoked: rfc3339(a.Revoked),
		RevokedBy: a.RevokedBy, ReceiptID: a.ReceiptID}
}

// approvalHelp is the Short and Long help of approve, deny and revoke.
var approvalHelp = map[string][2]string{
	"approve": {"Approve a pending approval: its exact request may run once",
		`Approve a pending approval. The call it is bound to (that exact tool,
arguments and workload) may then run once; the approval is consumed when it
does, and expires unused otherwise. Read the arguments first with 'cordon
approvals show ID'. Only a pending, unexpired approval can be approved.`},
	"deny": {"Deny a pending approval: its call is refused",
		`Deny a pending approval. The call waiting on it is refused, and the same
request is refused until the denied approval's expiry.`},
	"revoke": {"Withdraw a pending or approved approval that has not been used",
		`Revoke a pending or approved approval before it is consumed: it will never
authorize anything. A consumed approval cannot be revoked (its call already
ran; see its receipt). Stopping a sandbox revokes its approvals too.`},
}

// approvalsDecideCmd builds approve, deny and revoke.
func approvalsDecideCmd(g *globals, verb string) *cobra.Command {
	help := approvalHelp[verb]
	op := "approvals " + verb
	return &cobra.Command{
		Use:   verb + " ID",
		Short: help[0],
		Long:  help[1] + "\n\nExample:\n\n  cordon approvals " + verb + " apr_0123456789abcdef01234567",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withStore(op, func(st *store.Store) error {
				var a store.Approval
				var err error
				if verb == "revoke" {
					a, err = st.RevokeApproval(cmd.Context(), args[0], decider())
				} else {
					a, err = st.DecideApproval(cmd.Context(), args[0], verb == "approve", decider())
				}
				if err != nil {
					return approvalFailure(op, err)
				}
				fmt.Fprintf(g.stdout, "%s %s: %s %s for workload %s (sandbox %s), digest %s\n", a.State, a.ID,
					approval.DisplayText(a.Action), approval.DisplayText(a.Target), approval.DisplayText(a.Workload),
					approval.DisplayText(a.SandboxID), a.Digest)
				return nil
			})
		},
	}
}

func approvalsConsoleCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the approval web console on the host's loopback",
		Long: `Serve the approval web console: pending approvals with their exact
arguments and Approve/Deny buttons, recent decisions, and recent receipts.

It listens on a loopback address only (a sandbox has its own network
namespace and cannot reach it) and prints a login URL carrying a random
token, also written to <state-dir>/console.url with mode 0600. Opening the URL
in a browser on this host starts a session (an HttpOnly, SameSite=Strict
cookie); every other request without that session is refused with 401.
Decisions are POSTed with a per-session CSRF token and must come from the
console's own origin; requests naming another Host are refused (DNS
rebinding). The pages run no script. Anyone holding the login URL can decide
approvals until the console stops (SIGINT or SIGTERM); the token is new each
start.

Examples:

  cordon approvals console
  cordon approvals console --listen 127.0.0.1:8790

  # from another host, forward the port over SSH instead of listening wider:
  ssh -L 8790:127.0.0.1:8790 host sudo cordon approvals console --listen 127.0.0.1:8790`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore("approvals console", func(st *store.Store) error {
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				return g.serveConsole(ctx, st, listen)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", approval.DefaultListen, "loopback address ip:port to listen on (port 0: any free port)")
	return cmd
}

func (g *globals) serveConsole(ctx context.Context, st *store.Store, listen string) error {
	log := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "approval-console")
	c, err := approval.NewConsole(st, approval.ConsoleOptions{Listen: listen, Logger: log})
	if errors.Is(err, approval.ErrNotLoopback) {
		return failure.Fail(failure.KindUsage, "approvals console", err)
	}
	if err != nil {
		return failure.Fail(failure.KindProvision, "approvals console", err)
	}
	path := filepath.Join(g.stateDir, consoleURLFile)
	if err := writePrivate(path, c.LoginURL()+"\n"); err != nil {
		c.Close()
		return failure.Fail(failure.KindProvision, "approvals console", err)
	}
	defer removeIfOurs(path, c.LoginURL()+"\n")
	fmt.Fprintf(g.stdout, "approval console on http://%s\nlog in by opening (the URL holds the login token: anyone with it can decide approvals until the console stops):\n\n  %s\n\nThe URL is also in %s (mode 0600). Stop with Ctrl-C.\n",
		c.Addr(), c.LoginURL(), path)
	if err := c.Serve(ctx); err != nil {
		return failure.Fail(failure.KindInternal, "approvals console", err)
	}
	return nil
}

// writePrivate writes data to path atomically with mode 0600, never
// through a symlink (safefile).
func writePrivate(path, data string) error {
	return safefile.WriteFile(path, []byte(data), 0o600)
}

// removeIfOurs removes path if it still holds data (another console may
// have replaced it since).
func removeIfOurs(path, data string) {
	if b, err := os.ReadFile(path); err == nil && string(b) == data {
		_ = os.Remove(path)
	}
}
