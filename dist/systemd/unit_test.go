package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// unit parses cordon.service: section → key → values (in order).
func unit(t *testing.T) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open("cordon.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	sec := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			sec = l[1 : len(l)-1]
			out[sec] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || sec == "" {
				t.Fatalf("cordon.service:%d: not a directive: %q", n, l)
			}
			out[sec][k] = append(out[sec][k], v)
		}
	}
	return out
}

// The directives the daemon relies on are there, and the ones that would
// break it or its sandboxes are not.
func TestUnitDirectives(t *testing.T) {
	u := unit(t)
	svc := u["Service"]
	for k, want := range map[string]string{
		"Type":                     "notify",
		"NotifyAccess":             "main",
		"ExecStart":                "/usr/bin/cordon daemon",
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"KillMode":                 "process",
		"Restart":                  "on-failure",
		"RuntimeDirectory":         "cordon",
		"RuntimeDirectoryPreserve": "yes",
		"StateDirectory":           "cordon",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want %q", k, got, want)
		}
	}
	if got := u["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("[Install] WantedBy = %q", got)
	}
	for _, k := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges", "PrivateNetwork", "PrivateDevices",
		"RestrictNamespaces", "CapabilityBoundingSet", "MemoryDenyWriteExecute", "ProtectKernelTunables", "ProtectKernelModules",
		"ProtectControlGroups", "ReadOnlyPaths", "OOMScoreAdjust", "User", "DynamicUser", "DevicePolicy", "DeviceAllow",
		"SystemCallFilter", "RestrictAddressFamilies", "LockPersonality", "ProtectClock", "Delegate"} {
		if v, ok := svc[k]; ok {
			t.Errorf("[Service] %s=%q is set; it breaks the daemon or its sandboxes (see the unit's comments)", k, v)
		}
	}
}

// systemd-analyze verify accepts the unit without a warning (with the
// binary path pointed at one that exists; the man page is not checked:
// it is installed by the package). Skipped where systemd is not installed,
// failed under CI=true (scripts/test.sh installs it); TestUnitDirectives
// still checks what the daemon relies on.
func TestUnitVerifies(t *testing.T) {
	sa := testkit.RequireCommand(t, "checks the unit (apt-get install systemd; scripts/test.sh does)", "systemd-analyze")
	b, err := os.ReadFile("cordon.service")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cordon.service")
	os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/bin/cordon", "/bin/true")), 0o644)
	out, err := exec.Command(sa, "verify", "--man=no", p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Positive control: a typo is reported.
	bad := filepath.Join(t.TempDir(), "cordon.service")
	os.WriteFile(bad, []byte(strings.Replace(strings.ReplaceAll(string(b), "/usr/bin/cordon", "/bin/true"), "Type=notify", "Type=notiffy", 1)), 0o644)
	if out, _ := exec.Command(sa, "verify", "--man=no", bad).CombinedOutput(); !strings.Contains(string(out), "notiffy") {
		t.Fatalf("control: a bad Type was not reported: %s", out)
	}
}
