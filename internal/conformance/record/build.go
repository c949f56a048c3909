package record

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// CurrentBuild describes the running binary: version (the link-time one
// given, else the module's), module path, commit (vcs.revision, or
// "unknown" when built without VCS stamping), Go version, platform, and
// the SHA-256 of /proc/self/exe.
func CurrentBuild(version string) (Build, error) {
	b := Build{Version: version, Commit: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Module = bi.Main.Path
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return b, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return b, err
	}
	b.BinarySHA256 = hex.EncodeToString(h.Sum(nil))
	return b, nil
}

// HostFrom builds the record's host facts from a sandbox's evidence
// record (what the trusted side read: kernel, boot id, cgroup versions per
// controller, Landlock ABI, seccomp) and the provider's capability
// features (arch and the rest, kept as facts).
func HostFrom(h evidence.Host, c sandbox.Capability) Host {
	out := Host{Host: h, Facts: map[string]string{}}
	v1, v2 := 0, 0
	for _, v := range h.Cgroups {
		if v == "v2" {
			v2++
		} else {
			v1++
		}
	}
	switch {
	case v1 > 0 && v2 > 0:
		out.CgroupMode = "v1 hybrid"
	case v2 > 0:
		out.CgroupMode = "v2"
	case v1 > 0:
		out.CgroupMode = "v1"
	}
	for k, v := range c.Features {
		if k == "arch" {
			out.Arch = v
			continue
		}
		out.Facts[k] = v
	}
	if out.Arch == "" {
		out.Arch = runtime.GOARCH
	}
	return out
}
