package custody

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Sentinels, for errors.Is on an *Error.
var (
	// ErrMissing: the variable is unset or empty, or the file is empty.
	ErrMissing = errors.New("missing or empty")
	// ErrUnsafeFile: the file is a symbolic link, not a regular file, or
	// writable by group or others.
	ErrUnsafeFile = errors.New("unsafe secret file")
	// ErrTooShort: the value is shorter than MinLen and could not be
	// redacted.
	ErrTooShort = errors.New("too short to redact")
	// ErrTooLarge: the file is larger than MaxFileBytes.
	ErrTooLarge = errors.New("too large")
	// ErrUnknown: no secret of that name is custodied.
	ErrUnknown = errors.New("no such secret")
	// ErrUnsupported: file secrets need O_NOFOLLOW, which this platform
	// lacks.
	ErrUnsupported = errors.New("file secrets are not supported on this platform")
	// ErrClosed: a write to a closed redacting writer.
	ErrClosed = errors.New("custody: write to a closed redacting writer")
)

// MaxFileBytes bounds a secret file.
const MaxFileBytes = 64 << 10

// Error is a secret that could not be resolved or served. It names the
// secret and where it comes from, never its value.
type Error struct {
	// Secret is the secret's name.
	Secret string
	// Source is "env NAME" or "file PATH"; empty for ErrUnknown.
	Source string
	// Err is one of the sentinels above, possibly wrapped with detail, or
	// an error from opening the file.
	Err error
}

func (e *Error) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("secret %s: %v", e.Secret, e.Err)
	}
	return fmt.Sprintf("secret %s (%s): %v", e.Secret, e.Source, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// redacted is what every printed or encoded Value shows.
const redacted = "[REDACTED]"

// Value is a custodied secret value. Printing it with any fmt verb,
// marshalling it to JSON or text, or logging it with slog yields
// "[REDACTED]"; only Reveal returns the bytes.
type Value struct {
	b sealed[[]byte]
}

// sealed holds a pointer that fmt cannot follow. fmt prints a struct in an
// unexported field without calling its methods, and under a verb wrong for
// a pointer (%s, %q) it prints the pointer's target; a func it only ever
// prints as an address. Every type here that holds secret bytes keeps them
// behind one.
type sealed[T any] func() *T

func seal[T any](p *T) sealed[T] { return func() *T { return p } }

func newValue(b []byte) Value { return Value{seal(&b)} }

// Reveal returns a copy of the value's bytes, for a broker to put on the
// wire toward the declared destination and nowhere else.
func (v Value) Reveal() []byte {
	if v.b == nil {
		return nil
	}
	return slices.Clone(*v.b())
}

// Len is the value's length in bytes.
func (v Value) Len() int {
	if v.b == nil {
		return 0
	}
	return len(*v.b())
}

func (Value) String() string                  { return redacted }
func (Value) GoString() string                { return redacted }
func (Value) Format(f fmt.State, _ rune)      { f.Write([]byte(redacted)) }
func (Value) MarshalJSON() ([]byte, error)    { return json.Marshal(redacted) }
func (Value) MarshalText() ([]byte, error)    { return []byte(redacted), nil }
func (Value) LogValue() slog.Value            { return slog.StringValue(redacted) }
func (v *Value) UnmarshalJSON([]byte) error   { return errors.New("custody: a Value cannot be decoded") }
func (v *Value) UnmarshalText(b []byte) error { return v.UnmarshalJSON(b) }

// Custodian holds the resolved secrets. It is safe for concurrent use and
// prints as its secrets' names only.
type Custodian struct {
	names []string
	vals  map[string]Value
	red   *Redactor
}

var _ crossing.Secrets = (*Custodian)(nil)

// Source says where the custodian reads one secret. Exactly one field is
// set (internal/config validates it; the config key is secrets.NAME).
type Source struct {
	// Env is the name of a variable in the trusted side's environment
	// (never the sandbox's). Key: env.
	Env string
	// File is an absolute, clean path to a regular file of the trusted
	// side, read once at start by Load (not a symbolic link, not
	// writable by group or others; trailing newlines dropped). Key:
	// file.
	File string
}

// Load resolves every secret in c: Env from getenv (os.Getenv when nil),
// File by reading the file, which must be a regular file reached without
// following a final symbolic link and not writable by group or others;
// trailing newlines are dropped. Every problem is reported, each as an
// *Error (joined when there are several).
func Load(c map[string]Source, getenv func(string) string) (*Custodian, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cu := &Custodian{vals: map[string]Value{}}
	var errs []error
	for name := range c {
		cu.names = append(cu.names, name)
	}
	slices.Sort(cu.names)
	for _, name := range cu.names {
		s := c[name]
		var (
			v   []byte
			src string
			err error
		)
		switch {
		case s.Env != "" && s.File == "":
			src = "env " + s.Env
			v = []byte(getenv(s.Env))
		case s.File != "" && s.Env == "":
			src = "file " + s.File
			v, err = readFile(s.File)
		default:
			err = errors.New("want exactly one of env or file")
		}
		switch {
		case err != nil:
		case len(v) == 0:
			err = ErrMissing
		case len(v) < MinLen:
			err = fmt.Errorf("%w: %d bytes; want at least %d", ErrTooShort, len(v), MinLen)
		}
		if err != nil {
			errs = append(errs, &Error{Secret: name, Source: src, Err: err})
			continue
		}
		cu.vals[name] = newValue(v)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cu.red = NewRedactor(cu.Values())
	return cu, nil
}

// Secret returns a copy of the named value, or an *Error wrapping
// ErrUnknown.
func (c *Custodian) Secret(name string) ([]byte, error) {
	if c != nil {
		if v, ok := c.vals[name]; ok {
			return v.Reveal(), nil
		}
	}
	return nil, &Error{Secret: name, Err: ErrUnknown}
}

// Values returns a copy of every value, for redaction.
func (c *Custodian) Values() [][]byte {
	if c == nil {
		return nil
	}
	out := make([][]byte, 0, len(c.names))
	for _, n := range c.names {
		out = append(out, c.vals[n].Reveal())
	}
	return out
}

// Names returns the custodied secrets' names, sorted.
func (c *Custodian) Names() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.names)
}

// Redactor returns the redactor for every custodied value.
func (c *Custodian) Redactor() *Redactor {
	if c == nil {
		return NewRedactor(nil)
	}
	return c.red
}

func (c *Custodian) String() string {
	if c == nil {
		return "custodian(nil)"
	}
	return "custodian(" + strings.Join(c.names, ", ") + ")"
}

func (c *Custodian) GoString() string           { return c.String() }
func (c *Custodian) Format(f fmt.State, _ rune) { f.Write([]byte(c.String())) }
func (c *Custodian) LogValue() slog.Value       { return slog.StringValue(c.String()) }

// MarshalJSON encodes the names only: {"secrets":["a","b"]}.
func (c *Custodian) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Secrets []string `json:"secrets"`
	}{c.Names()})
}

// trimNewlines drops trailing line endings, as left by echo or an editor.
func trimNewlines(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
