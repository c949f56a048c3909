package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// Failure probes of the gateway's dependencies: the custodian, the
// policy, the model upstream. Each shows deny, never a direct path.
func init() {
	conformance.Register(conformance.Probe{
		ID:     "failure.custodian",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: an unavailable secret denies the affected crossing, and no direct path or embedded credential is a fallback",
		Title:  "a secret the custodian cannot resolve refuses the run before the program starts; no crossing, no secret value printed",
		Run:    gatewayProbe(custodianUnavailable),
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.policy",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: unavailable Policy denies the affected crossing",
		Title:  "a policy that does not parse, or is missing, refuses the run before the program starts; nothing crosses",
		Run:    gatewayProbe(policyUnavailable),
	})
	conformance.Register(conformance.Probe{
		ID:     "failure.upstream",
		Class:  record.Failure,
		Clause: "§2.5 failure; §5: failure never enables a direct-path fallback",
		Title:  "with the model upstream down the crossing ends in a receipted upstream failure, and the agent reaches nothing directly",
		Run:    gatewayProbe(upstreamDown),
	})
}

// custodianUnavailable: configs with two secrets, the second one
// unresolvable: its file missing, its file a directory, its environment
// variable unset. Each run must be refused before start (no marker on
// the host, the upstream sees nothing) and the resolvable secret's value
// must appear nowhere in what cordon printed. Control: with the second
// secret's file present the same run starts and the upstream receives the
// custodied key.
func custodianUnavailable(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	// A route using the second secret, so that the custodian needs it.
	config := func(name, source string) (string, error) {
		return modelConfig(e, name, up.URL(), keyFile, "  second-key: "+source+"\n")
	}
	withGPT := func(p string) (string, error) {
		return writeFile(e, filepath.Base(p)+"-gpt.yaml", strings.Replace(mustRead(p), "secrets:", `  - name: gpt
    api: openai
    upstream: `+up.URL()+`
    credential: second-key
    models: ["gpt-*"]
secrets:`, 1))
	}
	dirSecret := filepath.Join(e.Dir, "a-directory")
	if err := os.Mkdir(dirSecret, 0o700); err != nil {
		return conformance.Outcome{Err: err}
	}
	second := filepath.Join(e.Dir, "second-key")
	st := e.StateDir()
	var facts []record.Fact
	for i, c := range []struct{ what, source string }{
		{"a secret whose file is missing", "{file: " + second + "}"},
		{"a secret whose file is a directory", "{file: " + dirSecret + "}"},
		{"a secret whose environment variable is unset", "{env: CORDON_CONFORMANCE_UNSET_KEY}"},
	} {
		cfg, err := config(fmt.Sprintf("c%d.yaml", i), c.source)
		if err == nil {
			cfg, err = withGPT(cfg)
		}
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		before := len(up.Seen())
		r, started, err := markedRun(ctx, e, st, fmt.Sprintf("out-%d", i), "--config", cfg)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		printed := strings.Contains(r.Stdout+r.Stderr+string(r.Outcome), key)
		facts = append(facts, refusedFact("the run with "+c.what, r, "custodian_unavailable"),
			markerFact("the program's start marker after the run with "+c.what, started),
			countFact("requests the model upstream received from the run with "+c.what, len(up.Seen())-before, 0, false),
			record.Fact{Name: "the resolvable secret's value in what cordon printed for the run with " + c.what, Want: "absent", Got: present(printed), OK: !printed,
				Source: "cordon run's stdout, stderr and --json outcome"})
	}
	if err := os.WriteFile(second, []byte(secretValue()+"\n"), 0o600); err != nil {
		return conformance.Outcome{Err: err}
	}
	cfg, err := config("c-control.yaml", "{file: "+second+"}")
	if err == nil {
		cfg, err = withGPT(cfg)
	}
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	before := len(up.Seen())
	c, cstarted, err := markedRun(ctx, e, st, "out-control", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	seen := up.Seen()[before:]
	custodied := len(seen) == 1 && seen[0].APIKey == key
	facts = append(facts, record.Fact{Name: "the same run with the second secret's file present", Want: "started (marker present), 1 upstream request carrying the custodied key",
		Got: "marker " + present(cstarted) + ", " + strconv.Itoa(len(seen)) + " upstream requests, custodied key " + present(custodied),
		OK:  cstarted && custodied, Source: "the host directory bound at /out; the fake model upstream's request log", Control: true})
	return conformance.Outcome{Hint: c.Hint(), Facts: facts}
}

func mustRead(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// policyUnavailable: a config naming a policy with a type error, and one
// naming a policy file that does not exist. Each run must be refused
// before start: no marker, no upstream request. Control: the same config
// with a valid policy permitting the model runs and its request arrives.
func policyUnavailable(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	up := upstream(e, key)
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	bad, err := writeFile(e, "bad.cedar", `permit(principal, action == Action::"model.invoke", resource) when { resource.name > 3 };`)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	syntax, err := writeFile(e, "syntax.cedar", `permit(principal, action == Action::"model.invoke", resource`)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	good, err := writeFile(e, "good.cedar", `@id("models") permit(principal, action == Action::"model.invoke", resource);`)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	var facts []record.Fact
	for _, c := range []struct {
		what, pol string
		kinds     []string
	}{
		{"a policy that does not parse", syntax, []string{"policy_rejected"}},
		{"a policy that does not type-check", bad, []string{"policy_rejected"}},
		// A config naming a file that is not there is the operator's
		// mistake: a usage error, refused all the same.
		{"a policy file that does not exist", filepath.Join(e.Dir, "absent.cedar"), []string{"policy_rejected", "usage"}},
	} {
		cfg, err := modelConfig(e, "c-"+strconv.Itoa(len(facts))+".yaml", up.URL(), keyFile, "policy: ["+c.pol+"]\n")
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		before := len(up.Seen())
		r, started, err := markedRun(ctx, e, st, "out-"+strconv.Itoa(len(facts)), "--config", cfg)
		if err != nil {
			return conformance.Outcome{Err: err}
		}
		facts = append(facts,
			refusedFact("the run with "+c.what, r, c.kinds...),
			markerFact("the program's start marker after the run with "+c.what, started),
			countFact("requests the model upstream received from the run with "+c.what, len(up.Seen())-before, 0, false))
	}
	cfg, err := modelConfig(e, "c-good.yaml", up.URL(), keyFile, "policy: ["+good+"]\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	before := len(up.Seen())
	r, started, err := markedRun(ctx, e, st, "out-good", "--config", cfg)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	n := len(up.Seen()) - before
	facts = append(facts, record.Fact{Name: "the same run with a valid policy permitting the model",
		Want: "started (marker present), 1 upstream request", Got: "marker " + present(started) + ", " + strconv.Itoa(n) + " upstream requests",
		OK: started && n == 1, Source: "the host directory bound at /out; the fake model upstream's request count", Control: true})
	return conformance.Outcome{Hint: r.Hint(), Facts: facts}
}

// upstreamDown: the config's model upstream is a port nobody listens on
// any more. The agent's model request must end in a receipted upstream
// failure, and its direct connect to a listener of the runner (another
// way out an agent might try next) must never arrive. Controls: with the
// upstream up the same request arrives; the same connect from the host
// arrives.
func upstreamDown(ctx context.Context, e *conformance.Env) conformance.Outcome {
	key := secretValue()
	keyFile, err := writeFile(e, "key", key+"\n")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	gone := upstream(e, key)
	goneURL := gone.URL()
	gone.Close()
	live := upstream(e, key)
	ln, err := e.Listener()
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfgDown, err := modelConfig(e, "down.yaml", goneURL, keyFile, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	cfgUp, err := modelConfig(e, "up.yaml", live.URL(), keyFile, "")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	st := e.StateDir()
	// The agent's model call, then a direct connect to the listener.
	script := conformance.ProbeBin + " __probe http " + strings.Join(quoteAll(modelCall), " ") +
		"; " + conformance.ProbeBin + " __probe connects tcp:" + ln.Addr()
	r, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfgDown, "--ro", e.Bin + ":" + conformance.ProbeBin},
		Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	direct := ln.Settle(0)
	rcs, err := receipts(ctx, e, st, "--broker", "model")
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	down := 0
	for _, rc := range rcs {
		if strings.Contains(rc.Reason, "upstream unreachable") {
			down++
		}
	}
	c, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfgUp}, Op: append([]string{"http"}, modelCall...)})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := e.HostOp(ctx, "connects", "tcp:"+ln.Addr()); err != nil {
		return conformance.Outcome{Err: err}
	}
	hostConn := ln.Settle(direct+1) - direct
	return conformance.Outcome{Hint: strings.TrimSpace(r.Stdout) + " | control: " + c.Hint(), Facts: []record.Fact{
		{Name: "model receipts of the run with the upstream down", Want: "1, reason: upstream unreachable",
			Got: strconv.Itoa(len(rcs)) + " receipts, " + strconv.Itoa(down) + " with reason upstream unreachable", OK: len(rcs) == 1 && down == 1,
			Source: "the store, via cordon receipts --json --broker model"},
		{Name: "direct connections from the sandbox accepted by " + ln.Addr(), Want: "0", Got: strconv.FormatInt(direct, 10), OK: direct == 0,
			Source: "the runner's listener on the host, accept count"},
		countFact("requests the live upstream received from the same call with the upstream up", len(live.Seen()), 1, true),
		{Name: "the same connect from the host", Want: "1 accepted", Got: strconv.FormatInt(hostConn, 10) + " accepted", OK: hostConn == 1,
			Source: "the runner's listener on the host, accept count", Control: true},
	}}
}

// quoteAll single-quotes each argument for /bin/sh.
func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}
