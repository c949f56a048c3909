package cli

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/custody"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

type createFlags struct {
	workspace, config, profile, accept, level, memory, tmp string
	insitu                                                 string
	rootfs                                                 string
	env, volumes, ro, rw                                   []string
	pids                                                   int64
	cpus                                                   float64
	unsafeRoot                                             bool
}

func sbCreateCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	f := &createFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME [flags] [-- PROGRAM [ARGS...]]",
		Short: "Create (provision) a sandbox; with a program, start runs it as the sandbox's main program",
		Long: `Create a sandbox owned by you: the daemon writes its record, leases a UID/GID
range, creates its cgroups and binds your workspace — which this command
opens itself and hands over as a descriptor (you must own it). Nothing runs
until 'start'. Without PROGRAM the sandbox idles and runs what you 'exec'.

--config sends the gateway configuration, its policy files and the secrets
it names (read here, as you: environment variables and files you can read).

FULL_CONTROL_LAB (--profile) bypasses policy, approval and budget gates; it
needs --accept with the exact phrase the refusal prints, is shown in every
listing, marks the bypassed boundaries UNVERIFIED in the evidence record, and
resets to SAFE_GUIDED when the daemon or the sandbox restarts.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if len(argv) > 0 && cmd.ArgsLenAtDash() != 1 {
				return failure.Failf(failure.KindUsage, "sandbox create", "put the program after --: cordon sandbox create NAME [flags] -- PROGRAM [ARGS...]")
			}
			ca, files, err := f.args(name, argv)
			if err != nil {
				return err
			}
			defer func() {
				for _, fl := range files {
					fl.Close()
				}
			}()
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "create", ca, files, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workspace, "workspace", "", "your directory, bound read-write at /workspace (opened by this command, sent as a descriptor)")
	fl.StringVar(&f.config, "config", "", "gateway configuration (cordon/v1 YAML); without it the sandbox has no way out")
	fl.StringVar(&f.profile, "profile", "SAFE_GUIDED", "SAFE_GUIDED or FULL_CONTROL_LAB")
	fl.StringVar(&f.accept, "accept", "", "the exact risk-acceptance phrase FULL_CONTROL_LAB requires")
	fl.StringVar(&f.level, "level", "", "isolation level that must be evidenced (default DEDICATED_CONTAINER)")
	fl.StringVar(&f.insitu, "insitu", sandbox.InSituDefault, "in-situ set attempted at start and judged from outside: default or full (docs/session-receipts.md)")
	fl.StringArrayVar(&f.env, "env", nil, "K=V for every program's environment (repeatable)")
	fl.StringArrayVar(&f.ro, "ro", nil, "read-only bind HOST[:SANDBOX] of a directory or file you own (opened by this command, sent as a descriptor; repeatable)")
	fl.StringArrayVar(&f.rw, "rw", nil, "read-write bind HOST[:SANDBOX] of a directory or file you own (opened by this command, sent as a descriptor; repeatable)")
	fl.StringVar(&f.rootfs, "rootfs", "", "a root directory you own, read-only, instead of the host's /usr layout (opened by this command, sent as a descriptor)")
	fl.StringArrayVar(&f.volumes, "volume", nil, "NAME:/TARGET[:ro] — a daemon-managed volume (cordon volume create NAME) bound at TARGET (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, swap included (default 4GiB)")
	fl.StringVar(&f.tmp, "tmp-size", "", "size of /tmp and HOME, each (default 1GiB)")
	fl.Int64Var(&f.pids, "pids", 0, "processes and threads (default 4096)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU cores (default: all)")
	fl.BoolVar(&f.unsafeRoot, "unsafe-root-workspace", false, "UNSAFE (root only): allow a workspace owned by root or a system account")
	return cmd
}

// args builds create's request: everything is read here, as the caller.
func (f *createFlags) args(name string, argv []string) (hostmgr.CreateArgs, []*os.File, error) {
	fail := func(format string, a ...any) (hostmgr.CreateArgs, []*os.File, error) {
		return hostmgr.CreateArgs{}, nil, failure.Failf(failure.KindUsage, "sandbox create", format, a...)
	}
	if err := proto.ValidName(name); err != nil {
		return fail("%v", err)
	}
	ca := hostmgr.CreateArgs{Name: name, Profile: f.profile, Accept: f.accept,
		Spec: hostmgr.Spec{Argv: argv, Env: f.env, Level: f.level, UnsafeRootWorkspace: f.unsafeRoot, InSitu: f.insitu}}
	var err error
	if f.memory != "" {
		if ca.Spec.Limits.MemoryBytes, err = ParseSize(f.memory); err != nil || ca.Spec.Limits.MemoryBytes < 8<<20 {
			return fail("--memory %s: want a size of at least 8MiB", f.memory)
		}
	}
	if f.tmp != "" {
		if ca.Spec.Limits.TmpBytes, err = ParseSize(f.tmp); err != nil || ca.Spec.Limits.TmpBytes < 1<<20 {
			return fail("--tmp-size %s: want a size of at least 1MiB", f.tmp)
		}
	}
	if f.pids < 0 || (f.pids > 0 && f.pids < 8) {
		return fail("--pids %d: want 8 or more", f.pids)
	}
	ca.Spec.Limits.Pids, ca.Spec.Limits.CPUs = f.pids, f.cpus
	for _, v := range f.volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro") {
			return fail("--volume %s: want NAME:/TARGET or NAME:/TARGET:ro", v)
		}
		ca.Spec.Volumes = append(ca.Spec.Volumes, hostmgr.VolumeMount{Name: parts[0], Target: parts[1], ReadOnly: len(parts) == 3})
	}
	files, err := f.openFiles(&ca.Spec)
	if err != nil {
		return hostmgr.CreateArgs{}, nil, err
	}
	if f.config != "" {
		gs, err := gatewaySpec(f.config)
		if err != nil {
			for _, fl := range files {
				fl.Close()
			}
			return hostmgr.CreateArgs{}, nil, err
		}
		ca.Spec.Gateway = gs
	}
	return ca, files, nil
}

// openFiles opens, here and as the caller, without following symlinks,
// what the daemon is to bind: the workspace, each --ro/--rw source, the
// --rootfs. They travel as descriptors, in that order; the daemon binds
// these very files and opens no path.
func (f *createFlags) openFiles(s *hostmgr.Spec) ([]*os.File, error) {
	files, err := f.openEach(s, nil)
	if err != nil {
		// Here, not in a defer over a named result: "return nil, err"
		// would have emptied it first.
		for _, fl := range files {
			fl.Close()
		}
		return nil, err
	}
	return files, nil
}

// openEach appends to files each descriptor openFiles sends; on error it
// returns what it opened so far, for the caller to close.
func (f *createFlags) openEach(s *hostmgr.Spec, files []*os.File) ([]*os.File, error) {
	open := func(flag, path string, dir bool) error {
		path, err := hostPath("sandbox create", flag, path)
		if err != nil {
			return err
		}
		flags := unix.O_PATH | unix.O_CLOEXEC
		if dir {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			return failure.Failf(failure.KindUsage, "sandbox create", "%s %s: %v", flag, path, err)
		}
		files = append(files, os.NewFile(uintptr(fd), path))
		return nil
	}
	if f.workspace != "" {
		if err := open("--workspace", f.workspace, true); err != nil {
			return files, err
		}
		s.Workspace = true
	}
	for _, p := range []struct {
		vals []string
		rw   bool
		name string
	}{{f.ro, false, "--ro"}, {f.rw, true, "--rw"}} {
		for _, v := range p.vals {
			host, target, err := bindArg("sandbox create", p.name, v)
			if err != nil {
				return files, err
			}
			if err := open(p.name, host, false); err != nil {
				return files, err
			}
			s.Binds = append(s.Binds, hostmgr.BindSpec{Target: target, Writable: p.rw})
		}
	}
	if f.rootfs != "" {
		if err := open("--rootfs", f.rootfs, true); err != nil {
			return files, err
		}
		s.Rootfs = true
	}
	if len(files) > proto.MaxFiles {
		return files, failure.Failf(failure.KindUsage, "sandbox create", "%d descriptors (workspace, binds, rootfs): a request carries at most %d", len(files), proto.MaxFiles)
	}
	return files, nil
}

// gatewaySpec reads a configuration, its policy files and its secrets as
// the caller, for the daemon.
func gatewaySpec(path string) (*hostmgr.GatewaySpec, error) {
	b, err := config.ReadFile(path)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	cfg, err := config.Parse(b, path)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	gs := &hostmgr.GatewaySpec{Source: filepath.Base(path), Config: b, Secrets: map[string][]byte{}}
	// The daemon parses the same bytes without a directory: policy files
	// travel by base name.
	for _, p := range cfg.Policy {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, failure.Fail(failure.KindUsage, "policy", err)
		}
		gs.Policies = append(gs.Policies, hostmgr.PolicySource{Name: filepath.Base(p), Data: data})
	}
	cust, err := custody.Load(cfg.Secrets, os.Getenv)
	if err != nil {
		return nil, failure.Fail(failure.KindCustody, "custodian", err)
	}
	for _, n := range cust.Names() {
		v, _ := cust.Secret(n)
		gs.Secrets[n] = v
	}
	return gs, nil
}
