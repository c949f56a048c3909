package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// A built-in configuration (an agent preset's) is parsed "as if read
// from" a relative name such as examples/claude-code.yaml: a policy file
// it named would be resolved against cordon's current directory — the
// user's project, which is the agent's workspace (--workspace .), where
// the agent could have written examples/policy/*.cedar on its last run.
// A built-in configuration that names a file is refused.
func TestBuiltinPlanReadsNoFileFromTheCurrentDirectory(t *testing.T) {
	cwd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cwd, "examples", "policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "examples", "policy", "agent.cedar"), []byte("permit(principal, action, resource);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	t.Setenv("R3_TEST_KEY", "sk-test")
	head := "version: cordon/v1\nworkload: w\ntenant: t\npurpose: coding\nsecrets:\n  k: {env: R3_TEST_KEY}\n"
	// Positive control: without a policy file it loads.
	if _, err := LoadBuiltinPlan([]byte(head), "examples/x.yaml", "default", func(string) {}); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	if p, err := LoadBuiltinPlan([]byte(head+"policy: [policy/agent.cedar]\n"), "examples/x.yaml", "default", func(string) {}); err == nil {
		t.Fatalf("a built-in configuration loaded the policy %v from the current directory", p.cfg.Policy)
	}
}
