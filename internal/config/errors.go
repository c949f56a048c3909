package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every *Error: errors.Is(err, ErrInvalid) tells
// a bad configuration from a file that cannot be read.
var ErrInvalid = errors.New("invalid configuration")

// ErrSecretLeak is wrapped by every *LeakError.
var ErrSecretLeak = errors.New("a custodied secret would reach the sandbox")

// Error is one problem in a configuration.
type Error struct {
	// Source is the name given to Parse (the path, for Load).
	Source string
	// Line is the 1-based line of the offending key or item; 0 if unknown.
	Line int
	// Field is the offending field's path, e.g. "egress.allow[0].host" or
	// `secrets.anthropic-key`; empty for the file as a whole. Keys that are
	// not plain words are quoted: egress.resolve["api.github.com"].
	Field string
	// Msg says what is wrong.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// LeakError is a secret that CheckLeaks found would be visible inside the
// sandbox. It never carries the value.
type LeakError struct {
	// Secret is the secret's name.
	Secret string
	// EnvKey is the sandbox environment variable carrying the value, if
	// that is the leak.
	EnvKey string
	// Path is the secret's file when the file itself is visible.
	Path string
}

func (e *LeakError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("secret %s: its file %s is visible inside the sandbox; move it out of every bind", e.Secret, e.Path)
	}
	return fmt.Sprintf("secret %s: the sandbox environment variable %s carries its value; let the broker inject it instead", e.Secret, e.EnvKey)
}

// Unwrap returns ErrSecretLeak.
func (e *LeakError) Unwrap() error { return ErrSecretLeak }

// maxErrors bounds how many problems one Parse reports.
const maxErrors = 20

// index maps the document's field paths to lines and collects errors.
type index struct {
	source string
	// paths maps every key and sequence item to its line.
	paths map[string]int
	// lines maps a line to the path of the block-style key or item on it,
	// for decoder errors that only carry a line.
	lines map[int]string
	errs  []*Error
	// detached: parse without touching the filesystem (ParseDetached).
	detached bool
}

func newIndex(source string, doc *yaml.Node) (*index, error) {
	ix := &index{source: source, paths: map[string]int{}, lines: map[int]string{}}
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Source: source, Line: root.Line, Msg: "want a mapping of keys such as version, workload, tenant and purpose"}
	}
	ix.paths[""] = root.Line
	ix.walk(root, "", false)
	return ix, ix.err()
}

// walk records the line of every key and item under n. Aliases and merge
// keys are refused: what the file says is what is enforced, spelled out.
func (ix *index) walk(n *yaml.Node, at string, flow bool) {
	flow = flow || n.Style&yaml.FlowStyle != 0
	switch n.Kind {
	case yaml.AliasNode:
		ix.add(n.Line, at, "aliases (*%s) are not supported; write the value out", n.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(at, k.Value)
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				ix.add(k.Line, at, "merge keys (<<) are not supported; write the keys out")
				continue
			}
			if _, dup := ix.paths[p]; !dup {
				ix.paths[p] = k.Line
			}
			if !flow {
				ix.lines[k.Line] = p
			}
			ix.walk(v, p, flow)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := at + "[" + strconv.Itoa(i) + "]"
			ix.paths[p] = v.Line
			if !flow {
				ix.lines[v.Line] = p
			}
			ix.walk(v, p, flow)
		}
	}
}

// join appends key to path; keys that are not plain words are quoted.
func join(at, key string) string {
	if !plainKey.MatchString(key) {
		return at + "[" + strconv.Quote(key) + "]"
	}
	if at == "" {
		return key
	}
	return at + "." + key
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// line returns the line of p, or of its nearest present parent when p is
// absent from the file (a missing required key).
func (ix *index) line(p string) int {
	for {
		if l, ok := ix.paths[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return ix.paths[""]
		}
		p = p[:i]
	}
}

// add records a problem with the field at path p on line l (0: look it up).
func (ix *index) add(l int, p, format string, a ...any) {
	if l == 0 {
		l = ix.line(p)
	}
	ix.errs = append(ix.errs, &Error{Source: ix.source, Line: l, Field: p, Msg: fmt.Sprintf(format, a...)})
}

// errf records a problem with the field at path p.
func (ix *index) errf(p, format string, a ...any) { ix.add(0, p, format, a...) }

// err returns the collected problems in line order, or nil.
func (ix *index) err() error {
	if len(ix.errs) == 0 {
		return nil
	}
	sort.SliceStable(ix.errs, func(i, j int) bool { return ix.errs[i].Line < ix.errs[j].Line })
	errs := ix.errs
	if len(errs) > maxErrors {
		errs = append(errs[:maxErrors:maxErrors], &Error{Source: ix.source, Msg: fmt.Sprintf("and %d more problems", len(ix.errs)-maxErrors)})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

var (
	lineRE     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unknownRE  = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	dupRE      = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	intoTypeRE = regexp.MustCompile(` into (\S+)$`)
	quotedRE   = regexp.MustCompile(" `.*`")
)

// syntaxError converts a yaml.v3 parse error.
func syntaxError(source string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		l, _ := strconv.Atoi(m[1])
		return &Error{Source: source, Line: l, Msg: m[2]}
	}
	return &Error{Source: source, Msg: msg}
}

// decodeError converts the strict decoder's errors, which carry only a
// line, to *Errors with the field on that line.
func (ix *index) decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return syntaxError(ix.source, err)
	}
	for _, s := range te.Errors {
		m := lineRE.FindStringSubmatch(s)
		if m == nil {
			ix.add(0, "", "%s", s)
			continue
		}
		l, _ := strconv.Atoi(m[1])
		msg, field := m[2], ix.lines[l]
		if u := unknownRE.FindStringSubmatch(msg); u != nil {
			field = ix.fieldOnLine(l, u[1])
			msg = fmt.Sprintf("unknown field %q", u[1])
			if known := knownFields[u[2]]; known != "" {
				msg += "; want one of " + known
			}
		} else if d := dupRE.FindStringSubmatch(msg); d != nil {
			field = ix.fieldOnLine(l, d[1])
			msg = fmt.Sprintf("duplicate key %q (first at line %s)", d[1], d[2])
		} else if t := intoTypeRE.FindStringSubmatch(msg); t != nil {
			msg = strings.TrimSuffix(msg, t[0]) + "; want " + describeType(t[1])
			msg = strings.Replace(msg, "cannot unmarshal ", "cannot use ", 1)
			if field == "secrets" || strings.HasPrefix(field, "secrets.") || strings.HasPrefix(field, "secrets[") {
				// Never echo what is under secrets: it may be a pasted value.
				msg = quotedRE.ReplaceAllString(msg, "") + " such as {env: NAME} or {file: /path}"
			}
		}
		ix.add(l, field, "%s", msg)
	}
	return ix.err()
}

// fieldOnLine returns the path of key on line l, preferring the block key
// on that line.
func (ix *index) fieldOnLine(l int, key string) string {
	best := ""
	for p, pl := range ix.paths {
		if pl == l && (strings.HasSuffix(p, "."+key) || p == key || strings.HasSuffix(p, "["+strconv.Quote(key)+"]")) {
			if best == "" || len(p) < len(best) || (len(p) == len(best) && p < best) {
				best = p
			}
		}
	}
	if best == "" {
		return ix.lines[l]
	}
	return best
}

func describeType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "config.raw"):
		return "a mapping"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"):
		return "an integer"
	}
	return goType
}

// knownFields maps each raw type's name, as the decoder prints it, to its
// keys, for "unknown field" messages.
var knownFields = func() map[string]string {
	m := map[string]string{}
	for _, v := range []any{rawConfig{}, rawEgress{}, rawRule{}, rawModel{}, rawBudgets{}, rawLimits{}, rawSecret{}} {
		t := reflect.TypeOf(v)
		var keys []string
		for i := 0; i < t.NumField(); i++ {
			if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" {
				keys = append(keys, k)
			}
		}
		m[t.String()] = strings.Join(keys, ", ")
	}
	return m
}()
