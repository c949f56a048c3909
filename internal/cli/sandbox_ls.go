package cli

import (
	"fmt"
	"io"
	"os/user"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// LsRow is one row of `cordon sandbox ls`: the fields a --format
// template names ({{.Name}} {{.State}}) and, under --format json, the
// keys of each line's object. It is a stable interface: fields are only
// ever added. Under a template the strings are escaped for a terminal
// (textsafe.Line: a sandbox's name or note cannot move the cursor);
// under json they are exact, with invisible characters as \u escapes.
type LsRow struct {
	Name     string    `json:"name"`      // the sandbox's name
	ID       string    `json:"id"`        // its id (16 hex digits), minted by the daemon
	Owner    string    `json:"owner"`     // the owner's user name, or the uid when it has none
	OwnerUID uint32    `json:"owner_uid"` // the owner's uid
	State    string    `json:"state"`     // created, running, stopped, …
	Created  time.Time `json:"created"`   // when it was created (RFC 3339 in json)
	Age      string    `json:"age"`       // how long ago, in its largest whole unit: 45s, 12m, 3h, 9d
	Profile  string    `json:"profile"`   // SAFE_GUIDED or FULL_CONTROL_LAB
	Level    string    `json:"level"`     // the isolation level it was admitted at
	Drain    string    `json:"drain"`     // why it drains (empty: it does not)
	Main     string    `json:"main"`      // how its main program ended (empty: running or none)
	Note     string    `json:"note"`      // the daemon's note (a failure, …)
}

// ownerNames maps uids to user names (os/user: /etc/passwd without cgo),
// the uid in decimal when it has none; each uid is looked up once.
type ownerNames map[uint32]string

func (o ownerNames) name(uid uint32) string {
	if n, ok := o[uid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(n); err == nil && u.Username != "" {
		n = u.Username
	}
	o[uid] = n
	return n
}

func lsRow(i hostmgr.Info, owners ownerNames, now time.Time) LsRow {
	return LsRow{Name: i.Name, ID: i.ID, Owner: owners.name(i.Owner), OwnerUID: i.Owner, State: i.State, Created: i.Created,
		Age: age(i.Created, now), Profile: i.Profile, Level: i.Level, Drain: i.Drain, Main: i.MainExit, Note: i.Note}
}

// escaped is r with every string made safe for a terminal.
func (r LsRow) escaped() LsRow {
	for _, s := range []*string{&r.Name, &r.ID, &r.Owner, &r.State, &r.Age, &r.Profile, &r.Level, &r.Drain, &r.Main, &r.Note} {
		*s = textsafe.Line(*s)
	}
	return r
}

// lsFormat is how ls prints its rows under --format: one JSON object a
// line for "json", otherwise a text/template executed once per row, each
// followed by a newline. A template that does not parse or names no
// field of LsRow is a usage error before anything is asked or printed.
func lsFormat(format string) (func(io.Writer, LsRow) error, error) {
	if format == "json" {
		return func(w io.Writer, r LsRow) error { return writeJSON(w, r) }, nil
	}
	bad := func(err error) error {
		msg := strings.TrimPrefix(err.Error(), "template: ls: ")
		return failure.Failf(failure.KindUsage, "sandbox ls", "--format %q: %s (the fields are those of LsRow: .Name .ID .Owner .OwnerUID .State .Created .Age .Profile .Level .Drain .Main .Note; or --format json)", format, msg)
	}
	t, err := template.New("ls").Option("missingkey=error").Parse(format)
	if err != nil {
		return nil, bad(err)
	}
	// An unknown field is only found on execution: try it on an empty row.
	if err := t.Execute(io.Discard, LsRow{}); err != nil {
		return nil, bad(err)
	}
	return func(w io.Writer, r LsRow) error {
		var b strings.Builder
		if err := t.Execute(&b, r.escaped()); err != nil {
			return bad(err)
		}
		_, err := io.WriteString(w, b.String()+"\n")
		return err
	}, nil
}

func sbLsCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var quiet bool
	var format string
	cmd := &cobra.Command{
		Use:   "ls [-q | --format TEMPLATE|json]",
		Short: "List sandboxes (yours; every one for root)",
		Long: `List sandboxes: yours, or every one for root. The table shows each
sandbox's owner by user name (the uid when it has none).

--format prints each sandbox through a Go text/template over these fields
(as in docker ps --format), one line each:
  .Name .ID .Owner .OwnerUID .State .Created .Age .Profile .Level .Drain .Main .Note
--format json prints one JSON object per line with the same fields
(name, id, owner, owner_uid, state, created, age, profile, level, drain,
main, note). --json prints the daemon's full records as one array.
-q prints the names alone.`,
		Example: `  cordon sandbox ls
  cordon sandbox ls -q
  cordon sandbox ls --format '{{.Name}} {{.State}} {{.Owner}}'
  cordon sandbox ls --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, on := range []bool{quiet, sf.json, format != ""} {
				if on {
					n++
				}
			}
			if n > 1 {
				return failure.Failf(failure.KindUsage, "ls", "give -q or --json or --format, only one of them")
			}
			var row func(io.Writer, LsRow) error
			if format != "" {
				var err error
				if row, err = lsFormat(format); err != nil {
					return err
				}
			}
			var is []hostmgr.Info
			if err := sf.do(cmd.Context(), "ls", struct{}{}, nil, &is); err != nil {
				return err
			}
			if quiet {
				for _, i := range is {
					fmt.Fprintln(g.stdout, textsafe.Line(i.Name))
				}
				return nil
			}
			if row != nil {
				owners, now := ownerNames{}, time.Now()
				for _, i := range is {
					if err := row(g.stdout, lsRow(i, owners, now)); err != nil {
						return err
					}
				}
				return nil
			}
			return g.print(sf, is, func() { printInfo(g, is) })
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the names, one a line")
	cmd.Flags().StringVar(&format, "format", "", "print each sandbox through a Go template over LsRow ('{{.Name}} {{.State}}'), or json: one object a line")
	return cmd
}
