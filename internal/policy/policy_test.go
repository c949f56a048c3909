package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
)

// writeFiles writes name→contents into a new directory and returns the
// paths in the order given.
func writeFiles(t *testing.T, files ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := 0; i+1 < len(files); i += 2 {
		p := filepath.Join(dir, files[i])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// loadString loads src as one file named p.cedar.
func loadString(t *testing.T, src string) (*Set, error) {
	t.Helper()
	return Load(writeFiles(t, "p.cedar", src)...)
}

// loadErrors returns the *LoadErrors in err.
func loadErrors(err error) []*LoadError {
	var out []*LoadError
	for _, e := range flatten(err) {
		var le *LoadError
		if errors.As(e, &le) {
			out = append(out, le)
		}
	}
	return out
}

func TestSchema(t *testing.T) {
	var s schema.Schema
	if err := s.UnmarshalCedar([]byte(Schema())); err != nil {
		t.Fatalf("UnmarshalCedar(Schema()) = %v", err)
	}
	r, err := s.Resolve()
	if err != nil {
		t.Fatalf("Resolve = %v", err)
	}
	for a, rt := range resourceTypes {
		act, ok := r.Actions[types.NewEntityUID("Action", types.String(a))]
		if !ok {
			t.Errorf("schema has no action %q", a)
			continue
		}
		if !slices.Equal(act.AppliesTo.Principals, []types.EntityType{"Workload"}) || !slices.Equal(act.AppliesTo.Resources, []types.EntityType{rt}) {
			t.Errorf("action %q applies to %v, %v; want Workload, %s", a, act.AppliesTo.Principals, act.AppliesTo.Resources, rt)
		}
	}
	if len(r.Actions) != len(resourceTypes) {
		t.Errorf("schema has %d actions, want %d", len(r.Actions), len(resourceTypes))
	}
	if _, err := schemaValidator(); err != nil {
		t.Fatalf("schemaValidator() = %v", err)
	}
}

// TestValidatorAccepts pins the verdicts of cedar-go's experimental
// validator on policies that must load.
func TestValidatorAccepts(t *testing.T) {
	for _, src := range []string{
		`permit (principal, action, resource);`,
		`forbid (principal, action, resource) unless { context.purpose == "coding" };`,
		`permit (principal == Workload::"demo", action == Action::"model.invoke", resource) when { resource.name like "claude-*" };`,
		`permit (principal in Tenant::"acme", action == Action::"egress.connect", resource == Host::"api.github.com") when { context.port == 443 };`,
		`permit (principal, action == Action::"tool.call", resource in Server::"fs") when { resource.tool == "read_file" && resource.server == "fs" && context.argument_digest like "sha256:*" };`,
		`permit (principal, action, resource is Tool) when { resource.server == "fs" };`,
		`permit (principal, action in [Action::"state.read", Action::"state.write"], resource is State) when { resource.name == "notes" };`,
		`forbid (principal, action, resource) when { context.budget.limits.requests > 0 && context.budget.used.requests >= context.budget.limits.requests };`,
		`forbid (principal, action == Action::"model.invoke", resource) when { context.budget.streams > 4 || context.budget.used.output_tokens * 2 > context.budget.limits.output_tokens };`,
		`permit (principal, action, resource) when { principal.name like "ci-*" && resource.name != "" };`,
		`@id("a") @approval("required") permit (principal, action == Action::"tool.call", resource);`,
		`@approval("required") @approval_scope("request") permit (principal, action == Action::"model.invoke", resource);`,
		`@approval("required") @approval_scope("sandbox") permit (principal, action == Action::"egress.connect", resource == Host::"api.github.com");`,
		`@approval("required") @approval_scope("sandbox") permit (principal, action in [Action::"egress.connect"], resource);`,
		`// only a comment`,
		``,
	} {
		if _, err := loadString(t, src); err != nil {
			t.Errorf("Load(%q) = %v, want nil", src, err)
		}
	}
}

// TestValidatorRejects pins each kind of refusal, with its message and
// position.
func TestValidatorRejects(t *testing.T) {
	tests := []struct {
		name, src string
		line, col int
		want      string // in one of the errors
	}{
		{"string compared to long", `permit (principal, action, resource) when { context.port == "443" };`, 1, 1,
			"the types Long and String are not compatible"},
		{"long where bool", `permit (principal, action, resource) when { 1 };`, 1, 1,
			"expected Bool but saw Long"},
		{"arithmetic on a string", `permit (principal, action, resource) when { context.purpose + 1 > 2 };`, 1, 1,
			"String"},
		{"like on a long", `permit (principal, action, resource) when { context.port like "44*" };`, 1, 1,
			"Long"},
		{"unknown principal type", `permit (principal == Agent::"x", action, resource);`, 1, 1,
			"unrecognized entity type `Agent`"},
		{"unknown resource type", `permit (principal, action, resource is File);`, 1, 1,
			"unrecognized entity type `File`"},
		{"unknown entity type in condition", `permit (principal, action, resource) when { principal in Org::"acme" };`, 1, 1,
			"Org"},
		{"unknown principal attribute", `permit (principal, action, resource) when { principal.team == "x" };`, 1, 1,
			"attribute `team` on entity type `Workload` not found"},
		{"attribute of another resource type", `permit (principal, action, resource) when { resource.server == "fs" };`, 1, 1,
			"attribute `server` on entity type `Model` not found"},
		{"unknown context attribute", `permit (principal, action, resource) when { context.model == "x" };`, 1, 1,
			"attribute `model` in context for Action::\"model.invoke\" not found"},
		{"unknown action", `permit (principal, action == Action::"model.call", resource);`, 1, 1,
			"unrecognized action `Action::\"model.call\"`"},
		{"action on the wrong resource type", `permit (principal, action == Action::"model.invoke", resource is Tool);`, 1, 1,
			"unable to find an applicable action"},
		{"optional attribute without has", `permit (principal, action, resource) when { context.user.name == "ada" };`, 1, 1,
			"unable to guarantee safety of access to optional attribute `user`"},
		{"bad extension literal", `permit (principal, action, resource) when { decimal("1.2.3") == decimal("1.0") };`, 1, 1,
			"failed to parse as a decimal value"},
		{"error on a later line", "permit (principal, action, resource);\n\n@id(\"second\")\nforbid (principal, action, resource)\n  when { context.port == \"x\" };", 3, 1,
			"not compatible"},
		{"syntax error", "permit (principal, action, resource);\nforbid (principal, action, resource) when { context.port == };", 2, 62,
			"syntax error at \";\": invalid primary"},
		{"unterminated", "permit (principal, action, resource)\n  when { context.port ==\n", 3, 1,
			"syntax error at end of file"},
		{"unterminated string", `permit (principal, action, resource) when { context.purpose == "x };`, 1, 64,
			"literal not terminated"},
		{"approval on a forbid", `@approval("required") forbid (principal, action, resource);`, 1, 1,
			"only a permit can require approval"},
		{"approval value", `@approval("yes") permit (principal, action, resource);`, 1, 1,
			`@approval("yes"): the only value is "required"`},
		{"context.user", `permit (principal, action, resource) when { context has user && context.user in Tenant::"acme" };`, 1, 1,
			"context.user: no crossing carries a user"},
		{"context.user in a forbid", `forbid (principal, action, resource) when { context has user && context.user.name == "mallory" };`, 1, 1,
			"context.user: no crossing carries a user"},
		{"a User in a forbid", `forbid (principal, action, resource) when { principal in User::"mallory" };`, 1, 1,
			"User: no crossing carries a user"},
		{"a User literal", `forbid (principal, action, resource) when { User::"mallory" in Tenant::"acme" };`, 1, 1,
			"User: no crossing carries a user"},
		{"is User", `forbid (principal, action, resource) when { principal is User };`, 1, 1,
			"User: no crossing carries a user"},
		{"unknown annotation", `@id("a") @advice("x") permit (principal, action, resource);`, 1, 1,
			"unknown annotation @advice: cordon does not enforce it, so it is refused; the annotations are @id"},
		{"misspelt approval", `@approvals("required") permit (principal, action, resource);`, 1, 1,
			"unknown annotation @approvals"},
		{"approval scope value", `@approval("required") @approval_scope("forever") permit (principal, action == Action::"egress.connect", resource);`, 1, 1,
			`@approval_scope("forever"): the values are "request" and "sandbox"`},
		{"approval scope without approval", `@approval_scope("sandbox") permit (principal, action == Action::"egress.connect", resource);`, 1, 1,
			"@approval_scope without @approval"},
		{"approval scope on a forbid", `@approval_scope("request") forbid (principal, action, resource);`, 1, 1,
			"@approval_scope without @approval"},
		{"sandbox scope on every action", `@approval("required") @approval_scope("sandbox") permit (principal, action, resource);`, 1, 1,
			`@approval_scope("sandbox") applies to egress.connect only`},
		{"sandbox scope on a model call", `@approval("required") @approval_scope("sandbox") permit (principal, action == Action::"model.invoke", resource);`, 1, 1,
			`@approval_scope("sandbox") applies to egress.connect only`},
		{"sandbox scope on a mixed set", `@approval("required") @approval_scope("sandbox") permit (principal, action in [Action::"egress.connect", Action::"tool.call"], resource);`, 1, 1,
			`@approval_scope("sandbox") applies to egress.connect only`},
		{"empty id", `@id("") permit (principal, action, resource);`, 1, 1,
			"want a non-empty id"},
		{"duplicate id", "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);", 2, 1,
			"duplicate policy id"},
		{"id clashing with a default id", "@id(\"p.cedar:1\") permit (principal, action, resource);\npermit (principal, action, resource);", 2, 1,
			"duplicate policy id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := loadString(t, tt.src)
			if err == nil {
				t.Fatalf("Load(%q) = %v, nil; want an error containing %q", tt.src, s.IDs(), tt.want)
			}
			if s != nil || !errors.Is(err, ErrInvalid) {
				t.Errorf("Load(%q) = %v, %v; want nil and an ErrInvalid", tt.src, s, err)
			}
			les := loadErrors(err)
			if len(les) == 0 {
				t.Fatalf("Load(%q) = %v; want *LoadError", tt.src, err)
			}
			le := les[0]
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%q) = %v; want %q", tt.src, err, tt.want)
			}
			if filepath.Base(le.File) != "p.cedar" || le.Line != tt.line || le.Column != tt.col {
				t.Errorf("Load(%q) at %s:%d:%d; want p.cedar:%d:%d", tt.src, le.File, le.Line, le.Column, tt.line, tt.col)
			}
			if !strings.HasPrefix(le.Error(), le.File+":") {
				t.Errorf("Error() = %q; want it to start with the file", le.Error())
			}
		})
	}
}

func TestLoadErrorNamesPolicy(t *testing.T) {
	src := "@id(\"ok\")\npermit (principal, action, resource);\n\n// second\npermit (principal, action, resource)\n  when { context.port == \"x\" };\n"
	_, err := loadString(t, src)
	les := loadErrors(err)
	if len(les) != 1 {
		t.Fatalf("Load = %v; want one *LoadError", err)
	}
	if le := les[0]; le.Policy != "p.cedar:1" || le.Line != 5 {
		t.Errorf("LoadError = %+v; want policy p.cedar:1 at line 5", le)
	}
	want := ":5:1: policy p.cedar:1: the types Long and String are not compatible"
	if !strings.HasSuffix(les[0].Error(), want) {
		t.Errorf("Error() = %q; want suffix %q", les[0].Error(), want)
	}
}

func TestLoadAllErrors(t *testing.T) {
	paths := writeFiles(t,
		"a.cedar", "permit (principal, action, resource) when { 1 };",
		"b.cedar", "permit (principal, action == Action::\"nope\", resource);",
	)
	_, err := Load(paths...)
	les := loadErrors(err)
	if len(les) < 2 || filepath.Base(les[0].File) != "a.cedar" || filepath.Base(les[len(les)-1].File) != "b.cedar" {
		t.Errorf("Load = %v; want errors from a.cedar then b.cedar", err)
	}
}

func TestLoadIO(t *testing.T) {
	if _, err := Load(); !errors.Is(err, ErrNoFiles) {
		t.Errorf("Load() = %v; want ErrNoFiles", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.cedar")
	_, err := Load(missing)
	var le *LoadError
	if !errors.As(err, &le) || le.File != missing || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) = %v; want a *LoadError wrapping fs.ErrNotExist, not ErrInvalid", err)
	}
	big := writeFiles(t, "big.cedar", strings.Repeat("/", MaxFileBytes+1))
	if _, err := Load(big...); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v; want larger than", err)
	}
}

func TestIDs(t *testing.T) {
	paths := writeFiles(t,
		"one.cedar", "permit (principal, action, resource);\n@id(\"named\") permit (principal, action, resource);\npermit (principal, action, resource);",
		"sub/two.cedar", "forbid (principal, action, resource) when { context.port == 1 };",
	)
	s, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"one.cedar:0", "named", "one.cedar:2", "two.cedar:0"}
	if got := s.IDs(); !slices.Equal(got, want) {
		t.Errorf("IDs() = %q, want %q", got, want)
	}
	if s.Len() != 4 || !slices.Equal(s.Files(), paths) {
		t.Errorf("Len() = %d, Files() = %v", s.Len(), s.Files())
	}
	// The same base name twice gives the same default ids: refused.
	paths = writeFiles(t, "a/p.cedar", "permit (principal, action, resource);", "b/p.cedar", "permit (principal, action, resource);")
	if _, err := Load(paths...); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "duplicate policy id") {
		t.Errorf("Load(a/p.cedar, b/p.cedar) = %v; want duplicate policy id", err)
	}
}

func TestDigest(t *testing.T) {
	const a, b = "permit (principal, action, resource);\n", "forbid (principal, action, resource) when { context.port == 22 };\n"
	load := func(files ...string) string {
		t.Helper()
		s, err := Load(writeFiles(t, files...)...)
		if err != nil {
			t.Fatal(err)
		}
		if d := s.Digest(); !strings.HasPrefix(d, "sha256:") || len(d) != 7+64 {
			t.Fatalf("Digest() = %q", d)
		}
		return s.Digest()
	}
	base := load("a.cedar", a, "b.cedar", b)
	same := []struct {
		name  string
		files []string
	}{
		{"reloaded from another directory", []string{"a.cedar", a, "b.cedar", b}},
		{"in a subdirectory", []string{"x/a.cedar", a, "y/b.cedar", b}},
	}
	for _, tt := range same {
		if got := load(tt.files...); got != base {
			t.Errorf("%s: Digest() = %s, want %s", tt.name, got, base)
		}
	}
	differ := []struct {
		name  string
		files []string
	}{
		{"a file edited", []string{"a.cedar", a + " ", "b.cedar", b}},
		{"a file renamed", []string{"a2.cedar", a, "b.cedar", b}},
		{"files reordered", []string{"b.cedar", b, "a.cedar", a}},
		{"contents moved between files", []string{"a.cedar", a + b, "b.cedar", ""}},
		{"a file dropped", []string{"a.cedar", a}},
	}
	for _, tt := range differ {
		if got := load(tt.files...); got == base {
			t.Errorf("%s: Digest() = %s, want a different digest", tt.name, got)
		}
	}
	if d := Default().Digest(); d == base || d != Default().Digest() || !strings.HasPrefix(d, "sha256:") {
		t.Errorf("Default().Digest() = %s", d)
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/policy/*.cedar")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("Load(%s) = %v", f, err)
		}
	}
	if _, err := Load(files...); err != nil {
		t.Errorf("Load(%v) = %v", files, err)
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
