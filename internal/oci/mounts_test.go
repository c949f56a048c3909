package oci

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestMapBindReadOnlyOptions: a bind asked read-only stays read-only
// whatever spelling the engine uses. Found in review: "rro" (recursive
// read-only: runc ≥ 1.1; containerd for Kubernetes' recursiveReadOnly,
// Docker ≥ 25 for --mount readonly) was not read as read-only, so the
// bind was mounted writable. The control: a bind without a read-only
// option is writable, and one with "ro" is not.
func TestMapBindReadOnlyOptions(t *testing.T) {
	for _, c := range []struct {
		opts     []string
		writable bool
	}{
		{[]string{"rbind", "rprivate"}, true}, // control: writable asked
		{[]string{"rbind", "ro"}, false},
		{[]string{"rbind", "rro"}, false},
		{[]string{"rbind", "rro", "rprivate"}, false},
		{[]string{"rbind", "ro", "rw"}, false}, // never widened
	} {
		s, raw := load(t, "docker-config.json")
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/srv/data", Options: c.opts})
		m, err := Map(s, raw, "/bundle", opts)
		if err != nil {
			t.Fatalf("%v: Map: %v", c.opts, err)
		}
		found := false
		for _, b := range m.Spec.Binds {
			if b.Target == "/data" {
				found = true
				if b.Writable != c.writable {
					t.Errorf("options %v: bind writable=%v, want %v", c.opts, b.Writable, c.writable)
				}
			}
		}
		if !found {
			t.Errorf("options %v: no bind of /data in %+v", c.opts, m.Spec.Binds)
		}
	}
}

// TestMapTmpfsReadOnlyRecorded: a tmpfs asked read-only (docker --tmpfs
// /x:ro) is mounted writable (a scratch tmpfs of the sandbox's own); that
// is said, not silently ignored.
func TestMapTmpfsReadOnlyRecorded(t *testing.T) {
	s, raw := load(t, "docker-config.json")
	s.Mounts = append(s.Mounts, specs.Mount{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "size=1m"}})
	m, err := Map(s, raw, "/bundle", opts)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	if !strings.Contains(strings.Join(m.NotHonoured, "\n"), "/scratch") {
		t.Errorf("a read-only tmpfs mounted writable is not recorded:\n%s", strings.Join(m.NotHonoured, "\n"))
	}
	// Control: a writable tmpfs is mounted and not recorded.
	s2, raw2 := load(t, "docker-config.json")
	s2.Mounts = append(s2.Mounts, specs.Mount{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}})
	m2, err := Map(s2, raw2, "/bundle", opts)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	if strings.Contains(strings.Join(m2.NotHonoured, "\n"), "/scratch") || len(m2.Spec.Image.Tmpfs) == 0 {
		t.Errorf("control: writable tmpfs %+v, notes %v", m2.Spec.Image.Tmpfs, m2.NotHonoured)
	}
}

// TestMapNoexecRecorded: noexec asked for a bind or a tmpfs (Docker's
// --tmpfs default) is not applied by cordon; found in review: it was
// ignored silently and `features` claimed it. It is recorded now, and
// features lists what is honoured (rro: cordon's binds are never
// recursive, so read-only is recursively so). The control: a bind
// without noexec records nothing about it.
func TestMapNoexecRecorded(t *testing.T) {
	for _, c := range []struct {
		m    specs.Mount
		want bool
	}{
		{specs.Mount{Destination: "/data", Type: "bind", Source: "/srv/data", Options: []string{"rbind", "ro"}}, false},
		{specs.Mount{Destination: "/data", Type: "bind", Source: "/srv/data", Options: []string{"rbind", "ro", "noexec"}}, true},
		{specs.Mount{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"noexec", "nosuid", "nodev"}}, true},
	} {
		s, raw := load(t, "docker-config.json")
		s.Mounts = append(s.Mounts, c.m)
		m, err := Map(s, raw, "/bundle", opts)
		if err != nil {
			t.Fatalf("%+v: %v", c.m, err)
		}
		got := false
		for _, n := range m.NotHonoured {
			got = got || (strings.Contains(n, c.m.Destination) && strings.Contains(n, "noexec"))
		}
		if got != c.want {
			t.Errorf("%s %v: noexec recorded %v, want %v (%v)", c.m.Destination, c.m.Options, got, c.want, m.NotHonoured)
		}
	}
	f := Features("test")
	if slices.Contains(f.MountOptions, "noexec") || !slices.Contains(f.MountOptions, "rro") {
		t.Errorf("features mount options %v: noexec is not applied, rro is", f.MountOptions)
	}
}

// TestMapDropsCordonAnnotations: the state's dev.cordon.* annotations
// are cordon's claims (level admitted, evidence, receipt). Found in
// review: a bundle's own dev.cordon.* annotations (a pod author's) were
// copied into the state, where only the names cordon sets itself were
// overwritten: any other (dev.cordon.gateway, a future claim) read as
// cordon's. They are dropped and recorded; dev.cordon.config (the
// bundle's request) and other prefixes are kept (the control).
func TestMapDropsCordonAnnotations(t *testing.T) {
	s, raw := load(t, "docker-config.json")
	s.Annotations = map[string]string{
		"dev.cordon.gateway":        "verified",
		AnnotationLevelAdmitted:     "SANDBOX_MAX",
		AnnotationConfig:            "demo",
		"io.kubernetes.cri.sandbox": "x",
	}
	m, err := Map(s, raw, "/bundle", opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"dev.cordon.gateway", AnnotationLevelAdmitted} {
		if _, ok := m.Annotations[k]; ok {
			t.Errorf("the bundle's %s reaches the state's annotations", k)
		}
		if !strings.Contains(strings.Join(m.NotHonoured, "\n"), k) {
			t.Errorf("dropping %s is not recorded", k)
		}
	}
	for _, k := range []string{AnnotationConfig, "io.kubernetes.cri.sandbox"} {
		if m.Annotations[k] != s.Annotations[k] {
			t.Errorf("control: %s lost (%q)", k, m.Annotations[k])
		}
	}
}

// TestMapVolumeRoots: a bind strictly below a volume root the operator
// declared holds the image's ids (Bind.ImageIDs); the root itself, a
// sibling with the root's name as a prefix, a path that climbs out with
// "..", and any bind without declared roots do not. The bind carries the
// root (Bind.VolumeRoot), the longest of nested ones.
func TestMapVolumeRoots(t *testing.T) {
	roots := []string{"/var/lib/docker/volumes"}
	for _, c := range []struct {
		src   string
		roots []string
		want  bool
	}{
		{"/var/lib/docker/volumes/v1/_data", roots, true},
		{"/var/lib/docker/volumes/v1/_data", nil, false}, // control: none declared
		{"/var/lib/docker/volumes", roots, false},
		{"/var/lib/docker/volumes-other/v1", roots, false},
		{"/var/lib/docker/volumes/../../../etc", roots, false},
		{"/srv/data", roots, false},
		{"/var/lib/docker/volumes/v1/_data", []string{"/var/lib/docker", "/var/lib/docker/volumes"}, true},
	} {
		s, raw := load(t, "docker-config.json")
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: c.src, Options: []string{"rbind"}})
		o := opts
		o.VolumeRoots = c.roots
		m, err := Map(s, raw, "/bundle", o)
		if err != nil {
			t.Fatalf("%s: Map: %v", c.src, err)
		}
		i := slices.IndexFunc(m.Spec.Binds, func(b sandbox.Bind) bool { return b.Target == "/data" })
		if i < 0 {
			t.Fatalf("%s: no bind of /data", c.src)
		}
		if got := m.Spec.Binds[i].ImageIDs; got != c.want {
			t.Errorf("bind of %s with roots %v: ImageIDs %v, want %v", c.src, c.roots, got, c.want)
		}
		// The provider resolves the source beneath the root (the longest
		// that holds it: a root may be a mount of its own).
		if want := map[bool]string{true: "/var/lib/docker/volumes"}[c.want]; m.Spec.Binds[i].VolumeRoot != want {
			t.Errorf("bind of %s with roots %v: VolumeRoot %q, want %q", c.src, c.roots, m.Spec.Binds[i].VolumeRoot, want)
		}
	}
}
