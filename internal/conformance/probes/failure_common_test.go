package probes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func TestRefusedFact(t *testing.T) {
	for _, tt := range []struct {
		code    int
		outcome string
		ok      bool
	}{
		{125, `{"failure_kind":"policy_rejected"}`, true},
		{125, `{"failure_kind":"usage"}`, true},
		{125, `{"failure_kind":"start_failed"}`, false},
		{0, `{}`, false},
		{125, ``, false},
	} {
		f := refusedFact("x", conformance.RunResult{Code: tt.code, Outcome: []byte(tt.outcome)}, "policy_rejected", "usage")
		if f.OK != tt.ok || f.Control {
			t.Errorf("refusedFact(%d, %s) = %+v, want ok %v", tt.code, tt.outcome, f, tt.ok)
		}
	}
}

// A gateway probe on a provider that cannot run a gateway is not
// evidenced; any other broken probe stays broken.
func TestGatewayProbe(t *testing.T) {
	run := func(err error) conformance.Outcome {
		return gatewayProbe(func(context.Context, *conformance.Env) conformance.Outcome {
			return conformance.Outcome{Err: err, Facts: []record.Fact{{Name: "f", OK: true}}}
		})(context.Background(), nil)
	}
	if o := run(errNoGateway); o.NotEvidenced == "" || o.Err != nil || len(o.Facts) != 0 {
		t.Errorf("no gateway: %+v", o)
	}
	// The words alone (they may come from the program's stderr) are not
	// cordon's refusal: the Env saw none (the runner's test has both).
	if o := run(errors.New("cordon run ended (exit 125): stderr: the sandbox " + noGateway)); o.NotEvidenced != "" || o.Err == nil {
		t.Errorf("no gateway only in an error's text: %+v", o)
	}
	if o := run(errors.New("boom")); o.NotEvidenced != "" || o.Err == nil {
		t.Errorf("a broken probe: %+v", o)
	}
	if o := run(nil); o.NotEvidenced != "" || len(o.Facts) != 1 {
		t.Errorf("a probe that ran: %+v", o)
	}
}

func TestCountsOf(t *testing.T) {
	got := countsOf(map[string]int{scopeName(1): 1, "probe/x/y": 2})
	want := "probe/probe-w1/testing=0 probe/probe-w1/other=1 probe/probe-w2/testing=0 probe/x/y=2"
	if got != want {
		t.Errorf("countsOf = %q, want %q", got, want)
	}
}

// The run log a fact is judged from is the trusted side's own file under
// <state-dir>/logs, never cordon run's stderr: the program's stderr goes
// there, so a program could print the very line the fact looks for, or
// name a host file ("full log: /etc/shadow") for the root runner to read.
func TestRunLogIsTheTrustedSidesFile(t *testing.T) {
	st := t.TempDir()
	logs := filepath.Join(st, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(logs, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("run-old.log", "answer_withheld=true from an earlier run")
	before := runLogs(st)
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(logs, "run-link.log")); err != nil {
		t.Fatal(err)
	}
	got := runLog(st, before)
	if strings.Contains(got, "answer_withheld") || strings.Contains(got, "host-secret") {
		t.Errorf("runLog = %q: judged an earlier run's log or a host file behind a symlink", got)
	}
	// Control: the run's own new log is what it reads.
	write("run-new.log", "level=WARN answer_withheld=true")
	if got := runLog(st, before); !strings.Contains(got, "answer_withheld=true") {
		t.Errorf("runLog = %q, want the new run log's line", got)
	}
}

// The directory a run binds read-write at /out (markers, responses, a
// tool's call count) is owned by the probes' workspace uid, which has no
// account on the host: not nobody (65534), whose processes (host
// daemons) could delete a marker or truncate a count and make an
// "absent"/"one line" fact pass.
func TestOutDirOwnerHasNoAccount(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (chown) and CI is set")
		}
		t.Skip("needs root")
	}
	e := &conformance.Env{Dir: t.TempDir()}
	d, _, _, err := outDir(e, "out")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	uid := fi.Sys().(*syscall.Stat_t).Uid
	if uid != wsOwnerUID {
		t.Errorf("%s owned by uid %d, want the probes' workspace uid %d", d, uid, wsOwnerUID)
	}
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == strconv.Itoa(int(uid)) {
			t.Errorf("uid %d, owner of %s, is host account %q", uid, d, f[0])
		}
	}
}
