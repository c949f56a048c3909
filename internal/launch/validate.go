package launch

import (
	"math"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// A specCheck is one rule a sandbox spec must satisfy before anything is
// created. It returns a typed failure (failure.KindUsage for a malformed
// request, failure.KindPolicyRejected for one no provider may honour).
type specCheck struct {
	name  string
	check func(s *sandbox.Spec) error
}

// specChecks are every rule, in the order they are reported. Both cordon
// run and the daemon validate with them (Validate); the messages name the
// flags of cordon run and cordon sandbox create, which share them.
var specChecks = []specCheck{
	{"level", checkLevel},
	{"argv", checkArgv},
	{"env", checkEnv},
	{"workspace", checkWorkspace},
	{"binds", checkBinds},
	{"rootfs", checkRootfs},
	{"memory", checkMemory},
	{"tmp", checkTmp},
	{"pids", checkPids},
	{"cpus", checkCPUs},
	{"timeout", checkTimeout},
	{"insitu", checkInSitu},
}

// Validate checks spec against every rule and returns the first failure.
func Validate(s *sandbox.Spec) error {
	for _, c := range specChecks {
		if err := c.check(s); err != nil {
			return err
		}
	}
	return nil
}

func usage(format string, a ...any) error {
	return failure.Failf(failure.KindUsage, "spec", format, a...)
}

func checkLevel(s *sandbox.Spec) error {
	switch s.Level {
	case sandbox.LevelUnknown:
		return usage("--level: no level requested")
	case sandbox.DedicatedVM:
		return failure.Failf(failure.KindPolicyRejected, "spec", "no provider on this host can evidence DEDICATED_VM (the native Linux provider reaches DEDICATED_CONTAINER); nothing was started")
	}
	if s.Level < sandbox.Shared || s.Level > sandbox.DedicatedVM {
		return usage("--level %v: not a level", s.Level)
	}
	return nil
}

// checkArgv: argv is a program and its arguments, never a shell string;
// an empty argv is an idle sandbox (the daemon's).
func checkArgv(s *sandbox.Spec) error {
	for _, a := range s.Argv {
		if strings.ContainsRune(a, 0) {
			return usage("NUL byte in argv")
		}
	}
	if len(s.Argv) > 0 && s.Argv[0] == "" {
		return usage("empty program name")
	}
	return nil
}

func checkEnv(s *sandbox.Spec) error {
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return usage("--env %q: want K=V", clip(kv))
		}
	}
	return nil
}

func checkWorkspace(s *sandbox.Spec) error {
	if s.Workspace != "" && s.WorkspaceFile != nil {
		return usage("workspace: a path or a descriptor, not both")
	}
	if s.Workspace != "" && !filepath.IsAbs(s.Workspace) {
		return usage("--workspace %s: must be an absolute path", s.Workspace)
	}
	return nil
}

// checkBinds: a bind's source is an absolute host path or a descriptor
// the caller opened (the daemon's), never both; its target is absolute.
func checkBinds(s *sandbox.Spec) error {
	for _, b := range s.Binds {
		flag := "--ro"
		if b.Writable {
			flag = "--rw"
		}
		switch {
		case b.File != nil && b.Source != "":
			return usage("%s %s: a path or a descriptor, not both", flag, b.Source)
		case b.File == nil && !filepath.IsAbs(b.Source):
			return usage("%s %s:%s: HOST and SANDBOX paths must be absolute", flag, b.Source, b.Target)
		case !filepath.IsAbs(b.Target):
			return usage("%s %s:%s: HOST and SANDBOX paths must be absolute", flag, b.Source, b.Target)
		}
	}
	return nil
}

func checkRootfs(s *sandbox.Spec) error {
	if s.Rootfs != "" && s.RootfsFile != nil {
		return usage("--rootfs: a path or a descriptor, not both")
	}
	if s.Rootfs != "" && !filepath.IsAbs(s.Rootfs) {
		return usage("--rootfs %s: must be an absolute path", s.Rootfs)
	}
	return nil
}

func checkMemory(s *sandbox.Spec) error {
	switch m := s.Limits.MemoryBytes; {
	case m < 0:
		return usage("--memory: must be positive")
	case m > 0 && m < 8<<20:
		return usage("--memory %d bytes is too small to start a sandbox (the minimum is 8MiB)", m)
	case m > 1<<50:
		return usage("--memory %d bytes is absurdly large", m)
	}
	return nil
}

func checkTmp(s *sandbox.Spec) error {
	if t := s.Limits.TmpBytes; t < 0 || (t > 0 && t < 1<<20) {
		return usage("--tmp-size %d bytes is below the 1MiB minimum", t)
	}
	return nil
}

func checkPids(s *sandbox.Spec) error {
	switch p := s.Limits.Pids; {
	case p < 0:
		return usage("--pids %d: must be positive", p)
	case p > 0 && p < 8:
		return usage("--pids %d is too small to start a sandbox (the minimum is 8)", p)
	case p > 1<<22:
		return usage("--pids %d is absurdly large", p)
	}
	return nil
}

func checkCPUs(s *sandbox.Spec) error {
	if c := s.Limits.CPUs; math.IsNaN(c) || c < 0 || c > 4096 || (c > 0 && c < 0.01) {
		return usage("--cpus %v: want a number of cores between 0.01 and 4096", c)
	}
	return nil
}

func checkTimeout(s *sandbox.Spec) error {
	if s.Limits.Timeout < 0 {
		return usage("--timeout %s: must be positive", s.Limits.Timeout)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func checkInSitu(s *sandbox.Spec) error {
	switch s.InSitu {
	case "", sandbox.InSituDefault, sandbox.InSituFull:
		return nil
	}
	return usage("--insitu %q: want %s or %s", s.InSitu, sandbox.InSituDefault, sandbox.InSituFull)
}
