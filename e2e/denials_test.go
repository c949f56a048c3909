package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/testkit"
)

// denialLine is a line of cordon receipts --json, with what a denial
// names.
type denialLine struct {
	ID       int64  `json:"id"`
	Broker   string `json:"broker"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
	Time     time.Time
	Sugg     *struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
		Note string `json:"note"`
	} `json:"suggestion"`
}

// explainLine is what the test reads of policy explain --json.
type explainLine struct {
	Allow    bool   `json:"allow"`
	DeniedAt string `json:"denied_at"`
	Rule     string `json:"rule"`
	Replay   *struct {
		Decision string   `json:"decision"`
		Changed  bool     `json:"changed"`
		Why      []string `json:"why"`
	} `json:"replay"`
}

// lastDenial is the newest denial receipt of broker for target, from the
// host's store through cordon receipts --decision deny.
func lastDenial(t *testing.T, st, broker, target string) denialLine {
	t.Helper()
	rs := receiptLines[denialLine](t, st, "--decision", "deny", "--broker", broker)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Target == target {
			if rs[i].Decision != "deny" {
				t.Fatalf("receipts --decision deny gave %+v", rs[i])
			}
			return rs[i]
		}
	}
	t.Fatalf("no %s denial for %q in %+v", broker, target, rs)
	return denialLine{}
}

// runLog is a run's log: its standard error and the full log file it
// names ("full log: PATH").
func runLog(t *testing.T, r result) string {
	t.Helper()
	_, after, ok := strings.Cut(r.Stderr, "full log: ")
	if !ok {
		return r.Stderr
	}
	path := strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("run log %s: %v", path, err)
	}
	return r.Stderr + string(b)
}

func explainReceipt(t *testing.T, st, cfg string, id int64) explainLine {
	t.Helper()
	r := cordon(t, cordonBin, st, "policy", "explain", "--config", cfg, "--json", "--receipt", strconv.FormatInt(id, 10))
	var x explainLine
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &x) != nil || x.Replay == nil {
		t.Fatalf("policy explain --receipt %d = %d %q %q", id, r.Code, r.Stdout, r.Stderr)
	}
	return x
}

// The answer to "why denied?" is the runtime's, end to end: a crossing a
// run was refused (egress not in the allow-list, a model no route
// allows, a Cedar forbid, no Cedar permit, an exhausted budget) shows in
// cordon receipts --decision deny with the rule that refused it and a
// suggestion; policy explain --receipt gives the same answer at the same
// stage; applying the suggestion to the configuration or policy makes the
// next run's crossing go through (the suggestion is right). The run's log
// has one line per denial. Positive control: an allowed crossing is
// allowed by the run and by explain.
func TestDenialsExplainedEndToEnd(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	target := testkit.NewTarget(t, "reached")
	port := target.Port()
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.cedar")
	const policyText = `
@id("models") permit(principal, action == Action::"model.invoke", resource);
@id("hosts") permit(principal, action == Action::"egress.connect", resource) when { resource.name != "np.test" };
@id("no-blocked") forbid(principal, action == Action::"egress.connect", resource == Host::"blocked.test");
`
	if err := os.WriteFile(pol, []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	up := testkit.NewModelUpstream(t, fakeKey, "model-answer")
	egress := func(allow string) string {
		return fmt.Sprintf(`policy: [%s]
egress:
  allow:
    - {host: open.test, ports: [%[2]s]}
    - {host: blocked.test, ports: [%[2]s]}
    - {host: np.test, ports: [%[2]s]}
%[3]s  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve: {open.test: 127.0.0.1, blocked.test: 127.0.0.1, np.test: 127.0.0.1, denied.test: 127.0.0.1}
`, pol, port, allow)
	}
	cfg := gatewayConfig(t, up.URL(), egress(""))
	curl := func(cfg, host string) result {
		return cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://"+host+":"+port+"/")
	}

	// Positive control: the allow-list and policy allow open.test — the
	// run and explain agree.
	r := curl(cfg, "open.test")
	if !strings.Contains(r.Stdout, "reached") || target.Hits() != 1 {
		t.Fatalf("open.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	allowed := receiptLines[denialLine](t, st, "--decision", "allow", "--broker", "egress")
	if len(allowed) != 1 || allowed[0].Rule != "" || allowed[0].Sugg != nil {
		t.Fatalf("allowed receipts = %+v, want one, without rule or suggestion", allowed)
	}
	if x := explainReceipt(t, st, cfg, allowed[0].ID); !x.Allow || x.DeniedAt != "" || x.Replay.Changed {
		t.Fatalf("explain --receipt (open.test) = %+v, want allow, unchanged", x)
	}
	mark := time.Now()
	time.Sleep(50 * time.Millisecond) // receipts after mark have later times

	// 1. Not in egress.allow: denied at the config stage, named, and the
	// suggested entry lets the next run through.
	r = curl(cfg, "denied.test")
	if !strings.Contains(r.Stdout, "403") || !strings.Contains(r.Stdout, "host-not-allowed") || target.Hits() != 1 {
		t.Fatalf("denied.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if l := runLog(t, r); !strings.Contains(l, `msg="crossing denied"`) || !strings.Contains(l, "broker=egress") || !strings.Contains(l, "denied.test:"+port) {
		t.Errorf("run log lacks the egress denial line:\n%s", l)
	}
	d := lastDenial(t, st, "egress", "denied.test:"+port)
	if want := "config: egress.allow has no entry for denied.test:" + port; d.Rule != want {
		t.Errorf("egress denial rule = %q, want %q", d.Rule, want)
	}
	if d.Sugg == nil || d.Sugg.Kind != "config" || !strings.Contains(d.Sugg.Text, `host: "denied.test"`) {
		t.Fatalf("egress denial suggestion = %+v", d.Sugg)
	}
	if x := explainReceipt(t, st, cfg, d.ID); x.Allow || x.DeniedAt != "config" || x.Rule != d.Rule || x.Replay.Changed {
		t.Errorf("explain --receipt (denied.test) = %+v, want deny at config with %q, unchanged", x, d.Rule)
	}
	var snippet struct {
		Egress struct {
			Allow []struct {
				Host  string `yaml:"host"`
				Ports []int  `yaml:"ports"`
			} `yaml:"allow"`
		} `yaml:"egress"`
	}
	if err := yaml.Unmarshal([]byte(d.Sugg.Text), &snippet); err != nil || len(snippet.Egress.Allow) != 1 {
		t.Fatalf("suggestion %q: %v", d.Sugg.Text, err)
	}
	e := snippet.Egress.Allow[0]
	fixed := gatewayConfig(t, up.URL(), egress(fmt.Sprintf("    - {host: %q, ports: %v}\n", e.Host, strings.ReplaceAll(fmt.Sprint(e.Ports), " ", ", "))))
	if r := curl(fixed, "denied.test"); !strings.Contains(r.Stdout, "reached") || target.Hits() != 2 {
		t.Fatalf("denied.test with the suggested entry: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if x := explainReceipt(t, st, fixed, d.ID); !x.Allow || !x.Replay.Changed || !strings.Contains(strings.Join(x.Replay.Why, "\n"), "the configuration changed") {
		t.Errorf("explain --receipt with the suggestion = %+v, want allow, changed, the configuration named", x)
	}

	// 2. A model no route allows: named, logged on the host, replayed at
	// config; the suggested glob lets the next run through.
	r = cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", "mistral-large", "hi")
	if r.Code == 0 || strings.Contains(r.Stdout, "model-answer") {
		t.Fatalf("mistral-large: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if l := runLog(t, r); !strings.Contains(l, `msg="crossing denied" receipt=`) || !strings.Contains(l, "broker=model") || !strings.Contains(l, "target=mistral-large") ||
		!strings.Contains(l, `rule="config: no models[] route allows model `) {
		t.Errorf("run log lacks the model denial line:\n%s", l)
	}
	d = lastDenial(t, st, "model", "mistral-large")
	if want := `config: no models[] route allows model "mistral-large"`; d.Rule != want || d.Sugg == nil || d.Sugg.Kind != "config" {
		t.Fatalf("model denial = %+v, want rule %q and a config suggestion", d, want)
	}
	if x := explainReceipt(t, st, cfg, d.ID); x.Allow || x.DeniedAt != "config" || x.Rule != d.Rule || x.Replay.Changed {
		t.Errorf("explain --receipt (model) = %+v, want deny at config with %q", x, d.Rule)
	}
	var models struct {
		Models []string `yaml:"models"`
	}
	if err := yaml.Unmarshal([]byte(d.Sugg.Text), &models); err != nil || len(models.Models) != 1 {
		t.Fatalf("model suggestion %q: %v", d.Sugg.Text, err)
	}
	raw, _ := os.ReadFile(cfg)
	glob, _ := json.Marshal(models.Models[0])
	withModel := filepath.Join(t.TempDir(), "cordon.yaml")
	os.WriteFile(withModel, []byte(strings.Replace(string(raw), `models: ["claude-*"]`, `models: ["claude-*", `+string(glob)+`]`, 1)), 0o600)
	if r := cordon(t, cordonBin, st, "run", "--config", withModel, "--ro", probeDir+":/probe", "--", "/probe/sdkclient", "anthropic", "mistral-large", "hi"); r.Code != 0 || !strings.Contains(r.Stdout, "model-answer") {
		t.Fatalf("mistral-large with the suggested glob: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}

	// 3. A Cedar forbid: named by its id, replayed at the cedar stage.
	r = curl(cfg, "blocked.test")
	if !strings.Contains(r.Stdout, "policy-denied") {
		t.Fatalf("blocked.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	d = lastDenial(t, st, "egress", "blocked.test:"+port)
	if d.Rule != "cedar: forbidden by no-blocked" || d.Sugg == nil || !strings.Contains(d.Sugg.Note, "no-blocked") {
		t.Errorf("forbid denial = %+v, want the forbid's id", d)
	}
	if x := explainReceipt(t, st, cfg, d.ID); x.Allow || x.DeniedAt != "cedar" || x.Rule != d.Rule || x.Replay.Changed {
		t.Errorf("explain --receipt (forbid) = %+v, want deny at cedar with %q", x, d.Rule)
	}

	// 4. No permit: the suggested permit, added to the policy file, lets
	// the next run through.
	hits := target.Hits()
	if r := curl(cfg, "np.test"); !strings.Contains(r.Stdout, "policy-denied") || target.Hits() != hits {
		t.Fatalf("np.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	d = lastDenial(t, st, "egress", "np.test:"+port)
	if d.Rule != "cedar: no permit matched" || d.Sugg == nil || d.Sugg.Kind != "cedar" || !strings.Contains(d.Sugg.Text, `resource == Host::"np.test"`) {
		t.Fatalf("no-permit denial = %+v", d)
	}
	if x := explainReceipt(t, st, cfg, d.ID); x.Allow || x.DeniedAt != "cedar" || x.Rule != d.Rule {
		t.Errorf("explain --receipt (no permit) = %+v, want deny at cedar", x)
	}
	if err := os.WriteFile(pol, []byte(policyText+d.Sugg.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(cfg, "np.test"); !strings.Contains(r.Stdout, "reached") || target.Hits() != hits+1 {
		t.Fatalf("np.test with the suggested permit: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	os.WriteFile(pol, []byte(policyText), 0o644)

	// --since excludes what came before the mark (the open.test
	// receipts), keeps what came after.
	since := receiptLines[denialLine](t, st, "--since", mark.UTC().Format(time.RFC3339Nano))
	all := receiptLines[denialLine](t, st)
	if len(since) == 0 || len(since) >= len(all) {
		t.Fatalf("--since: %d of %d receipts", len(since), len(all))
	}
	for _, rc := range since {
		if rc.Target == "open.test:"+port {
			t.Errorf("--since %s kept an older receipt %+v", mark, rc)
		}
	}

	// 5. An exhausted budget (a fresh store: the workload's spend is its
	// own): named with its limit, replayed at the budget stage; the
	// suggested limit lets the next run through.
	st2 := newStateDir(t)
	budget := func(n int) string {
		return gatewayConfig(t, up.URL(), egress("")+fmt.Sprintf("budgets:\n  connections: %d\n", n))
	}
	b1 := budget(1)
	if r := cordon(t, cordonBin, st2, "run", "--config", b1, "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://open.test:"+port+"/"); r.Stdout != "reached" {
		t.Fatalf("first connection: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	r = cordon(t, cordonBin, st2, "run", "--config", b1, "--", "/usr/bin/curl", "-sS", "-i", "--max-time", "10", "http://open.test:"+port+"/")
	if !strings.Contains(r.Stdout, "budget-exceeded") {
		t.Fatalf("second connection: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	d = lastDenial(t, st2, "egress", "open.test:"+port)
	if !strings.HasPrefix(d.Rule, "budget: budgets.connections: 1 used of 1") || d.Sugg == nil || !strings.Contains(d.Sugg.Text, "connections: 2") {
		t.Fatalf("budget denial = %+v", d)
	}
	if x := explainReceipt(t, st2, b1, d.ID); x.Allow || x.DeniedAt != "budget" || x.Replay.Changed {
		t.Errorf("explain --receipt (budget) = %+v, want deny at budget", x)
	}
	if r := cordon(t, cordonBin, st2, "run", "--config", budget(2), "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://open.test:"+port+"/"); r.Stdout != "reached" {
		t.Fatalf("with the suggested limit: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

// The daemon's log has the same line for a denial in a daemon sandbox,
// from the privileged side; the receipt names the rule. Control: the
// allowed host is reached and logs no denial.
func TestDaemonLogsDenials(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	target := testkit.NewTarget(t, "reached")
	port := target.Port()
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`egress:
  allow:
    - {host: open.test, ports: [%[1]s]}
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve: {open.test: 127.0.0.1, denied.test: 127.0.0.1}
`, port))
	d := startDaemon(t, st)
	d.createStart("why", "--config", cfg, "--", "/bin/sleep", "1000")
	curl := func(host string) result {
		return d.cli("sandbox", "exec", "why", "--", "/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "http://"+host+":"+port+"/")
	}
	if r := curl("open.test"); r.Stdout != "200" || target.Hits() != 1 {
		t.Fatalf("open.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if strings.Contains(d.String(), `msg="crossing denied"`) {
		t.Fatalf("an allowed connection logged a denial:\n%s", d)
	}
	if r := curl("denied.test"); r.Stdout != "403" || target.Hits() != 1 {
		t.Fatalf("denied.test: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	dl := lastDenial(t, st, "egress", "denied.test:"+port)
	want := fmt.Sprintf(`msg="crossing denied" receipt=%d `, dl.ID)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.String(), want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if log := d.String(); !strings.Contains(log, want) || !strings.Contains(log, `rule="config: egress.allow has no entry for denied.test:`+port+`"`) {
		t.Errorf("daemon log lacks the denial line %q:\n%s", want, log)
	}
}
