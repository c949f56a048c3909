package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every *Error: errors.Is(err, ErrInvalid) tells
// a bad configuration from a file that cannot be read.
var ErrInvalid = errors.New("invalid configuration")

// ErrSecretLeak is wrapped by every *LeakError.
var ErrSecretLeak = errors.New("a custodied secret would reach the sandbox")

// Error is one problem in a configuration. The JSON form is what
// `cordon config check --json` prints.
type Error struct {
	// Source is the name given to Parse (the path, for Load).
	Source string `json:"file"`
	// Line is the 1-based line of the offending key or item; 0 if unknown.
	Line int `json:"line"`
	// Column is the 1-based column of the offending key or item (of its
	// nearest present parent for a missing key); 0 if unknown, as for
	// YAML syntax errors, which carry only a line.
	Column int `json:"column"`
	// Field is the offending field's path, e.g. "egress.allow[0].host" or
	// `secrets.anthropic-key`; empty for the file as a whole. Keys that are
	// not plain words are quoted: egress.resolve["api.github.com"].
	Field string `json:"path"`
	// Msg says what is wrong.
	Msg string `json:"message"`
}

// Error reads file:line:column: field: message, leaving out what is
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
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

// maxErrors bounds how many problems one check reports: far more than a
// hand-written file has, few enough that a garbage megabyte does not
// become a megabyte of errors. Past it, one last problem says how many
// more there were.
const maxErrors = 1000

// The shapes the node walk refuses before the strict decoder sees the
// file, because yaml.v3's cost on them is not linear in the file's size
// and a daemon client sends a configuration for root to parse
// (ParseDetached): the decoder compares every key of a mapping with every
// later one and builds one error string per equal pair (a quarter
// megabyte of "k: 1" lines repeated is gigabytes), and each nesting level
// repeats the whole path above it in the index. No valid configuration
// comes near either bound.
const (
	maxDepth       = 64   // mappings and sequences inside one another
	maxMappingKeys = 4096 // keys in one mapping
	maxDupPairs    = maxErrors
)

// refusalLookups counts the comparisons errf makes with refused fields
// (a test bounds them).
var refusalLookups atomic.Int64

// pos is a place in the file, 1-based.
type pos struct{ line, col int }

// index maps the document's field paths to places and collects errors.
type index struct {
	source string
	// paths maps every key and sequence item to its place.
	paths map[string]pos
	// lines maps a line to the path of the block-style key or item on it,
	// for decoder errors that only carry a line; cols to its column.
	lines map[int]string
	cols  map[int]int
	errs  []*Error
	// decoded are the fields the strict decoder refused; the semantic
	// checks say nothing more at or under them (the value there is not
	// what the file says). unplaced: a refusal could not be tied to a
	// field, so the semantic checks are skipped.
	decoded  map[string]bool
	unplaced bool
	// stop is a shape refused before decoding (maxDepth, ...): the one
	// problem reported. dupPairs counts equal key pairs so far.
	stop     *Error
	dupPairs int
	// detached: parse without touching the filesystem (ParseDetached).
	detached bool
}

// newIndex indexes the document; a root that is not a mapping is the one
// problem that stops the check here.
func newIndex(source string, doc *yaml.Node) (*index, *Error) {
	ix := &index{source: source, paths: map[string]pos{}, lines: map[int]string{}, cols: map[int]int{}}
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Source: source, Line: root.Line, Column: root.Column, Msg: "want a mapping of keys such as version, workload, tenant and purpose"}
	}
	ix.paths[""] = pos{root.Line, root.Column}
	ix.walk(root, "", false, 0)
	if ix.stop != nil {
		return nil, ix.stop
	}
	return ix, nil
}

// walk records the line of every key and item under n. Aliases and merge
// keys are refused: what the file says is what is enforced, spelled out.
func (ix *index) walk(n *yaml.Node, at string, flow bool, depth int) {
	if ix.stop != nil {
		return
	}
	flow = flow || n.Style&yaml.FlowStyle != 0
	if depth > maxDepth && (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) {
		ix.stop = &Error{Source: ix.source, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("nested more than %d levels deep", maxDepth)}
		return
	}
	if n.Kind == yaml.MappingNode && !ix.boundedKeys(n) {
		return
	}
	switch n.Kind {
	case yaml.AliasNode:
		ix.add(pos{n.Line, n.Column}, at, "aliases (*%s) are not supported; write the value out", n.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(at, k.Value)
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				ix.add(pos{k.Line, k.Column}, at, "merge keys (<<) are not supported; write the keys out")
				continue
			}
			if _, dup := ix.paths[p]; !dup {
				ix.paths[p] = pos{k.Line, k.Column}
			}
			if !flow {
				ix.lines[k.Line], ix.cols[k.Line] = p, k.Column
			}
			ix.walk(v, p, flow, depth+1)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := at + "[" + strconv.Itoa(i) + "]"
			ix.paths[p] = pos{v.Line, v.Column}
			if !flow {
				ix.lines[v.Line], ix.cols[v.Line] = p, v.Column
			}
			ix.walk(v, p, flow, depth+1)
		}
	}
}

// boundedKeys sets ix.stop when mapping n has more than maxMappingKeys
// keys or brings the file's equal key pairs past maxDupPairs (each is one
// error string of the decoder's).
func (ix *index) boundedKeys(n *yaml.Node) bool {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		key := strconv.Itoa(int(k.Kind)) + ":" + k.Value
		ix.dupPairs += seen[key] // this key equals each earlier one
		seen[key]++
		if ix.dupPairs > maxDupPairs {
			ix.stop = &Error{Source: ix.source, Line: k.Line, Column: k.Column, Msg: fmt.Sprintf("key %q repeated too often (more than %d duplicate key pairs in the file)", k.Value, maxDupPairs)}
			return false
		}
	}
	if len(n.Content)/2 > maxMappingKeys {
		ix.stop = &Error{Source: ix.source, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("a mapping of %d keys; at most %d", len(n.Content)/2, maxMappingKeys)}
		return false
	}
	return true
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

// place returns the place of p, or of its nearest present parent when p
// is absent from the file (a missing required key).
func (ix *index) place(p string) pos {
	for {
		if at, ok := ix.paths[p]; ok {
			return at
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return ix.paths[""]
		}
		p = p[:i]
	}
}

// add records a problem with the field at path p at place at (line 0:
// look it up).
func (ix *index) add(at pos, p, format string, a ...any) {
	if at.line == 0 {
		at = ix.place(p)
	}
	ix.errs = append(ix.errs, &Error{Source: ix.source, Line: at.line, Column: at.col, Field: p, Msg: fmt.Sprintf(format, a...)})
}

// errf records a semantic problem with the field at path p, unless the
// decoder already refused p or a field above it.
func (ix *index) errf(p, format string, a ...any) {
	// p or a field above it: p itself and each prefix of p that ends
	// before a '.' or a '[' — or, when there are fewer refused fields than
	// such prefixes (a long key full of '['), each refused field.
	if len(ix.decoded) <= strings.Count(p, ".")+strings.Count(p, "[") {
		for d := range ix.decoded {
			refusalLookups.Add(1)
			if p == d || strings.HasPrefix(p, d+".") || strings.HasPrefix(p, d+"[") {
				return
			}
		}
	} else {
		for i := 0; i <= len(p); i++ {
			if i < len(p) && p[i] != '.' && p[i] != '[' {
				continue
			}
			refusalLookups.Add(1)
			if ix.decoded[p[:i]] {
				return
			}
		}
	}
	ix.add(pos{}, p, format, a...)
}

// problems returns the collected problems in line and column order.
func (ix *index) problems() []*Error {
	sort.SliceStable(ix.errs, func(i, j int) bool {
		a, b := ix.errs[i], ix.errs[j]
		return a.Line < b.Line || (a.Line == b.Line && a.Column < b.Column)
	})
	if len(ix.errs) > maxErrors {
		more := len(ix.errs) - maxErrors
		ix.errs = append(ix.errs[:maxErrors:maxErrors], &Error{Source: ix.source, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return ix.errs
}

// joinProblems is the error Parse returns for problems: the one *Error,
// or all of them joined, in order.
func joinProblems(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
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

// syntaxError converts a yaml.v3 parse error, which carries a line but
// no column.
func syntaxError(source string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		l, _ := strconv.Atoi(m[1])
		return &Error{Source: source, Line: l, Msg: m[2]}
	}
	return &Error{Source: source, Msg: msg}
}

// decodeError records the strict decoder's errors, which carry only a
// line, as problems with the field on that line. It reports whether the
// decoder got through the document (a *yaml.TypeError: it carries on
// past each refusal, so the rest of raw is filled in).
func (ix *index) decodeError(err error) bool {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		ix.errs = append(ix.errs, syntaxError(ix.source, err))
		return false
	}
	for _, s := range te.Errors {
		m := lineRE.FindStringSubmatch(s)
		if m == nil {
			ix.unplaced = true
			ix.add(pos{}, "", "%s", s)
			continue
		}
		l, _ := strconv.Atoi(m[1])
		msg, field, dup := m[2], ix.lines[l], false
		if u := unknownRE.FindStringSubmatch(msg); u != nil {
			field = ix.fieldOnLine(l, u[1])
			msg = fmt.Sprintf("unknown field %q", u[1])
			if known := knownFields[u[2]]; known != "" {
				msg += "; want one of " + known
			}
		} else if d := dupRE.FindStringSubmatch(msg); d != nil {
			field, dup = ix.fieldOnLine(l, d[1]), true
			msg = fmt.Sprintf("duplicate key %q (first at line %s)", d[1], d[2])
		} else if t := intoTypeRE.FindStringSubmatch(msg); t != nil {
			msg = strings.TrimSuffix(msg, t[0]) + "; want " + describeType(t[1])
			msg = strings.Replace(msg, "cannot unmarshal ", "cannot use ", 1)
			if field == "secrets" || strings.HasPrefix(field, "secrets.") || strings.HasPrefix(field, "secrets[") {
				// Never echo what is under secrets: it may be a pasted value.
				msg = quotedRE.ReplaceAllString(msg, "") + " such as {env: NAME} or {file: /path}"
			}
		}
		at := pos{line: l, col: ix.cols[l]}
		if fp, ok := ix.paths[field]; ok && fp.line == l {
			at.col = fp.col
		}
		ix.refuse(field, dup)
		ix.add(at, field, "%s", msg)
	}
	return true
}

// refuse records that the decoder refused field, so that the semantic
// checks say nothing at or under what it could not decode: the field
// itself (left at its zero value), the whole mapping holding a duplicate
// key (yaml.v3 leaves it undecoded), and the whole list or map holding a
// refused item (yaml.v3 drops it, so later indices shift).
func (ix *index) refuse(field string, dup bool) {
	if dup {
		field = parentPath(field)
	}
	if strings.HasSuffix(field, "]") {
		field = parentPath(field)
	}
	if field == "" {
		ix.unplaced = true
	}
	if ix.decoded == nil {
		ix.decoded = map[string]bool{}
	}
	ix.decoded[field] = true
}

// parentPath returns the path of the mapping or list holding p.
func parentPath(p string) string {
	if strings.HasSuffix(p, `"]`) {
		if i := strings.LastIndex(p, `["`); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexAny(p, ".["); i >= 0 {
		return p[:i]
	}
	return ""
}

// secretDeclared reports whether the file declares the secret name, even
// if its entry was refused (and so is missing from raw): a reference to
// it is then not a further problem.
func (ix *index) secretDeclared(raw *rawConfig, name string) bool {
	if _, ok := raw.Secrets[name]; ok {
		return true
	}
	_, ok := ix.paths[join("secrets", name)]
	return ok
}

// fieldOnLine returns the path of key on line l, preferring the block key
// on that line.
func (ix *index) fieldOnLine(l int, key string) string {
	best := ""
	for p, pl := range ix.paths {
		if pl.line == l && (strings.HasSuffix(p, "."+key) || p == key || strings.HasSuffix(p, "["+strconv.Quote(key)+"]")) {
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
