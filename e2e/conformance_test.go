package e2e

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/testkit"
)

// suiteOutput mirrors `cordon conformance run --json`.
type suiteOutput struct {
	Exit       int `json:"exit_status"`
	Capability struct {
		Provider string `json:"provider"`
		MaxLevel string `json:"max_level"`
	} `json:"capability"`
	Claim         record.Claim         `json:"claim"`
	BaselineError string               `json:"baseline_error"`
	Results       []record.ProbeResult `json:"results"`
	Record        string               `json:"record"`
	ReceiptID     int64                `json:"receipt_id"`
}

// suiteRun is one `cordon conformance run` of a private copy of a
// cordon binary, with its scratch directories in a private TMPDIR, so
// that what it leaves on the host is attributable: processes of that
// binary (by device and inode, whatever namespace they run in) and files
// in that TMPDIR.
type suiteRun struct {
	dir    string // holds state/ (the --state-dir) and the run's files
	code   int
	out    suiteOutput
	stderr string
}

func runSuite(t *testing.T, bin string, args ...string) suiteRun {
	t.Helper()
	// Short paths: the suite's daemon sandboxes make Unix sockets under
	// its TMPDIR (the runner refuses a TMPDIR too deep for them).
	dir, err := os.MkdirTemp(baseDir, "cf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// 0711: sandbox inits traverse the suite's state dirs under TMPDIR.
	os.Chmod(dir, 0o711)
	own := filepath.Join(dir, "cordon")
	if err := copyFile(bin, own); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(own, 0o755); err != nil {
		t.Fatal(err)
	}
	// Positive control of the residue check: a process of the copy, held
	// on its stdin, is seen.
	held := exec.Command(own, "__probe", "hold", "ids")
	stdin, err := held.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	heldOut, err := held.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := heldOut.Read(make([]byte, 1)); err != nil {
		t.Fatalf("held op: %v", err)
	}
	if pids := processesOf(t, own); len(pids) != 1 || pids[0] != held.Process.Pid {
		t.Errorf("positive control: processes of %s = %v, want the held one %d", own, pids, held.Process.Pid)
	}
	stdin.Close()
	io.Copy(io.Discard, heldOut)
	held.Wait()
	tmp := filepath.Join(dir, "t")
	if err := os.Mkdir(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	cmd := exec.Command(own, append([]string{"--state-dir", state}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp}
	cmd.Dir = dir
	stdout, stderr := tempOut(t), tempOut(t)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	_ = cmd.Run()
	r := suiteRun{dir: dir, code: cmd.ProcessState.ExitCode(), stderr: readAll(stderr)}
	if err := json.Unmarshal([]byte(readAll(stdout)), &r.out); err != nil {
		t.Fatalf("conformance run (exit %d) printed no JSON report: %v\nstderr: %s", r.code, err, r.stderr)
	}
	t.Logf("conformance run: exit %d\n%s", r.code, r.stderr)
	// Nothing left on the host: no process of the binary under test, no
	// scratch directory.
	if pids := processesOf(t, own); len(pids) > 0 {
		t.Errorf("processes of the suite's binary outlived it: %v", pids)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the suite left %v in its TMPDIR", names)
	}
	return r
}

// processesOf lists the pids whose executable is the file bin (same
// device and inode: a bind mount of it into a sandbox included).
func processesOf(t *testing.T, bin string) []int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(bin, &want); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "exe"), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			out = append(out, pid)
		}
	}
	return out
}

func byClass(rs []record.ProbeResult) map[record.Class]map[record.Verdict]int {
	m := map[record.Class]map[record.Verdict]int{}
	for _, c := range record.Classes() {
		m[c] = map[record.Verdict]int{}
	}
	for _, r := range rs {
		m[r.Class][r.Verdict]++
	}
	return m
}

// TestConformanceFakeProvider: the suite judges the provider it is given
// rather than assuming one. Against the test fake (a plain child process,
// no isolation) at the level it claims (SHARED), nothing in bypass,
// cross_tenant or exhaustion passes, a bypass probe fails with the
// escape observed from outside (the host listener counted the
// connection), the claim is lowered, and the suite leaves nothing behind.
// At DEDICATED_CONTAINER the fake is refused and nothing passes.
func TestConformanceFakeProvider(t *testing.T) {
	testkit.RequireRoot(t)
	r := runSuite(t, hooksBin, "--provider", "fake-plain-child", "conformance", "run", "--level", "SHARED", "--json")
	if r.code == 0 || r.out.Exit == 0 {
		t.Errorf("exit status %d (reported %d) against a provider that isolates nothing, want non-zero", r.code, r.out.Exit)
	}
	if r.out.Capability.Provider != "fake-plain-child" || r.out.Capability.MaxLevel != "SHARED" {
		t.Errorf("capability = %+v, want the fake's own (SHARED)", r.out.Capability)
	}
	// A probe of a denial cordon's launcher makes before any provider
	// runs (conformance.Probe.Launcher) holds under every provider; every
	// other probe of these classes must not pass.
	var list []struct {
		ID       string `json:"id"`
		Launcher bool   `json:"launcher"`
	}
	out, err := exec.Command(hooksBin, "conformance", "list", "--json").Output()
	if err != nil || json.Unmarshal(out, &list) != nil || len(list) == 0 {
		t.Fatalf("conformance list --json: %v\n%s", err, out)
	}
	launcher := map[string]bool{}
	for _, p := range list {
		launcher[p.ID] = p.Launcher
	}
	for _, p := range r.out.Results {
		switch p.Class {
		case record.Bypass, record.CrossTenant, record.Exhaustion:
			if p.Verdict == record.Pass && !launcher[p.ID] {
				t.Errorf("%s passes against the fake (a provider that isolates nothing), want fail or not_evidenced", p.ID)
			}
		}
	}
	var escapes int
	for _, p := range r.out.Results {
		if p.Class != record.Bypass || p.Verdict != record.Fail {
			continue
		}
		for _, f := range p.Facts {
			if !f.OK && !f.Control {
				escapes++
				t.Logf("escape observed by %s: %s: got %s, want %s (%s)", p.ID, f.Name, f.Got, f.Want, f.Source)
			}
		}
	}
	if escapes == 0 {
		t.Error("no bypass probe failed with an observed escape (a non-control fact contradicting the claim)")
	}
	for _, p := range r.out.Results {
		if p.ID == "bypass.net.host-loopback" && (p.Verdict != record.Fail || len(p.Facts) == 0 || p.Facts[0].OK || p.Facts[0].Got == "0") {
			t.Errorf("bypass.net.host-loopback = %s %+v, want fail with the host listener's count above 0", p.Verdict, p.Facts)
		}
	}
	if r.out.Claim.Admitted != record.NoClaim || len(r.out.Claim.Failed) == 0 {
		t.Errorf("claim = %+v, want no level claimed, with the failed probes named", r.out.Claim)
	}

	// At the default level the fake is refused: every probe is not
	// evidenced, the refusal reported, and nothing passes.
	r = runSuite(t, hooksBin, "--provider", "fake-plain-child", "conformance", "run", "--class", "bypass", "--json")
	if r.code == 0 || r.out.BaselineError == "" {
		t.Errorf("fake at DEDICATED_CONTAINER: exit %d, baseline %q: want non-zero and the refusal reported", r.code, r.out.BaselineError)
	}
	for _, p := range r.out.Results {
		if p.Verdict != record.NotEvidenced {
			t.Errorf("fake at DEDICATED_CONTAINER: %s = %s, want not_evidenced", p.ID, p.Verdict)
		}
	}
}

// TestConformanceNative: the release binary's suite passes on this host
// for the native provider at DEDICATED_CONTAINER, and its signed record
// verifies with the state dir's evidence log key. Every class that has a
// registered probe must pass; once every class has one (the lead merges
// the probe branches), the whole suite must exit 0 and admit the claim.
func TestConformanceNative(t *testing.T) {
	testkit.RequireRoot(t)
	list, err := exec.Command(cordonBin, "conformance", "list", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var probes []struct {
		ID    string       `json:"id"`
		Class record.Class `json:"class"`
	}
	if err := json.Unmarshal(list, &probes); err != nil {
		t.Fatal(err)
	}
	registered := map[record.Class]bool{}
	for _, p := range probes {
		registered[p.Class] = true
	}
	r := runSuite(t, cordonBin, "conformance", "run", "--json", "--out", "record.json", "--html", "report.html")
	counts := byClass(r.out.Results)
	for _, p := range r.out.Results {
		if p.Verdict == record.Fail {
			t.Errorf("%s failed: %s %+v", p.ID, p.Reason, p.Facts)
		}
	}
	complete := true
	for _, c := range record.Classes() {
		if !registered[c] {
			complete = false
			t.Logf("class %s has no registered probe yet", c)
			continue
		}
		if counts[c][record.Pass] == 0 {
			t.Errorf("class %s: no probe passed (%v)", c, counts[c])
		}
	}
	if complete && (r.code != 0 || r.out.Claim.Admitted != "DEDICATED_CONTAINER") {
		t.Errorf("every class has probes: exit %d, claim %+v; want 0 and DEDICATED_CONTAINER", r.code, r.out.Claim)
	}
	if !complete && r.code != 3 && r.code != 1 {
		t.Errorf("a class has no probe: exit %d, want 3 (incomplete)", r.code)
	}

	// The signed record: its signature verifies with the state dir's
	// log.pub, it is the run's (claim, probes), and the evidence log that
	// holds it verifies.
	if r.out.Record != "record.json" || r.out.ReceiptID == 0 {
		t.Fatalf("no signed record reported: record %q, receipt %d", r.out.Record, r.out.ReceiptID)
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := os.ReadFile(filepath.Join(evlog.KeyDir(filepath.Join(r.dir, "state")), evlog.PubFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := evlog.PublicKeyFromVkey(string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.Verify(env, pub)
	if err != nil {
		t.Fatalf("the record does not verify with log.pub: %v", err)
	}
	rec, err := record.FromStatement(st)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Claim.Admitted != r.out.Claim.Admitted || len(rec.Probes) != len(r.out.Results) || rec.Provider.Name != "linux-native" {
		t.Errorf("record: claim %s, %d probes, provider %s; the run printed claim %s, %d probes",
			rec.Claim.Admitted, len(rec.Probes), rec.Provider.Name, r.out.Claim.Admitted, len(r.out.Results))
	}
	if v := cordon(t, cordonBin, filepath.Join(r.dir, "state"), "evidence", "verify"); v.Code != 0 {
		t.Errorf("evidence verify of the state dir that logged the record: exit %d: %s%s", v.Code, v.Stdout, v.Stderr)
	}
	if v := cordon(t, cordonBin, filepath.Join(r.dir, "state"), "conformance", "verify", filepath.Join(r.dir, "record.json"), "--log"); v.Code != 0 {
		t.Errorf("conformance verify --log: exit %d: %s%s", v.Code, v.Stdout, v.Stderr)
	}
	html, err := os.ReadFile(filepath.Join(r.dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.out.Results {
		if !strings.Contains(string(html), p.ID) {
			t.Errorf("the HTML report does not show probe %s", p.ID)
		}
	}
}
