package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

func load(t *testing.T, name string) (*specs.Spec, []byte) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s, b
}

func noHost(specs.LinuxNamespaceType, string) (bool, error) { return false, nil }

var opts = Options{Level: sandbox.DedicatedContainer, ConfigDir: "/etc/cordon/oci", HostNamespace: noHost}

// TestMapDocker: Docker's own config.json (captured from docker.io's
// dockerd with a recording runtime) maps, with what is not granted named.
func TestMapDocker(t *testing.T) {
	s, raw := load(t, "docker-config.json")
	m, err := Map(s, raw, "/bundle", opts)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	if got := strings.Join(m.Spec.Argv, " "); got != "/bin/echo hi" {
		t.Errorf("argv %q", got)
	}
	if m.Spec.Image == nil || m.Spec.Image.UID != 0 || !m.Spec.Image.Writable || m.Spec.Image.Dir != "/" {
		t.Errorf("image %+v", m.Spec.Image)
	}
	if m.Spec.Level != sandbox.DedicatedContainer || m.Config != "" || m.Spec.Terminal != nil {
		t.Errorf("level %v config %q terminal %v", m.Spec.Level, m.Config, m.Spec.Terminal)
	}
	granted := strings.Join(m.NotGranted, "\n")
	for _, want := range []string{"CAP_CHOWN", "CAP_NET_RAW", "linux.seccomp"} {
		if !strings.Contains(granted, want) {
			t.Errorf("not-granted list lacks %s:\n%s", want, granted)
		}
	}
	honoured := strings.Join(m.NotHonoured, "\n")
	for _, want := range []string{"/etc/resolv.conf", "ip_unprivileged_port_start", "cgroupsPath", "/sys"} {
		if !strings.Contains(honoured, want) {
			t.Errorf("not-honoured list lacks %s:\n%s", want, honoured)
		}
	}
	for _, b := range m.Spec.Binds {
		if b.Target == "/etc/resolv.conf" && b.Writable {
			t.Errorf("engine file bound writable: %+v", b)
		}
	}
	if !strings.HasPrefix(m.Digest, "sha256:") {
		t.Errorf("digest %q", m.Digest)
	}
	tty, rawTTY := load(t, "docker-tty-config.json")
	mt, err := Map(tty, rawTTY, "/bundle", opts)
	if err != nil || mt.Spec.Terminal == nil || !mt.Spec.Image.TerminalAtStart {
		t.Fatalf("tty bundle: %v %+v", err, mt)
	}
}

// TestMapRefuses: each unsafe field is refused with its name; the
// unchanged bundle is the positive control (it maps).
func TestMapRefuses(t *testing.T) {
	cases := []struct {
		name, field string
		mut         func(s *specs.Spec)
	}{
		{"privileged masks", "linux.maskedPaths", func(s *specs.Spec) { s.Linux.MaskedPaths = nil }},
		{"readonly paths", "linux.readonlyPaths", func(s *specs.Spec) { s.Linux.ReadonlyPaths = nil }},
		{"seccomp unconfined", "linux.seccomp", func(s *specs.Spec) { s.Linux.Seccomp = nil }},
		{"host network", "linux.namespaces", func(s *specs.Spec) { s.Linux.Namespaces = dropNS(s.Linux.Namespaces, specs.NetworkNamespace) }},
		{"host pid", "linux.namespaces", func(s *specs.Spec) { s.Linux.Namespaces = dropNS(s.Linux.Namespaces, specs.PIDNamespace) }},
		{"device", "linux.devices[0]", func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kmsg", Type: "c", Major: 1, Minor: 11}}
		}},
		{"all devices rule", "linux.resources.devices", func(s *specs.Spec) {
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "a", Access: "rwm"})
		}},
		{"writable sysfs", "mounts[3] (/sys)", func(s *specs.Spec) { s.Mounts[3].Options = []string{"nosuid"} }},
		{"host sysctl", "linux.sysctl.kernel.core_pattern", func(s *specs.Spec) { s.Linux.Sysctl["kernel.core_pattern"] = "|/x" }},
		{"unknown mount", "mounts[0]", func(s *specs.Spec) { s.Mounts = append([]specs.Mount{{Destination: "/x", Type: "nfs"}}, s.Mounts...) }},
		{"no linux", "linux", func(s *specs.Spec) { s.Linux = nil }},
		{"bind under proc", "/proc/sys", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/proc/sys", Type: "bind", Source: "/tmp", Options: []string{"rbind"}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, raw := load(t, "docker-config.json")
			if _, err := Map(s, raw, "/bundle", opts); err != nil {
				t.Fatalf("control: %v", err)
			}
			c.mut(s)
			_, err := Map(s, raw, "/bundle", opts)
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("want a refusal naming %q, got %v", c.field, err)
			}
			if !fe.Unsafe || failure.KindOf(err) != failure.KindPolicyRejected {
				if c.name != "bind under proc" {
					t.Errorf("kind %v unsafe %v", failure.KindOf(err), fe.Unsafe)
				}
			}
		})
	}
}

func dropNS(ns []specs.LinuxNamespace, t specs.LinuxNamespaceType) []specs.LinuxNamespace {
	var out []specs.LinuxNamespace
	for _, n := range ns {
		if n.Type != t {
			out = append(out, n)
		}
	}
	return out
}

// TestMapNamespacePaths: a path to the host's namespace is refused; a
// path to another namespace, or to a cordon keeper's, is not joined and
// is recorded.
func TestMapNamespacePaths(t *testing.T) {
	s, raw := load(t, "docker-config.json")
	for i := range s.Linux.Namespaces {
		if s.Linux.Namespaces[i].Type == specs.IPCNamespace {
			s.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/ipc", os.Getpid())
		}
	}
	o := opts
	o.HostNamespace = nil // the real check: the runtime's own ipc namespace is the host's
	if _, err := Map(s, raw, "/b", o); err == nil || !strings.Contains(err.Error(), "host's own ipc namespace") {
		t.Fatalf("host ipc path: %v", err)
	}
	o.IsKeeper = func(pid int) bool { return pid > 0 }
	m, err := Map(s, raw, "/b", o)
	if err != nil || !strings.Contains(strings.Join(m.NotHonoured, "\n"), "another cordon container's") {
		t.Fatalf("keeper path: %v %v", err, m)
	}
}

// TestMapGatewayAnnotation: the annotation names a configuration in the
// operator's directory; a path or traversal is refused.
func TestMapGatewayAnnotation(t *testing.T) {
	for name, ok := range map[string]bool{"agent-a": true, "a.b_c": true, "../x": false, "/etc/x": false, "A": false, "": false, "a/b": false} {
		s, raw := load(t, "docker-config.json")
		s.Annotations = map[string]string{AnnotationConfig: name}
		m, err := Map(s, raw, "/b", opts)
		if ok != (err == nil) {
			t.Errorf("%q: err %v", name, err)
			continue
		}
		if ok && m.Config != "/etc/cordon/oci/"+name+".yaml" {
			t.Errorf("%q: config %q", name, m.Config)
		}
	}
}

// FuzzMap: any bytes either fail to load/map with an error, or map to a
// spec with a program, an absolute root and a level.
func FuzzMap(f *testing.F) {
	for _, n := range []string{"docker-config.json", "docker-tty-config.json"} {
		b, err := os.ReadFile("testdata/" + n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s specs.Spec
		if json.Unmarshal(b, &s) != nil {
			return
		}
		m, err := Map(&s, b, "/bundle", opts)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(m.Spec.Argv) == 0 || !strings.HasPrefix(m.Spec.Rootfs, "/") || m.Spec.Image == nil {
			t.Fatalf("mapped without program/root: %+v", m.Spec)
		}
	})
}

// TestFeaturesSaysNone: features reports hooks and capabilities as empty
// lists (none run, none granted), not absent ("not reported").
func TestFeaturesSaysNone(t *testing.T) {
	b, err := FeaturesJSON("test")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if h, ok := m["hooks"].([]any); !ok || len(h) != 0 {
		t.Errorf("hooks = %v, want []", m["hooks"])
	}
	l, _ := m["linux"].(map[string]any)
	if c, ok := l["capabilities"].([]any); !ok || len(c) != 0 {
		t.Errorf("linux.capabilities = %v, want []", l["capabilities"])
	}
}
