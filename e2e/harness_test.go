package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/testkit"
)

// Binaries built once by TestMain.
var (
	cordonBin string // the production build
	hooksBin  string // the same with -tags cordon_testhooks (positive controls)
	probeDir  string // a root-owned, world-readable dir holding the probe
	baseDir   string // 0711 parent for state dirs (the sandbox init must traverse them)
)

// children are what this test binary runs when a test re-executes it
// (testkit.Child). They dispatch in an init, before TestMain builds
// anything; never in the sandbox init this binary also is (package
// sbinit dispatches on argv[0] first).
var children = map[string]func() int{
	"escape-filter":  escapeFilterChild,
	"daemon-spawner": spawnDaemonSandbox,
}

func init() {
	if len(os.Args) > 0 && os.Args[0] != sbinit.Argv0 {
		testkit.Dispatch(children)
	}
}

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "cordon-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	build := func(out string, args ...string) error {
		cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %v: %v\n%s", args, err, b)
		}
		return nil
	}
	cordonBin, hooksBin = filepath.Join(dir, "cordon"), filepath.Join(dir, "cordon-hooks")
	probeDir = filepath.Join(dir, "probe")
	if err := build(cordonBin, "../cmd/cordon"); err != nil {
		return 0, err
	}
	if err := build(hooksBin, "-tags", "cordon_testhooks", "../cmd/cordon"); err != nil {
		return 0, err
	}
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		return 0, err
	}
	if err := build(filepath.Join(probeDir, "probe"), "./probe"); err != nil {
		return 0, err
	}
	if err := build(filepath.Join(probeDir, "sdkclient"), "./sdkclient"); err != nil {
		return 0, err
	}
	if err := build(filepath.Join(probeDir, "mcpclient"), "./mcpclient"); err != nil {
		return 0, err
	}
	if err := build(filepath.Join(probeDir, "mcpserver"), "./mcpserver"); err != nil {
		return 0, err
	}
	baseDir = filepath.Join(dir, "states")
	if err := os.Mkdir(baseDir, 0o711); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// newStateDir returns a fresh state dir the sandbox init can traverse.
func newStateDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(baseDir, "state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave nothing behind: reclaim what a killed run left in this
		// state dir before the dir (and its records) goes away.
		_ = exec.Command(cordonBin, "--state-dir", d, "gc").Run()
		os.RemoveAll(d)
	})
	return d
}

// Outcome mirrors cli.Outcome (the --json output).
type Outcome struct {
	SandboxID       string   `json:"sandbox_id"`
	LevelRequested  string   `json:"level_requested"`
	LevelAdmitted   string   `json:"level_admitted"`
	EnforcementMode string   `json:"enforcement_mode"`
	ExitCode        int      `json:"exit_code"`
	Signal          int      `json:"signal"`
	OOM             bool     `json:"oom"`
	TimedOut        bool     `json:"timed_out"`
	FailureKind     string   `json:"failure_kind"`
	Error           string   `json:"error"`
	Unverified      []string `json:"unverified_boundaries"`
}

// ProbeResult mirrors the probe's JSON line.
type ProbeResult struct {
	Op    string `json:"op"`
	OK    bool   `json:"ok"`
	Errno string `json:"errno"`
	Err   string `json:"err"`
	Data  string `json:"data"`
}

type result struct {
	Code           int
	Stdout, Stderr string
	Outcome        Outcome     // parsed from descriptor 3 when run --json was given
	OutcomeJSON    string      // what cordon wrote on descriptor 3 (run --json)
	Probe          ProbeResult // parsed from the first stdout line starting with {"op"
}

// outcomeFD gives a cordon run --json its descriptor 3 (the outcome): a
// file of the test's, as cmd.ExtraFiles[0]. It returns the function that
// reads what cordon wrote there ("" when args have no run --json).
func outcomeFD(t *testing.T, cmd *exec.Cmd) func() string {
	t.Helper()
	if !slices.Contains(cmd.Args, "run") || !slices.Contains(cmd.Args, "--json") {
		return func() string { return "" }
	}
	f, err := os.CreateTemp(t.TempDir(), "outcome-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.ExtraFiles = append([]*os.File{f}, cmd.ExtraFiles...)
	return func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

// cordon runs a cordon binary with args and returns what it did. The state
// dir is passed with --state-dir.
func cordon(t *testing.T, bin, state string, args ...string) result {
	t.Helper()
	return cordonStdin(t, bin, state, nil, args...)
}

func cordonStdin(t *testing.T, bin, state string, stdin []byte, args ...string) result {
	t.Helper()
	return cordonIn(t, bin, state, nil, stdin, args...)
}

// cordonEnv is cordon with env added to its environment (PATH only
// otherwise).
func cordonEnv(t *testing.T, env []string, state string, args ...string) result {
	t.Helper()
	return cordonIn(t, cordonBin, state, env, nil, args...)
}

func cordonIn(t *testing.T, bin, state string, env []string, stdin []byte, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	outcome := outcomeFD(t, cmd)
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("cordon %v: did not finish in 2 minutes", args)
	}
	return parseResult(cmd.ProcessState.ExitCode(), out.String(), errb.String(), outcome())
}

// parseResult reads the probe line from stdout and the --json outcome
// from what cordon wrote on descriptor 3, as the harness does.
func parseResult(code int, stdout, stderr, outcome string) result {
	r := result{Code: code, Stdout: stdout, Stderr: stderr, OutcomeJSON: outcome}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if strings.HasPrefix(l, `{"op"`) {
			_ = json.Unmarshal([]byte(l), &r.Probe)
			break
		}
	}
	if outcome != "" {
		_ = json.Unmarshal([]byte(outcome), &r.Outcome)
	}
	return r
}

// probeArgs returns the args to run the probe inside a sandbox: the probe
// dir bound read-only at /probe, then the probe op and its arguments.
func probeArgs(extra []string, op string, opArgs ...string) []string {
	args := append([]string{"run", "--ro", probeDir + ":/probe"}, extra...)
	return append(append(args, "--", "/probe/probe", op), opArgs...)
}

// runLogRe finds the run log's path in cordon run's summary on stderr.
var runLogRe = regexp.MustCompile(`(?:full log|while the program ran): (/\S+)`)

// logText is everything cordon run logged: its stderr and, once the
// program ran, the run log its summary names (log lines never go to the
// program's terminal).
func logText(r result) string {
	m := runLogRe.FindStringSubmatch(r.Stderr)
	if m == nil {
		return r.Stderr
	}
	b, _ := os.ReadFile(m[1])
	return r.Stderr + "\n" + string(b)
}
