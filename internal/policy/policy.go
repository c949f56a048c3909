package policy

import (
	"crypto/sha256"
	_ "embed" // the schema
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
	"github.com/cordon-project/cordon/internal/safefile"
)

// Actions, as Cedar action ids: Action::"model.invoke" and so on.
const (
	ActionModelInvoke   = "model.invoke"
	ActionEgressConnect = "egress.connect"
	ActionToolCall      = "tool.call"
	ActionStateRead     = "state.read"
	ActionStateWrite    = "state.write"
	// ActionIngressConnect is a connection from the host into the
	// sandbox through a declared inbound route (resource Route).
	ActionIngressConnect = "ingress.connect"
)

// The annotations cordon reads. Any other annotation is refused at load:
// a policy must not look as if it asked for something the runtime does
// not enforce.
const (
	// AnnotationID names a policy: @id("tools.fs-read").
	AnnotationID = "id"
	// AnnotationApproval on a permit, with the only value "required",
	// makes an allow it determines wait for approval.
	AnnotationApproval = "approval"
	// ApprovalRequired is the value of @approval.
	ApprovalRequired = "required"
	// AnnotationApprovalScope on a permit that requires approval says
	// what one approval covers: ApprovalScopeRequest (the default: one
	// exact crossing, once) or ApprovalScopeSandbox (egress.connect
	// only: every connection to that host and port from the sandbox
	// that asked, for the sandbox's life or until revoked).
	AnnotationApprovalScope = "approval_scope"
	ApprovalScopeRequest    = "request"
	ApprovalScopeSandbox    = "sandbox"
)

// Annotations lists the annotations cordon enforces, with their values
// ("" for a free-form value), for error messages and documentation.
var Annotations = []struct{ Key, Values string }{
	{AnnotationID, "any non-empty id"},
	{AnnotationApproval, `"` + ApprovalRequired + `"`},
	{AnnotationApprovalScope, `"` + ApprovalScopeRequest + `" or "` + ApprovalScopeSandbox + `" (egress.connect only)`},
}

func knownAnnotations() string {
	var b strings.Builder
	for i, a := range Annotations {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "@%s (%s)", a.Key, a.Values)
	}
	return b.String()
}

// MaxFileBytes bounds one policy file.
const MaxFileBytes = 1 << 20

// maxErrors bounds the problems one Load reports.
const maxErrors = 50

//go:embed cordon.cedarschema
var schemaText string

// Schema returns the Cedar schema (human-readable format) every policy is
// validated against.
func Schema() string { return schemaText }

// schemaValidator parses the embedded schema once.
var schemaValidator = sync.OnceValues(func() (*validate.Validator, error) {
	var s schema.Schema
	s.SetFilename("cordon.cedarschema")
	if err := s.UnmarshalCedar([]byte(schemaText)); err != nil {
		return nil, fmt.Errorf("embedded schema: %w", err)
	}
	r, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("embedded schema: %w", err)
	}
	return validate.New(r, validate.WithStrict()), nil
})

// Set is a loaded, validated policy set. It is immutable and safe for
// concurrent use. Load and Default are its only constructors.
type Set struct {
	digest   string
	files    []string
	policies policyList
	byID     map[cedar.PolicyID]*entry
	entities *entityCache
	// readsBudget is set when a policy may read context.budget.
	readsBudget bool
	lastBudget  atomic.Pointer[budgetEntry]
}

// entry is one policy of a Set.
type entry struct {
	id       cedar.PolicyID
	policy   *cedar.Policy
	forbid   bool
	approval bool
	// scope is @approval_scope: "" (one exact crossing) or
	// ApprovalScopeSandbox.
	scope string
}

// policyList is a Set's policies in file order, as cedar.Authorize wants
// them (a cedar.PolicySet is a map: its order would vary).
type policyList []*entry

// All yields the policies in file order.
func (l policyList) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, e := range l {
			if !yield(e.id, e.policy) {
				return
			}
		}
	}
}

// source is one policy file: its name as given and its bytes.
type source struct {
	name string
	data []byte
}

// Load reads, parses and validates the policy files, in order, into one
// Set. Every policy must validate against the schema (Schema) in strict
// mode; ids must be unique across the set. A returned error is a
// *LoadError or several joined, each naming file:line:column where
// cedar-go gives a position.
func Load(files ...string) (*Set, error) {
	if len(files) == 0 {
		return nil, ErrNoFiles
	}
	srcs := make([]source, 0, len(files))
	var errs []error
	for _, f := range files {
		b, err := readFile(f)
		if err != nil {
			errs = append(errs, &LoadError{File: f, Err: err})
			continue
		}
		srcs = append(srcs, source{name: f, data: b})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return build(srcs)
}

// Source is one policy file's name and contents, for policies that
// arrive as bytes (the daemon gets them from the client, never by path).
type Source struct {
	Name string
	Data []byte
}

// DefaultSource is the built-in permit-all policy as a source, to combine
// with others (a host policy directory added to a sandbox without its own
// policy).
func DefaultSource() Source {
	return Source{Name: "cordon.default.cedar", Data: []byte(defaultSource)}
}

// LoadSources is Load for contents already read; the digest is the same
// as Load's for the same base names and bytes.
func LoadSources(srcs ...Source) (*Set, error) {
	if len(srcs) == 0 {
		return nil, ErrNoFiles
	}
	in := make([]source, 0, len(srcs))
	for _, s := range srcs {
		if len(s.Data) > MaxFileBytes {
			return nil, &LoadError{File: s.Name, Err: fmt.Errorf("larger than %d bytes", MaxFileBytes)}
		}
		in = append(in, source{name: s.Name, data: s.Data})
	}
	return build(in)
}

func readFile(name string) ([]byte, error) {
	// Never blocks on a FIFO, never opens a device (safefile.ReadBounded).
	b, err := safefile.ReadBounded(name, MaxFileBytes, true)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return b, nil
}

// defaultSource is the built-in policy of Default.
const defaultSource = `// Built in: used when the configuration names no policy files. It permits
// every crossing, so the configuration's allow-lists decide alone.
@id("cordon.default")
permit (principal, action, resource);
`

var defaultSet = sync.OnceValue(func() *Set {
	s, err := build([]source{{name: "cordon.default.cedar", data: []byte(defaultSource)}})
	if err != nil {
		panic("policy: the built-in default policy is invalid: " + err.Error())
	}
	return s
})

// Default returns the built-in set used when the configuration names no
// policy files: one permit of every crossing (id "cordon.default"), so the
// configuration's allow-lists decide alone. It has its own digest.
func Default() *Set { return defaultSet() }

// Digest returns "sha256:<hex>" over the set's files in order: for each,
// the length of its base name, the name, the length of its contents and
// the contents (lengths as 8-byte big-endian integers). Moving the files
// to another directory keeps the digest; renaming or editing one changes
// it.
func (s *Set) Digest() string { return s.digest }

// ReadsBudget reports whether a policy of the set may read
// context.budget: the caller then reads the budget when the crossing asks.
func (s *Set) ReadsBudget() bool { return s.readsBudget }

// Files returns the names of the set's files, as given to Load.
func (s *Set) Files() []string { return append([]string(nil), s.files...) }

// Len returns the number of policies in the set.
func (s *Set) Len() int { return len(s.policies) }

// Forbids reports whether id is a forbid policy of the set.
func (s *Set) Forbids(id string) bool {
	e, ok := s.byID[cedar.PolicyID(id)]
	return ok && e.forbid
}

// IDs returns the policy ids in file order.
func (s *Set) IDs() []string {
	ids := make([]string, len(s.policies))
	for i, e := range s.policies {
		ids[i] = string(e.id)
	}
	return ids
}

// build parses and validates srcs into a Set.
func build(srcs []source) (*Set, error) {
	v, err := schemaValidator()
	if err != nil {
		return nil, err
	}
	s := &Set{byID: map[cedar.PolicyID]*entry{}, entities: &entityCache{}}
	h := sha256.New()
	var errs []error
	where := map[cedar.PolicyID]cedar.Position{}
	for _, src := range srcs {
		s.files = append(s.files, src.name)
		base := filepath.Base(src.name)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(base)))
		h.Write(n[:])
		h.Write([]byte(base))
		binary.BigEndian.PutUint64(n[:], uint64(len(src.data)))
		h.Write(n[:])
		h.Write(src.data)

		list, err := parse(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, p := range list {
			pos := p.Position()
			lerr := func(id string, err error) *LoadError {
				return &LoadError{File: src.name, Line: pos.Line, Column: pos.Column, Policy: id, Err: err}
			}
			e := &entry{id: cedar.PolicyID(base + ":" + strconv.Itoa(i)), policy: p, forbid: p.Effect() == cedar.Forbid}
			for _, a := range p.AST().Annotations {
				switch a.Key {
				case AnnotationID:
					if a.Value == "" || strings.TrimSpace(string(a.Value)) != string(a.Value) {
						errs = append(errs, lerr(string(e.id), invalidf("@id(%q): want a non-empty id without surrounding spaces", a.Value)))
					}
					e.id = cedar.PolicyID(a.Value)
				case AnnotationApproval:
					switch {
					case a.Value != ApprovalRequired:
						errs = append(errs, lerr(string(e.id), invalidf("@approval(%q): the only value is %q", a.Value, ApprovalRequired)))
					case e.forbid:
						errs = append(errs, lerr(string(e.id), invalidf("@approval on a forbid: only a permit can require approval")))
					}
					e.approval = true
				case AnnotationApprovalScope:
					switch a.Value {
					case ApprovalScopeRequest:
					case ApprovalScopeSandbox:
						e.scope = ApprovalScopeSandbox
					default:
						errs = append(errs, lerr(string(e.id), invalidf("@approval_scope(%q): the values are %q and %q", a.Value, ApprovalScopeRequest, ApprovalScopeSandbox)))
					}
				default:
					errs = append(errs, lerr(string(e.id), invalidf("unknown annotation @%s: cordon does not enforce it, so it is refused; the annotations are %s", a.Key, knownAnnotations())))
				}
			}
			if err := checkScope(p, e); err != nil {
				errs = append(errs, lerr(string(e.id), err))
			}
			if first, dup := where[e.id]; dup {
				errs = append(errs, lerr(string(e.id), invalidf("duplicate policy id (first at %s:%d:%d); give one an @id", first.Filename, first.Line, first.Column)))
				continue
			}
			where[e.id] = pos
			for _, msg := range check(v, p) {
				errs = append(errs, lerr(string(e.id), invalid(msg)))
			}
			if readsUser(p) {
				errs = append(errs, lerr(string(e.id), invalidf("context.user: no crossing carries a user (the gateway knows none), so a policy reading it would not decide as written; it is refused")))
			} else if namesUser(p) {
				errs = append(errs, lerr(string(e.id), invalidf("User: no crossing carries a user (the gateway knows none, and no workload is in a User), so a policy naming one would not decide as written; it is refused")))
			}
			s.policies = append(s.policies, e)
			s.byID[e.id] = e
			s.readsBudget = s.readsBudget || readsBudget(p)
		}
	}
	if len(errs) > 0 {
		if len(errs) > maxErrors {
			more := len(errs) - maxErrors
			errs = append(errs[:maxErrors:maxErrors], fmt.Errorf("and %d more problems", more))
		}
		return nil, errors.Join(errs...)
	}
	s.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// checkScope refuses an @approval_scope the runtime would not honour: on
// a policy that requires no approval, and "sandbox" on a permit that may
// apply to an action other than egress.connect (only an egress
// connection's approval can cover the sandbox's life).
func checkScope(p *cedar.Policy, e *entry) error {
	has := false
	for _, a := range p.AST().Annotations {
		has = has || a.Key == AnnotationApprovalScope
	}
	if !has {
		return nil
	}
	if !e.approval || e.forbid {
		return invalidf("@approval_scope without @approval(%q) on a permit: there is no approval to scope", ApprovalRequired)
	}
	if e.scope != ApprovalScopeSandbox {
		return nil
	}
	egress := types.NewEntityUID("Action", ActionEgressConnect)
	switch sc := (*xast.Policy)(p.AST()).Action.(type) {
	case xast.ScopeTypeEq:
		if sc.Entity == egress {
			return nil
		}
	case xast.ScopeTypeIn:
		if sc.Entity == egress {
			return nil
		}
	case xast.ScopeTypeInSet:
		ok := len(sc.Entities) > 0
		for _, a := range sc.Entities {
			ok = ok && a == egress
		}
		if ok {
			return nil
		}
	}
	return invalidf("@approval_scope(%q) applies to egress.connect only: scope the permit with action == Action::%q", ApprovalScopeSandbox, ActionEgressConnect)
}

// parse parses one file. cedar-go's parser is not ours: a panic in it is
// reported as an invalid file, never a crash.
func parse(src source) (list cedar.PolicyList, err error) {
	defer func() {
		if r := recover(); r != nil {
			list, err = nil, &LoadError{File: src.name, Err: invalidf("the Cedar parser failed: %v", r)}
		}
	}()
	list, err = cedar.NewPolicyListFromBytes(src.name, src.data)
	if err != nil {
		return nil, parseError(src.name, err)
	}
	return list, nil
}

var (
	// cedar-go v1.9.1 reports "parser error: parse error at <input>:L:C "tok": msg"
	// and, from its scanner, "parser error: <input>:L:C: msg".
	parseErrorRE = regexp.MustCompile(`^(?:parser error: )?parse error at <input>:(\d+):(\d+) ("(?:[^"\\]|\\.)*"): (.*)$`)
	scanErrorRE  = regexp.MustCompile(`^(?:parser error: )?<input>:(\d+):(\d+): (.*)$`)
)

// parseError converts a cedar-go parse error to a *LoadError with the
// position it names.
func parseError(file string, err error) error {
	msg := err.Error()
	le := &LoadError{File: file}
	if m := parseErrorRE.FindStringSubmatch(msg); m != nil {
		le.Line, _ = strconv.Atoi(m[1])
		le.Column, _ = strconv.Atoi(m[2])
		if m[3] == `""` {
			le.Err = invalidf("syntax error at end of file: %s", m[4])
		} else {
			le.Err = invalidf("syntax error at %s: %s", m[3], m[4])
		}
		return le
	}
	if m := scanErrorRE.FindStringSubmatch(msg); m != nil {
		le.Line, _ = strconv.Atoi(m[1])
		le.Column, _ = strconv.Atoi(m[2])
		le.Err = invalidf("syntax error: %s", m[3])
		return le
	}
	le.Err = invalid(strings.TrimPrefix(msg, "parser error: "))
	return le
}

// check validates p against the schema and returns the validator's
// messages. The validator is experimental (x/exp): a panic in it is a
// refusal, never a crash.
func check(v *validate.Validator, p *cedar.Policy) (msgs []string) {
	defer func() {
		if r := recover(); r != nil {
			msgs = []string{fmt.Sprintf("the Cedar validator failed: %v", r)}
		}
	}()
	err := v.Policy("", (*xast.Policy)(p.AST()))
	if err == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, e := range flatten(err) {
		if m := e.Error(); !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	// The validator checks each action's environment in map order.
	slices.Sort(msgs)
	return msgs
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []error
		for _, e := range j.Unwrap() {
			all = append(all, flatten(e)...)
		}
		return all
	}
	return []error{err}
}

// readsBudget reports whether p may read context.budget: it names it, or
// uses the context other than through one of its other attributes
// (context.port, context has user). A false answer lets Decide skip
// building the budget record.
func readsBudget(p *cedar.Policy) bool {
	contexts, elsewhere := 0, 0
	isContext := func(n xast.IsNode) bool {
		v, ok := n.(xast.NodeTypeVariable)
		return ok && v.Name == "context"
	}
	for _, c := range (*xast.Policy)(p.AST()).Conditions {
		xast.Inspect(xast.NewNode(c.Body), func(n xast.IsNode) bool {
			switch n := n.(type) {
			case xast.NodeTypeVariable:
				if n.Name == "context" {
					contexts++
				}
			case xast.NodeTypeAccess:
				if isContext(n.Arg) && n.Value != "budget" {
					elsewhere++
				}
			case xast.NodeTypeHas:
				if isContext(n.Arg) && n.Value != "budget" {
					elsewhere++
				}
			}
			return true
		})
	}
	return contexts > elsewhere
}

// readsUser reports whether p reads context.user (or asks whether it is
// there). The schema declares it for a gateway that knows the user a
// workload acts for; none does, so every crossing is decided without it,
// and a policy that reads it — a forbid on a user that never fires, a
// permit that never matches — is refused rather than kept inert.
func readsUser(p *cedar.Policy) bool {
	found := false
	isContext := func(n xast.IsNode) bool {
		v, ok := n.(xast.NodeTypeVariable)
		return ok && v.Name == "context"
	}
	for _, c := range (*xast.Policy)(p.AST()).Conditions {
		xast.Inspect(xast.NewNode(c.Body), func(n xast.IsNode) bool {
			switch n := n.(type) {
			case xast.NodeTypeAccess:
				found = found || isContext(n.Arg) && n.Value == "user"
			case xast.NodeTypeHas:
				found = found || isContext(n.Arg) && n.Value == "user"
			}
			return !found
		})
	}
	return found
}

// namesUser reports whether p names the User entity type in a condition
// (an entity User::"u", `is User`): no principal or resource is ever a
// User or in one, so such a policy never decides as it reads ("forbid
// when principal in User::\"mallory\"" never fires). The scope is the
// validator's: it refuses a User there.
func namesUser(p *cedar.Policy) bool {
	found := false
	for _, c := range (*xast.Policy)(p.AST()).Conditions {
		xast.Inspect(xast.NewNode(c.Body), func(n xast.IsNode) bool {
			switch n := n.(type) {
			case xast.NodeValue:
				found = found || valueNamesUser(n.Value)
			case xast.NodeTypeIs:
				found = found || n.EntityType == userType
			case xast.NodeTypeIsIn:
				found = found || n.EntityType == userType
			}
			return !found
		})
	}
	return found
}

const userType = types.EntityType("User")

func valueNamesUser(v types.Value) bool {
	switch v := v.(type) {
	case types.EntityUID:
		return v.Type == userType
	case types.Set:
		found := false
		v.Iterate(func(x types.Value) bool {
			found = found || valueNamesUser(x)
			return !found
		})
		return found
	case types.Record:
		found := false
		v.Iterate(func(_ types.String, x types.Value) bool {
			found = found || valueNamesUser(x)
			return !found
		})
		return found
	}
	return false
}
