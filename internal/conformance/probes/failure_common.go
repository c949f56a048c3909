package probes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/conformance/probeops"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// Helpers of the failure and reset/recovery probes.

// modelCall is the agent's model crossing: an Anthropic Messages request
// through the gateway's model listener.
var modelCall = []string{"POST", "$ANTHROPIC_BASE_URL/v1/messages",
	`{"model":"claude-probe-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`}

// runOutcome is the part of `cordon run --json`'s outcome the probes read:
// cordon's own report, from the trusted side.
type runOutcome struct {
	SandboxID   string `json:"sandbox_id"`
	ExitCode    int    `json:"exit_code"`
	FailureKind string `json:"failure_kind"`
	Error       string `json:"error"`
}

func outcomeOf(r conformance.RunResult) runOutcome {
	var o runOutcome
	_ = json.Unmarshal(r.Outcome, &o)
	return o
}

// secretValue is a fresh credential value: a probe looks for it in what
// cordon printed.
func secretValue() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "sk-probe-" + hex.EncodeToString(b)
}

// writeFile writes name under e.Dir (0600) and returns its path.
func writeFile(e *conformance.Env, name, content string) (string, error) {
	p := filepath.Join(e.Dir, name)
	return p, os.WriteFile(p, []byte(content), 0o600)
}

// upstream starts a fake model upstream accepting key, stopped when the
// probe ends.
func upstream(e *conformance.Env, key string) *fixture.ModelUpstream {
	up := fixture.NewModelUpstream(key, "probe-answer")
	e.Cleanup(up.Close)
	return up
}

// modelConfig writes a gateway config routing claude-* to upstreamURL
// with the credential read from keyFile, plus extra YAML; it returns the
// config's path.
func modelConfig(e *conformance.Env, name, upstreamURL, keyFile, extra string) (string, error) {
	return writeFile(e, name, fmt.Sprintf(`version: cordon/v1
workload: conformance
tenant: probe
purpose: testing
models:
  - name: claude
    api: anthropic
    upstream: %s
    credential: upstream-key
    models: ["claude-*"]
secrets:
  upstream-key: {file: %s}
%s`, upstreamURL, keyFile, extra))
}

// keyedModelConfig writes key to a file of its own and a model config
// (modelConfig) whose credential is that file; it returns the config's
// path.
func keyedModelConfig(e *conformance.Env, upstreamURL, key, extra string) (string, error) {
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return "", err
	}
	return modelConfig(e, "c.yaml", upstreamURL, keyFile, extra)
}

// outDir makes a fresh directory under e.Dir that a run binds
// read-write at /out (owned by an unprivileged uid, as a writable bind
// needs), holding a random token (probeops.TokenFile) that the marker ops
// check before they write: the host reads what the program left there. It
// returns the host path, the token and the run flags.
func outDir(e *conformance.Env, name string) (dir, token string, flags []string, err error) {
	d := filepath.Join(e.Dir, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", "", nil, err
	}
	token = secretValue()
	if err := os.WriteFile(filepath.Join(d, probeops.TokenFile), []byte(token+"\n"), 0o644); err != nil {
		return "", "", nil, err
	}
	// The probes' workspace uid, with no host account: not nobody, whose
	// host processes could remove a marker or truncate a count.
	if err := os.Chown(d, wsOwnerUID, wsOwnerUID); err != nil {
		return "", "", nil, err
	}
	return d, token, []string{"--rw", d + ":/out"}, nil
}

// markedRun runs a model crossing preceded by a start marker under a fresh
// /out, and reports whether the host found the marker.
func markedRun(ctx context.Context, e *conformance.Env, stateDir, name string, flags ...string) (conformance.RunResult, bool, error) {
	d, token, out, err := outDir(e, name)
	if err != nil {
		return conformance.RunResult{}, false, err
	}
	r, err := gwRun(ctx, e, conformance.RunOpts{StateDir: stateDir, Flags: append(out, flags...),
		Op: append([]string{"mark-http", token, "/out/started"}, modelCall...)})
	if err != nil {
		return r, false, err
	}
	_, serr := os.Lstat(filepath.Join(d, "started"))
	return r, serr == nil, nil
}

// noGateway is how cordon refuses a gateway on a provider that gives the
// sandbox no leased identity (the test fake).
const noGateway = conformance.NoGateway

// errNoGateway: the provider cannot run a gateway.
var errNoGateway = errors.New("this provider cannot run the gateway (" + noGateway + ")")

// gwRun is e.Run that returns errNoGateway when cordon refused to start a
// gateway for want of the provider's support.
func gwRun(ctx context.Context, e *conformance.Env, o conformance.RunOpts) (conformance.RunResult, error) {
	r, err := e.Run(ctx, o)
	if err == nil && strings.Contains(outcomeOf(r).Error, noGateway) {
		return r, errNoGateway
	}
	return r, err
}

// gatewayProbe wraps a probe that needs a gateway: on a provider that
// cannot run one, it is not evidenced rather than failed.
func gatewayProbe(run func(context.Context, *conformance.Env) conformance.Outcome) func(context.Context, *conformance.Env) conformance.Outcome {
	return func(ctx context.Context, e *conformance.Env) conformance.Outcome {
		o := run(ctx, e)
		if o.Err != nil && (errors.Is(o.Err, errNoGateway) || strings.Contains(o.Err.Error(), noGateway) && e.RefusedGateway()) {
			return conformance.Outcome{NotEvidenced: errNoGateway.Error()}
		}
		return o
	}
}

// present says "present" or "absent".
func present(ok bool) string {
	if ok {
		return "present"
	}
	return "absent"
}

// refusedFact is the fact that cordon refused a run before it started,
// with the failure kind it named, read from its exit status and outcome.
// kinds lists the failure kinds that are the right refusal.
func refusedFact(name string, r conformance.RunResult, kinds ...string) record.Fact {
	o := outcomeOf(r)
	got := fmt.Sprintf("exit %d, failure kind %q", r.Code, o.FailureKind)
	return record.Fact{Name: name, Want: "exit 125, failure kind " + strings.Join(kinds, " or "), Got: got,
		OK: r.Code == 125 && slices.Contains(kinds, o.FailureKind), Source: "cordon run's exit status and --json outcome (fd 3)"}
}

// markerFact: the program's start marker must be absent from the host.
func markerFact(name string, found bool) record.Fact {
	return record.Fact{Name: name, Want: "absent", Got: present(found), OK: !found,
		Source: "the host directory bound at /out, read after the run"}
}

// countFact: the upstream must have received want requests.
func countFact(name string, got, want int, control bool) record.Fact {
	return record.Fact{Name: name, Want: strconv.Itoa(want), Got: strconv.Itoa(got), OK: got == want,
		Source: "the fake model upstream on the host, request count", Control: control}
}

// receipt is the part of `cordon receipts --json` the probes read.
type receipt struct {
	ID       int64  `json:"id"`
	Broker   string `json:"broker"`
	Action   string `json:"action"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Identity struct {
		Workload  string `json:"workload"`
		SandboxID string `json:"sandbox_id"`
	} `json:"identity"`
	Usage struct {
		Requests     int64 `json:"requests"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// receipts reads the store's receipts with `cordon receipts --json`.
func receipts(ctx context.Context, e *conformance.Env, stateDir string, filter ...string) ([]receipt, error) {
	r, err := e.Cordon(ctx, stateDir, append([]string{"receipts", "--json"}, filter...)...)
	if err != nil {
		return nil, err
	}
	if r.Code != 0 {
		return nil, fmt.Errorf("cordon receipts: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
	}
	// The crossings' receipts: each session's signed containment receipt
	// (broker evidence, logged by the trusted side at admission:
	// docs/session-receipts.md) only when the filter asks for it.
	evidence := slices.Contains(filter, "evidence")
	var out []receipt
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var rc receipt
		if err := json.Unmarshal([]byte(l), &rc); err != nil {
			return nil, fmt.Errorf("receipt line %q: %v", l, err)
		}
		if rc.Broker == "evidence" && !evidence {
			continue
		}
		out = append(out, rc)
	}
	return out, nil
}

func errf(format string, a ...any) conformance.Outcome {
	return conformance.Outcome{Err: fmt.Errorf(format, a...)}
}

// runLogs names the run logs cordon run left in stateDir/logs (its own
// root-only directory), to pass to runLog after the next run.
func runLogs(stateDir string) map[string]bool {
	names := map[string]bool{}
	ms, _ := filepath.Glob(filepath.Join(stateDir, "logs", "run-*.log"))
	for _, m := range ms {
		names[m] = true
	}
	return names
}

// runLog is what the runs since before logged in their run logs (read on
// the host). Never cordon run's stderr: the program's stderr goes there,
// so it could print the line a fact looks for, or a "full log: PATH" of a
// host file for the runner, root, to read. Only regular files are read,
// never through a symlink.
func runLog(stateDir string, before map[string]bool) string {
	var b strings.Builder
	for m := range runLogs(stateDir) {
		if before[m] {
			continue
		}
		if c, err := readSandboxFile(m); err == nil {
			b.WriteString(c + "\n")
		}
	}
	return b.String()
}
