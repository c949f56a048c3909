package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// ociLifecycle is the part of the OCI runtime-tools validation suite
// (scripts/oci-validate.sh, docs/oci.md "OCI runtime-tools validation")
// that must pass against cordon-oci: the lifecycle (create, start, state,
// kill, delete) and what runtimetest checks inside a default container and
// in one with process args, env and cwd. known lists, per program, the
// test points that fail by design (docs/oci.md "What config.json may ask for") or
// because of the suite itself (they fail against runc too), each with
// why; any other "not ok" fails this test.
var ociLifecycle = []struct {
	program string
	known   map[*regexp.Regexp]string
}{
	{"create", nil},
	{"start", map[*regexp.Regexp]string{
		regexp.MustCompile("^`start` operation MUST run the user-specified program as specified by `process`$"):              "the program writes /output at the root's top level: Landlock lets a writable image root write in its directories, not in / itself",
		regexp.MustCompile("^attempting to `start` a container that is not `created` MUST have no effect on the container$"): "reads the same /output",
		regexp.MustCompile("^exit status 1(25)?$"): "the suite's last case creates a bundle without process, which runc refuses at create too",
	}},
	{"state", nil},
	{"kill", nil},
	{"delete", map[*regexp.Regexp]string{
		regexp.MustCompile("^attempting to `delete` a container that is not `stopped` MUST (generate an error|have no effect on the container)$"): "delete removes a created container, as runc does: containerd's shim deletes one without --force",
	}},
	{"default", insideKnown},
	{"process", insideKnown},
}

// insideKnown are what runtimetest, run as a container's program, finds
// different by design in every cordon container.
var insideKnown = map[*regexp.Regexp]string{
	regexp.MustCompile(`^expected (bounding|effective|inheritable|permitted|ambient) capability CAP_[A-Z_]+ set$`): "no capability is granted (recorded in dev.cordon.not-granted)",
	regexp.MustCompile(`^has expected noNewPrivileges$`):                                                           "no_new_privs is always set (the bundle asked for false)",
	regexp.MustCompile(`^mounts\[[0-9]+\] \((/dev/mqueue|/sys)\) found$`):                                          "cordon mounts no /dev/mqueue and no /sys (recorded in dev.cordon.not-honoured)",
}

// TestOCIRuntimeToolsLifecycle runs the lifecycle programs of the OCI
// runtime-tools validation suite (built from its Go module at the version
// scripts/oci-validate.sh pins) against cordon-oci, behind the wrapper
// that gives the suite's bundles an engine's default masks. The control:
// without the wrapper cordon refuses the suite's bundle at create, naming
// linux.maskedPaths — the refusal, not the suite, is what the wrapper gets
// past.
func TestOCIRuntimeToolsLifecycle(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "scripts/oci-validate.sh is a bash script", "bash")
	testkit.RequireCommand(t, "scripts/oci-engine-defaults.sh edits config.json with jq", "jq")
	testkit.RequireCommand(t, "the suite unpacks its rootfs with tar", "tar")
	dir := t.TempDir()
	oci := filepath.Join(dir, "cordon-oci")
	if err := os.Symlink(cordonBin, oci); err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(dir, "suite")
	state := newStateDir(t)
	programs := make([]string, 0, len(ociLifecycle))
	for _, p := range ociLifecycle {
		programs = append(programs, p.program)
	}

	out, code := ociValidate(t, suite, state, append([]string{"--engine-defaults", oci}, programs...)...)
	if code == 2 {
		testkit.Unavailable(t, "the runtime-tools suite could not be built (Go module proxy?):\n%s", out)
	}
	t.Logf("scripts/oci-validate.sh --engine-defaults:\n%s", out)
	results := filepath.Join(suite, "results", "cordon-oci-engine-defaults")
	for _, p := range ociLifecycle {
		tap, err := os.ReadFile(filepath.Join(results, p.program+".tap"))
		if err != nil {
			t.Errorf("%s: no TAP output: %v", p.program, err)
			continue
		}
		pass, notOK := tapResults(tap)
		if pass == 0 {
			stderr, _ := os.ReadFile(filepath.Join(results, p.program+".err"))
			t.Errorf("%s: no test point passed; TAP:\n%s\nstderr:\n%s", p.program, tap, stderr)
			continue
		}
		known := map[string]int{}
		for _, d := range notOK {
			if why := knownFailure(p.known, d); why != "" {
				known[why]++
				continue
			}
			t.Errorf("%s: not ok - %s", p.program, d)
		}
		for why, n := range known {
			t.Logf("%s: %d known failures: %s", p.program, n, why)
		}
	}

	// The control: the same suite without an engine's masks.
	out, code = ociValidate(t, suite, state, oci, "create")
	if code == 2 {
		t.Fatalf("the suite built a moment ago does not build now:\n%s", out)
	}
	tap, err := os.ReadFile(filepath.Join(suite, "results", "cordon-oci", "create.tap"))
	if err != nil {
		t.Fatalf("control: no TAP output: %v\n%s", err, out)
	}
	if _, notOK := tapResults(tap); len(notOK) == 0 || !bytes.Contains(tap, []byte("linux.maskedPaths")) {
		t.Errorf("control: a bundle without masks was not refused at create naming linux.maskedPaths:\n%s", tap)
	}
}

// ociValidate runs scripts/oci-validate.sh with args, its suite built and
// run in dir and cordon's state in state; it returns the TAP summary and
// the exit status (2: the suite could not be built).
func ociValidate(t *testing.T, dir, state string, args ...string) (string, int) {
	t.Helper()
	// Building the suite the first time takes a minute; each program
	// runs in a few seconds.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"../scripts/oci-validate.sh"}, args...)...)
	cmd.Env = append(os.Environ(), "OCI_VALIDATE_DIR="+dir, "CORDON_STATE_DIR="+state, "OCI_VALIDATE_TIMEOUT=60")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("scripts/oci-validate.sh: %v\n%s", err, out.String())
	}
	return out.String(), 0
}

// knownFailure is why the failing test point d is expected, or "".
func knownFailure(known map[*regexp.Regexp]string, d string) string {
	for re, why := range known {
		if re.MatchString(d) {
			return why
		}
	}
	return ""
}

var tapLine = regexp.MustCompile(`^(ok|not ok) [0-9]+( - (.*))?$`)

// tapResults counts a TAP stream's passing test points (not skips) and
// returns the descriptions of the failing ones. Nested YAML blocks are
// indented, so only top-level lines count.
func tapResults(tap []byte) (pass int, notOK []string) {
	s := bufio.NewScanner(bytes.NewReader(tap))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		m := tapLine.FindStringSubmatch(s.Text())
		switch {
		case m == nil:
		case m[1] == "not ok":
			notOK = append(notOK, m[3])
		case !strings.Contains(strings.ToUpper(s.Text()), "# SKIP"):
			pass++
		}
	}
	return pass, notOK
}
