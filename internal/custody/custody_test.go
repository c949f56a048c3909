package custody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	envValue  = "sk-ant-env-0123456789"
	fileValue = "sk-file-abcdefghij"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeSecret(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := writeSecret(t, dir, "key", fileValue+"\r\n\n", 0o600)
	c, err := Load(map[string]Source{
		"from-env":  {Env: "ANTHROPIC_API_KEY"},
		"from-file": {File: file},
	}, env(map[string]string{"ANTHROPIC_API_KEY": envValue}))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	for name, want := range map[string]string{"from-env": envValue, "from-file": fileValue} {
		got, err := c.Secret(name)
		if err != nil || string(got) != want {
			t.Errorf("Secret(%q) = %q, %v; want %q", name, got, err, want)
		}
		got[0] = 'X' // a copy: the custodian keeps its value
		if again, _ := c.Secret(name); string(again) != want {
			t.Errorf("Secret(%q) returned the custodian's own slice", name)
		}
	}
	if _, err := c.Secret("nope"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Secret(nope) = %v, want ErrUnknown", err)
	}
	vals := c.Values()
	if len(vals) != 2 || string(vals[0]) != envValue || string(vals[1]) != fileValue {
		t.Errorf("Values() = %q", vals)
	}
	if got := c.Names(); len(got) != 2 || got[0] != "from-env" || got[1] != "from-file" {
		t.Errorf("Names() = %q", got)
	}
	if got := string(c.Redactor().Redact([]byte("a " + envValue + " b " + fileValue))); got != "a [REDACTED] b [REDACTED]" {
		t.Errorf("Redactor().Redact = %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeSecret(t, dir, "good", fileValue, 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		secret Source
		env    map[string]string
		want   error
		source string
	}{
		{"unset env", Source{Env: "NOPE"}, nil, ErrMissing, "env NOPE"},
		{"empty env", Source{Env: "E"}, map[string]string{"E": ""}, ErrMissing, "env E"},
		{"short env", Source{Env: "E"}, map[string]string{"E": "abc"}, ErrTooShort, "env E"},
		{"missing file", Source{File: filepath.Join(dir, "missing")}, nil, ErrMissing, "file " + filepath.Join(dir, "missing")},
		{"empty file", Source{File: writeSecret(t, dir, "empty", "\n", 0o600)}, nil, ErrMissing, ""},
		{"symlink", Source{File: link}, nil, ErrUnsafeFile, ""},
		{"group writable", Source{File: writeSecret(t, dir, "gw", fileValue, 0o620)}, nil, ErrUnsafeFile, ""},
		{"world writable", Source{File: writeSecret(t, dir, "ww", fileValue, 0o602)}, nil, ErrUnsafeFile, ""},
		{"directory", Source{File: dir}, nil, ErrUnsafeFile, ""},
		{"fifo", Source{File: fifo}, nil, ErrUnsafeFile, ""},
		{"too large", Source{File: writeSecret(t, dir, "big", strings.Repeat("x", MaxFileBytes+1), 0o600)}, nil, ErrTooLarge, ""},
		{"both", Source{Env: "E", File: good}, map[string]string{"E": envValue}, nil, ""},
	} {
		_, err := Load(map[string]Source{"s": tc.secret}, env(tc.env))
		var e *Error
		if !errors.As(err, &e) || e.Secret != "s" {
			t.Errorf("%s: Load = %v, want an *Error for secret s", tc.name, err)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Load = %v, want %v", tc.name, err, tc.want)
		}
		if tc.source != "" && e.Source != tc.source {
			t.Errorf("%s: Source = %q, want %q", tc.name, e.Source, tc.source)
		}
		if strings.Contains(err.Error(), fileValue) || strings.Contains(err.Error(), envValue) || strings.Contains(err.Error(), "abc\"") {
			t.Errorf("%s: error %q carries the value", tc.name, err)
		}
	}
}

func TestLoadReportsEverySecret(t *testing.T) {
	_, err := Load(map[string]Source{"a": {Env: "A"}, "b": {Env: "B"}, "c": {Env: "C"}}, env(map[string]string{"B": envValue}))
	if err == nil || !strings.Contains(err.Error(), "secret a (env A)") || !strings.Contains(err.Error(), "secret c (env C)") || strings.Contains(err.Error(), "secret b") {
		t.Errorf("Load = %v, want errors for a and c only", err)
	}
}

func TestLoadGetenvDefault(t *testing.T) {
	t.Setenv("CORDON_TEST_SECRET", envValue)
	c, err := Load(map[string]Source{"k": {Env: "CORDON_TEST_SECRET"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Secret("k"); string(v) != envValue {
		t.Errorf("Secret = %q", v)
	}
}

// TestNeverPrinted prints a Value and the Custodian every way a log line
// or error might, and checks the value never appears.
func TestNeverPrinted(t *testing.T) {
	c, err := Load(map[string]Source{"k": {Env: "K"}}, env(map[string]string{"K": envValue}))
	if err != nil {
		t.Fatal(err)
	}
	v := c.vals["k"]
	// A writer holding back a complete value while a longer one may follow.
	r := NewRedactor([][]byte{[]byte(envValue), []byte(envValue + "-longer")})
	w := r.Writer(io.Discard)
	w.Write([]byte(envValue + "-lo"))
	type holder struct {
		Exported Value
		hidden   Value
		C        *Custodian
		cust     *Custodian
		R        *Redactor
		red      *Redactor
		redv     Redactor
		W        io.WriteCloser
		wr       io.WriteCloser
	}
	h := holder{v, v, c, c, r, r, *r, w, w}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%p"} {
		out = append(out, fmt.Sprintf(verb, v), fmt.Sprintf(verb, c), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h), fmt.Sprintf(verb, *c), fmt.Sprintf(verb, *r), fmt.Sprintf(verb, w))
	}
	out = append(out, fmt.Sprint(v, c, r, w), fmt.Sprintln(v, c, r, w), v.String(), v.GoString(), c.String())
	for _, x := range []any{v, c, h, &h, map[string]Value{"k": v}, r, w} {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatalf("json.Marshal(%T) = %v", x, err)
		}
		out = append(out, string(b))
	}
	var logs bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		l := slog.New(hd)
		l.Info("x", "value", v, "custodian", c, "holder", h)
	}
	out = append(out, logs.String())
	for _, s := range out {
		if strings.Contains(s, envValue[:8]) || strings.Contains(s, fmt.Sprintf("%x", envValue[:8])) || strings.Contains(s, fmt.Sprint([]byte(envValue[:8]))) {
			t.Errorf("printed the value: %s", s)
		}
	}
	if got := fmt.Sprintf("%v|%s|%q|%d", v, v, v, v); got != "[REDACTED]|[REDACTED]|[REDACTED]|[REDACTED]" {
		t.Errorf("Value formats as %q", got)
	}
	if b, _ := json.Marshal(c); string(b) != `{"secrets":["k"]}` {
		t.Errorf("Custodian JSON = %s", b)
	}
	if err := json.Unmarshal([]byte(`"x"`), &v); err == nil {
		t.Errorf("a Value decoded from JSON")
	}
}
