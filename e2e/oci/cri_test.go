package oci

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRI drives cordon the way kubelet does: a private containerd with
// its CRI plugin (handlers runc and cordon), and the CRI API. Each subtest
// runs its own pods in that one containerd (starting one and importing
// the image takes tens of seconds on a small host).
func TestCRI(t *testing.T) {
	e := startEngine(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *engine)
	}{
		{"Lifecycle", testCRILifecycle},
		{"ExecSyncOutput", testCRIExecSyncOutput},
		{"Posture", testCRIPosture},
		{"Refusals", testCRIRefusals},
		{"EscapeProbeSeen", testCRIEscapeProbeSeen},
		{"EscapeNetwork", testCRIEscapeNetwork},
		{"EscapeHostProcess", testCRIEscapeHostProcess},
		{"EscapeMount", testCRIEscapeMount},
		{"EscapeLandlock", testCRIEscapeLandlock},
		{"ShimKilledResidue", testCRIShimKilledResidue},
		{"EngineNetwork", testCRIEngineNetwork},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, e) })
	}
}

// ignoresTERM is a program that ignores SIGTERM (the disposition survives
// exec): only the SIGKILL after the stop timeout ends it.
var ignoresTERM = []string{"sh", "-c", "trap '' TERM; exec sleep 86400"}

// testCRILifecycle drives a pod through the CRI API as kubelet does, under
// each runtime handler: RunPodSandbox, CreateContainer, StartContainer,
// ExecSync (stdout, stderr, exit code), StopContainer of a program that
// ignores SIGTERM (killed after the stop timeout: exit 137), then
// RemoveContainer, StopPodSandbox, RemovePodSandbox; the runtime's state
// for both is gone from its root afterwards. runc is the harness's control.
func testCRILifecycle(t *testing.T, e *engine) {
	for _, h := range handlers {
		t.Run(h, func(t *testing.T) {
			p := e.runPod(t, h)
			id := e.runContainer(t, p, ignoresTERM)
			st, err := e.cri.Status(e.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != cri.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("after StartContainer: state %v, want RUNNING", st.State)
			}
			for _, s := range []string{p.id, id} {
				if _, err := os.Stat(filepath.Join(e.runtimeRoot(h), s)); err != nil {
					t.Errorf("runtime state of %s while it runs: %v", s, err)
				}
			}
			out, errb, code, err := e.cri.ExecSync(e.ctx, id, 30*time.Second, "sh", "-c", "echo out; echo err >&2; exit 7")
			if err != nil || out != "out\n" || errb != "err\n" || code != 7 {
				t.Errorf("ExecSync = %q, %q, %d, %v; want \"out\\n\", \"err\\n\", 7", out, errb, code, err)
			}
			const grace = 2 * time.Second
			start := time.Now()
			if err := e.cri.StopContainer(e.ctx, id, grace); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			st, err = e.cri.Status(e.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			// The program ignores SIGTERM: it can only have ended by the
			// SIGKILL sent once the timeout passed.
			if st.State != cri.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 || took < grace {
				t.Errorf("StopContainer(timeout %v) took %v: state %v, exit %d; want EXITED 137 after at least the timeout", grace, took, st.State, st.ExitCode)
			}
			if err := e.cri.RemoveContainer(e.ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := e.cri.Status(e.ctx, id); grpcstatus.Code(err) != codes.NotFound {
				t.Errorf("ContainerStatus after RemoveContainer: %v, want NotFound", err)
			}
			if err := e.cri.StopPod(e.ctx, p.id); err != nil {
				t.Fatal(err)
			}
			if err := e.cri.RemovePod(e.ctx, p.id); err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{p.id, id} {
				if _, err := os.Stat(filepath.Join(e.runtimeRoot(h), s)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("runtime state of %s after removal: %v, want none", s, err)
				}
			}
		})
	}
}

// testCRIExecSyncOutput checks that what ExecSync returns is the exec'd
// program's: a larger output and a signal's exit status, per handler.
func testCRIExecSyncOutput(t *testing.T, e *engine) {
	for _, h := range handlers {
		t.Run(h, func(t *testing.T) {
			p := e.runPod(t, h)
			id := e.runContainer(t, p, []string{"sleep", "86400"})
			out, _, code, err := e.cri.ExecSync(e.ctx, id, 30*time.Second, "sh", "-c", "seq 1 20000")
			if err != nil || code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 20000 || !strings.HasSuffix(out, "\n20000\n") {
				t.Errorf("ExecSync seq 1 20000: %d bytes, exit %d, %v; want 20000 lines ending in 20000", len(out), code, err)
			}
			_, _, code, err = e.cri.ExecSync(e.ctx, id, 30*time.Second, "sh", "-c", "kill -KILL $$")
			if err != nil || code != 137 {
				t.Errorf("ExecSync of a program killed by SIGKILL: exit %d, %v; want 137", code, err)
			}
		})
	}
}
