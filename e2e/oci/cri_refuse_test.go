package oci

import (
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// testCRIRefusals: what cordon cannot make safe, asked for the way
// kubelet asks, is refused under the cordon handler with an error naming
// the field — a host network namespace (hostNetwork), a privileged
// container, seccomp Unconfined — and the same request under runc works
// (the control: the refusal is cordon's, not the harness's).
func testCRIRefusals(t *testing.T, e *engine) {
	cases := []struct {
		name  string
		pod   func(*cri.PodSandboxConfig)
		ctr   func(*cri.ContainerConfig) // nil: the pod itself is refused
		field []string                   // one of these names the field
	}{
		{"hostNetwork", func(p *cri.PodSandboxConfig) {
			p.Linux.SecurityContext.NamespaceOptions.Network = cri.NamespaceMode_NODE
			p.Hostname = "" // kubelet sends none: the pod shares the host's UTS namespace too
		}, nil, []string{"network"}},
		{"seccomp Unconfined", nil, func(c *cri.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &cri.SecurityProfile{ProfileType: cri.SecurityProfile_Unconfined}
		}, []string{"seccomp"}},
		{"privileged", func(p *cri.PodSandboxConfig) {
			p.Linux.SecurityContext.Privileged = true
		}, func(c *cri.ContainerConfig) {
			c.Linux.SecurityContext.Privileged = true
		}, []string{"privileged", "linux.devices", "linux.seccomp", "maskedPaths", "readonlyPaths", "sysfs"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, h := range handlers {
				err := e.tryPod(t, h, tc.pod, tc.ctr)
				switch {
				case h == "runc" && err != nil:
					t.Errorf("runc (control): %v", err)
				case h == engines.CordonHandler && err == nil:
					t.Errorf("cordon accepted a %s container", tc.name)
				case h == engines.CordonHandler && !containsAny(err.Error(), tc.field):
					t.Errorf("cordon refused %s with %q, want an error naming one of %q", tc.name, err, tc.field)
				}
			}
		})
	}
}

// tryPod runs a pod (modified by pod) and, unless ctr is nil, creates and
// starts a container in it (modified by ctr); it returns the first error.
// The pod is removed at the test's end either way.
func (e *engine) tryPod(t *testing.T, h string, pod func(*cri.PodSandboxConfig), ctr func(*cri.ContainerConfig)) error {
	t.Helper()
	cfg := engines.PodConfig("r-"+h+"-"+hexID(4), hexID(8), e.c.CgroupParent)
	if pod != nil {
		pod(cfg)
	}
	id, err := e.cri.RunPod(e.ctx, cfg, h)
	if err != nil {
		return err
	}
	t.Cleanup(func() {
		_ = e.cri.StopPod(e.ctx, id)
		_ = e.cri.RemovePod(e.ctx, id)
	})
	if ctr == nil {
		return nil
	}
	c := engines.ContainerConfig("c", e.c.Image, []string{"sleep", "86400"})
	ctr(c)
	cid, err := e.cri.CreateContainer(e.ctx, id, c, cfg)
	if err != nil {
		return err
	}
	return e.cri.StartContainer(e.ctx, cid)
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
