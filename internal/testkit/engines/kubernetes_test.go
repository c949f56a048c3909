package engines

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// manifestDir holds the Kubernetes manifests (deploy/kubernetes).
const manifestDir = "../../../deploy/kubernetes"

// nodeBinary and nodeRoot are where the DaemonSet installs cordon-oci and
// the Root the node's containerd table gives it.
const (
	nodeBinary = "/opt/cordon/bin/cordon-oci"
	nodeRoot   = "/run/cordon-oci"
)

type doc = map[string]any

// get walks m by keys (map keys, or list indexes as ints).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(doc)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// loadManifests parses every YAML document of deploy/kubernetes by kind.
func loadManifests(t *testing.T) map[string][]doc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", manifestDir, err)
	}
	known := map[string]string{"RuntimeClass": "node.k8s.io/v1", "Namespace": "v1", "ServiceAccount": "v1", "DaemonSet": "apps/v1", "Pod": "v1"}
	byKind := map[string][]doc{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var d doc
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := d["kind"].(string)
			if want, ok := known[kind]; !ok || d["apiVersion"] != want {
				t.Errorf("%s: kind %q apiVersion %v; want one of %v", f, kind, d["apiVersion"], known)
			}
			if name, _ := get(d, "metadata", "name").(string); name == "" {
				t.Errorf("%s: a %s without metadata.name", f, kind)
			}
			byKind[kind] = append(byKind[kind], d)
		}
	}
	return byKind
}

// TestKubernetesManifests checks deploy/kubernetes against what the CRI
// tests run: the RuntimeClass's handler is the handler name the tests
// give containerd, the node's containerd table is the one the tests'
// containerd is configured with (RuntimeTable) at the DaemonSet's install
// path, the DaemonSet installs the binary and its cordon-oci name there
// and runs cordon daemon privileged in the host's PID namespace, and the
// example pod selects the RuntimeClass with the seccomp profile cordon
// requires.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	for _, k := range []string{"RuntimeClass", "Namespace", "ServiceAccount", "DaemonSet", "Pod"} {
		if len(m[k]) != 1 {
			t.Fatalf("%d %s manifests, want 1", len(m[k]), k)
		}
	}
	rc := m["RuntimeClass"][0]
	if rc["handler"] != CordonHandler {
		t.Errorf("RuntimeClass handler = %v, want %q (the handler the CRI tests configure)", rc["handler"], CordonHandler)
	}
	table, err := os.ReadFile(filepath.Join(manifestDir, "containerd-cordon.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := RuntimeTable(CordonHandler, nodeBinary, nodeRoot); !strings.Contains(string(table), want) {
		t.Errorf("containerd-cordon.toml does not hold the table the CRI tests use:\n%s", want)
	}
	checkDaemonSet(t, m["DaemonSet"][0], m["ServiceAccount"][0])
	pod := m["Pod"][0]
	if get(pod, "spec", "runtimeClassName") != get(rc, "metadata", "name") {
		t.Errorf("example pod runtimeClassName = %v, want %v", get(pod, "spec", "runtimeClassName"), get(rc, "metadata", "name"))
	}
	if get(pod, "spec", "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("example pod: seccompProfile %v, want RuntimeDefault (cordon refuses Unconfined)", get(pod, "spec", "securityContext", "seccompProfile"))
	}
	docker, err := os.ReadFile(filepath.Join(manifestDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"COPY cordon /cordon", "COPY containerd-cordon.toml /containerd-cordon.toml"} {
		if !strings.Contains(string(docker), f) {
			t.Errorf("Dockerfile lacks %q, which the install container reads", f)
		}
	}
}

func checkDaemonSet(t *testing.T, ds, sa doc) {
	t.Helper()
	spec := get(ds, "spec", "template", "spec")
	if get(ds, "metadata", "namespace") != get(sa, "metadata", "namespace") || get(spec, "serviceAccountName") != get(sa, "metadata", "name") {
		t.Errorf("DaemonSet service account %v/%v, want %v/%v", get(ds, "metadata", "namespace"), get(spec, "serviceAccountName"), get(sa, "metadata", "namespace"), get(sa, "metadata", "name"))
	}
	sel, _ := get(ds, "spec", "selector", "matchLabels").(doc)
	labels, _ := get(ds, "spec", "template", "metadata", "labels").(doc)
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("DaemonSet selector %s=%v does not match the pod template's labels %v", k, v, labels)
		}
	}
	if len(sel) == 0 {
		t.Error("DaemonSet has no selector")
	}
	if get(spec, "hostPID") != true {
		t.Error("DaemonSet: hostPID is not true")
	}
	install := strings.Join(strs(get(spec, "initContainers", 0, "command")), " ")
	for _, w := range []string{"/host" + filepath.Dir(nodeBinary) + "/cordon", "ln -sfn cordon /host" + nodeBinary} {
		if !strings.Contains(install, w) {
			t.Errorf("install container command %q lacks %q", install, w)
		}
	}
	var paths []string
	vols, _ := get(spec, "volumes").([]any)
	for _, v := range vols {
		if p, ok := get(v, "hostPath", "path").(string); ok {
			paths = append(paths, p)
		}
	}
	if !slices.Contains(paths, filepath.Dir(nodeBinary)) {
		t.Errorf("DaemonSet hostPath volumes %v, want %s", paths, filepath.Dir(nodeBinary))
	}
	daemon := get(spec, "containers", 0)
	cmd := strs(get(daemon, "command"))
	if get(daemon, "securityContext", "privileged") != true || !slices.Contains(cmd, filepath.Dir(nodeBinary)+"/cordon") || !slices.Contains(cmd, "daemon") {
		t.Errorf("daemon container: privileged %v, command %q; want privileged, running %s/cordon daemon", get(daemon, "securityContext", "privileged"), cmd, filepath.Dir(nodeBinary))
	}
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
