package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCheckListsEveryProblem checks that one check reports every kind of
// problem at once — a schema version, an unknown key, a type error, range
// and semantic errors, a duplicate name, a reference to an undeclared
// secret — each at its line and column, in order, and that the loader's
// error is exactly that list.
func TestCheckListsEveryProblem(t *testing.T) {
	const src = "testdata/check/every-kind.yaml"
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`1:1: version: is "cordon/v2"; want "cordon/v1"`,
		`5:1: egres: unknown field "egres"; want one of version, workload, tenant, purpose, egress, models, budgets, limits, secrets, tools, approvals, state, policy, crossings, ingress, telemetry`,
		`11:7: egress.allow[1].host: "10.0.0.1" is an IP address; name the host (use egress.resolve to pin its address)`,
		`14:11: egress.allow[1].ports[1]: 70000 is not a port; want 1–65535`,
		`16:3: budgets.requests: want an integer, not "1.5"`,
		`17:3: budgets.window: "3600": want a duration such as 24h, 90m or 7d`,
		`23:5: models[0].credential: names no secret declared under secrets (declared: k)`,
		`25:5: models[1].name: model upstream "m" is declared twice`,
		`26:5: models[1].api: is "cohere"; want "anthropic", "openai" or "gemini"`,
	}
	var got []string
	for _, e := range Check(b, src) {
		got = append(got, strings.TrimPrefix(e.Error(), src+":"))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Check(%s) (-want +got):\n%s", src, d)
	}
	_, perr := Load(src)
	var lines []string
	for _, w := range want {
		lines = append(lines, src+":"+w)
	}
	if perr == nil || perr.Error() != strings.Join(lines, "\n") || !errors.Is(perr, ErrInvalid) {
		t.Errorf("Load(%s) = %v\nwant exactly the problems Check lists", src, perr)
	}
}

// TestCheckRefusedFieldsSayNoMore checks that a field the decoder refused
// is not reported again by the semantic checks (the value they would see
// is not the file's): a refused secret is still declared, a refused list
// item hides the shifted list, a duplicate key hides its mapping.
func TestCheckRefusedFieldsSayNoMore(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"refused-secret", []string{"6:3: secrets.k: cannot use !!str; want a mapping such as {env: NAME} or {file: /path}"}},
		{"list-item", []string{`9:11: egress.allow[0].ports[0]: want an integer, not "443"`}},
		{"duplicate-key", []string{`5:1: tenant: duplicate key "tenant" (first at line 3)`}},
		{"syntax", []string{"3: mapping values are not allowed in this context"}},
	} {
		src := "testdata/check/" + tc.file + ".yaml"
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range Check(b, src) {
			got = append(got, strings.TrimPrefix(e.Error(), src+":"))
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("Check(%s) (-want +got):\n%s", src, d)
		}
	}
}

// checkSeeds are the files FuzzConfigCheck starts from: every example
// configuration, every agent preset's configuration, and the problem
// files under testdata/check.
func checkSeeds(t testing.TB) []string {
	var files []string
	for _, g := range []string{"../../examples/*.yaml", "../agent/configs/*.yaml", "testdata/check/*.yaml"} {
		m, err := filepath.Glob(g)
		if err != nil || len(m) == 0 {
			t.Fatalf("no seeds at %s (%v)", g, err)
		}
		files = append(files, m...)
	}
	return files
}

// TestCheckAgreesWithLoad is the cross-check on every seed: the loader
// accepts a file exactly when Check reports no problem, and the problems
// are the loader's error. The examples and presets must load (the
// positive control: a checker that refused everything would fail here);
// the testdata/check files must not.
func TestCheckAgreesWithLoad(t *testing.T) {
	for _, f := range checkSeeds(t) {
		c, err := Load(f)
		probs, rerr := CheckFile(f)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if (err == nil) != (len(probs) == 0) {
			t.Errorf("%s: Load error %v but Check lists %d problems", f, err, len(probs))
			continue
		}
		if err != nil && err.Error() != joinProblems(probs).Error() {
			t.Errorf("%s: Load = %v\nCheck = %v", f, err, joinProblems(probs))
		}
		bad := strings.HasPrefix(f, "testdata/check/")
		if bad != (c == nil) {
			t.Errorf("%s: Load = %v, %v; want it to load: %v", f, c != nil, err, !bad)
		}
	}
}

// FuzzConfigCheck checks that Check never panics, that every problem
// names the file and a place inside it, and that for any input the loader
// either accepts it with no problem listed or refuses it with at least
// one — the same list.
func FuzzConfigCheck(f *testing.F) {
	for _, s := range checkSeeds(f) {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		probs := Check(b, "fuzz.yaml")
		if c, err := Parse(b, "fuzz.yaml"); (err == nil) != (len(probs) == 0) || (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v but Check lists %d problems", c != nil, err, len(probs))
		}
		// The daemon's path: the same checker, without the filesystem.
		_, dprobs := check(b, "fuzz.yaml", true)
		if c, err := ParseDetached(b, "fuzz.yaml"); (err == nil) != (len(dprobs) == 0) || (c == nil) == (err == nil) {
			t.Fatalf("ParseDetached = %v, %v but the check lists %d problems", c != nil, err, len(dprobs))
		}
		// YAML breaks lines at \n, \r and three Unicode breaks; a syntax
		// error at the end of a file may name the line after the last.
		lines := 2
		for _, r := range string(b) {
			if r == '\n' || r == '\r' || r == '\u0085' || r == '\u2028' || r == '\u2029' {
				lines++
			}
		}
		for _, e := range probs {
			if e.Source != "fuzz.yaml" || e.Msg == "" || e.Line < 0 || e.Line > lines || e.Column < 0 || (e.Line == 0 && e.Column != 0) {
				t.Fatalf("problem %+v (file of %d lines)", *e, lines)
			}
		}
	})
}
