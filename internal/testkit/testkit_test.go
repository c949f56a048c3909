package testkit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.Dispatch(map[string]func() int{
		"echo-env": func() int { os.Stdout.WriteString(os.Getenv("TESTKIT_TEST_VALUE")); return 0 },
		"status-7": func() int { return 7 },
	})
	os.Exit(m.Run())
}

// A named child runs instead of the tests, sees the env it was given and
// exits with its own status; an unknown name exits 2.
func TestChild(t *testing.T) {
	out, err := testkit.Child(t, "echo-env", "TESTKIT_TEST_VALUE=from-parent").Output()
	if err != nil || string(out) != "from-parent" {
		t.Errorf("child echo-env = %q, %v; want %q", out, err, "from-parent")
	}
	for name, want := range map[string]int{"status-7": 7, "no-such-child": 2} {
		err := testkit.Child(t, name).Run()
		if ee, ok := err.(interface{ ExitCode() int }); !ok || ee.ExitCode() != want {
			t.Errorf("child %s: %v, want exit status %d", name, err, want)
		}
	}
}

// A helper test does nothing in an ordinary run and runs when re-run for
// it by HelperTest.
func TestHelperTest(t *testing.T) {
	out, err := testkit.HelperTest(t, "TestHelperBody", "TESTKIT_TEST_VALUE=x").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "helper body ran with x") {
		t.Errorf("helper run: %v\n%s", err, out)
	}
}

func TestHelperBody(t *testing.T) {
	testkit.OnlyAsHelper(t)
	t.Logf("helper body ran with %s", os.Getenv("TESTKIT_TEST_VALUE"))
}

// Unavailable skips outside CI and fails under CI=true; observed from a
// helper run with each setting.
func TestUnavailableFailsUnderCI(t *testing.T) {
	for ci, wantErr := range map[string]bool{"true": true, "": false} {
		out, err := testkit.HelperTest(t, "TestUnavailableBody", "CI="+ci).CombinedOutput()
		if (err != nil) != wantErr {
			t.Errorf("CI=%q: %v, want failure %v\n%s", ci, err, wantErr, out)
		}
		if !wantErr && !strings.Contains(string(out), "SKIP: TestUnavailableBody") {
			t.Errorf("CI=%q: the body did not skip:\n%s", ci, out)
		}
	}
}

func TestUnavailableBody(t *testing.T) {
	testkit.OnlyAsHelper(t)
	testkit.Unavailable(t, "a feature this host lacks")
	t.Error("Unavailable returned")
}

// The model upstream answers only its key, in each provider's header, and
// records what it saw; the target counts what reached it.
func TestFakes(t *testing.T) {
	up := testkit.NewModelUpstream(t, "real-key", "hello there")
	post := func(path, hk, hv string) (int, string) {
		req, _ := http.NewRequest("POST", up.URL()+path, strings.NewReader(`{"model":"m-1"}`))
		req.Header.Set(hk, hv)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/v1/messages", "x-api-key", "real-key"); code != 200 || !strings.Contains(body, "hello there") {
		t.Errorf("anthropic with the key = %d %s", code, body)
	}
	if code, body := post("/v1/chat/completions", "Authorization", "Bearer real-key"); code != 200 || !strings.Contains(body, "hello there") {
		t.Errorf("openai with the key = %d %s", code, body)
	}
	if code, _ := post("/v1/messages", "x-api-key", "placeholder"); code != 401 {
		t.Errorf("anthropic with a placeholder = %d, want 401", code)
	}
	if s := up.Seen(); len(s) != 3 || s[0].APIKey != "real-key" || s[2].APIKey != "placeholder" || s[1].Model != "m-1" {
		t.Errorf("Seen() = %+v", s)
	}

	tg := testkit.NewTarget(t, "target-body")
	if tg.Hits() != 0 {
		t.Fatalf("Hits() before any request = %d", tg.Hits())
	}
	resp, err := http.Get("http://127.0.0.1:" + tg.Port() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "target-body" || tg.Hits() != 1 {
		t.Errorf("GET target = %q, hits %d; want target-body, 1", b, tg.Hits())
	}
}

// A server from ServeAs hands its handler requests carrying the identity;
// the control, the same handler behind a plain server, sees none.
func TestServeAs(t *testing.T) {
	id := crossing.Identity{Workload: "wl", Tenant: "t", Purpose: "p", SandboxID: "sb-1"}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := crossing.IdentityFrom(r.Context())
		fmt.Fprintf(w, "%v %+v", ok, got)
	})
	get := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got, want := get(testkit.ServeAs(t, h, id).URL), fmt.Sprintf("true %+v", id); got != want {
		t.Errorf("ServeAs: the handler saw %q, want %q", got, want)
	}
	plain := httptest.NewServer(h)
	defer plain.Close()
	if got := get(plain.URL); !strings.HasPrefix(got, "false") {
		t.Errorf("plain server: the handler saw %q, want no identity", got)
	}
}

// The tmux driver types into a real terminal, reads the screen, resizes
// and sees the exit status.
func TestTmux(t *testing.T) {
	x := testkit.NewTmux(t, 80, 24, []string{"GREETING=hi there"}, "/bin/sh", "-c", `echo "$GREETING"; stty size; read line; echo "got:$line"; stty size; exit 3`)
	x.WaitFor(`hi there\n24 80`, 10*time.Second)
	if pid := x.PID(); pid <= 0 {
		t.Fatalf("no pid for the command: %d", pid)
	}
	x.Resize(100, 30)
	x.Type("typed 'quoted' text")
	x.WaitFor(`got:typed 'quoted' text\n30 100`, 10*time.Second)
	if code := x.WaitExit(10 * time.Second); code != 3 {
		t.Fatalf("exit status %d, want 3", code)
	}
}
