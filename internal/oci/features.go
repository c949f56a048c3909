package oci

import (
	"encoding/json"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Features is what `cordon oci features` prints: what cordon recognises.
// Capabilities is empty and not nil: cordon grants none. Hooks are empty:
// none is run. MountOptions are the ones applied: nosuid and nodev always
// are; rro is ro (cordon's binds are never recursive, so no submount is
// left writable); noexec is not applied (recorded, not listed).
func Features(version string) features.Features {
	yes, no := true, false
	return features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{},
		MountOptions:  []string{"ro", "rro", "rw", "bind", "rbind", "nosuid", "nodev", "private", "rprivate"},
		Linux: &features.Linux{
			Namespaces:   []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts"},
			Capabilities: []string{},
			Cgroup:       &features.Cgroup{V1: &yes, V2: &yes, Systemd: &no, SystemdUser: &no},
			Seccomp:      &features.Seccomp{Enabled: &yes},
			Apparmor:     &features.Apparmor{Enabled: &no},
			Selinux:      &features.Selinux{Enabled: &no},
		},
		Annotations: map[string]string{
			"dev.cordon.version":   version,
			"dev.cordon.seccomp":   "cordon's own filter replaces the bundle's profile",
			"dev.cordon.network":   "cordon's own network namespace; an engine's namespace path is joined only with the operator's --engine-network=accept (recorded, network boundary not verified)",
			"dev.cordon.isolation": "one sandbox per container, admitted from evidence",
		},
		PotentiallyUnsafeConfigAnnotations: []string{AnnotationConfig},
	}
}

// FeaturesJSON is Features as JSON, with the lists cordon reports empty
// present as [] (the spec's Go types drop an empty list, which
// features.md reads as "not reported", not "none"): no hook is run and no
// capability is granted.
func FeaturesJSON(version string) ([]byte, error) {
	b, err := json.Marshal(Features(version))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["hooks"] = []string{}
	if l, ok := m["linux"].(map[string]any); ok {
		l["capabilities"] = []string{}
	}
	return json.MarshalIndent(m, "", "  ")
}
