package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// OCIArgv0 is the name under which the cordon binary is `cordon oci`
// (a symlink an engine is given as its runtime's path).
const OCIArgv0 = "cordon-oci"

// ociFlags are `cordon oci`'s global flags: the ones engines pass (as
// runc's) and the host operator's (set in the engine's runtime
// configuration, never in a bundle).
type ociFlags struct {
	g             *globals
	root          string
	logPath       string
	systemdCgroup bool
	debug         bool
	rootless      string
	criu          string
	level         string
	configDir     string
	volumeRoots   []string
	engineNetwork string
}

func ociCmd(g *globals) *cobra.Command {
	o := &ociFlags{g: g}
	cmd := &cobra.Command{
		Use:   "oci",
		Short: "cordon as an OCI runtime: Docker, containerd (CRI) and Kubernetes start containers through cordon",
		Long: `cordon oci implements the OCI runtime command line (create, start, state, kill,
delete, exec, features) that container engines call, so Docker, containerd's CRI
plugin and therefore Kubernetes (RuntimeClass) start containers inside cordon's
boundary, admitted from evidence like cordon run. The binary under the name
cordon-oci (a symlink) is this command: give engines that path.

Each container's program runs in its own sandbox: uid 0 of the image is uid 0 of
the sandbox's own user namespace, with no capabilities; cordon's seccomp filter,
Landlock, masks, cgroups and its own network namespace (nothing to route to)
apply. What a bundle asks for and cordon does not grant is recorded in the
container's state annotations (dev.cordon.not-granted, dev.cordon.not-honoured);
what cordon cannot make safe (privileged, host namespaces, devices, writable sysfs,
unmasked kernel paths, seccomp disabled) is refused with an error naming the field.
The annotation dev.cordon.config=NAME gives the container the gateway configured
in --config-dir/NAME.yaml (the host operator's file; never the image's).

--engine-network=accept (with --level DEDICATED_RUNTIME or lower, which it
requires) lets a container join the network namespace its engine names in
config.json (a Kubernetes pod's, with the pod IP and its routes) instead of
cordon's own: a lower claim, recorded in dev.cordon.network and the evidence (the
network boundary is not verified). Docker names no namespace to join (its
networking is a hook, which cordon does not run): there accept changes nothing.
See docs/oci.md.`,
		Example: `  dockerd --add-runtime cordon=/usr/local/bin/cordon-oci
  docker run --rm --runtime cordon debian:local /bin/echo hello
  cordon oci --root /run/docker/runtime-cordon/moby state CONTAINER_ID`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.root, "root", oci.DefaultRoot, "directory of the containers' state (engines pass their own)")
	pf.StringVar(&o.logPath, "log", "", "append errors to this file as the engine reads them (--log-format text or json)")
	pf.BoolVar(&o.systemdCgroup, "systemd-cgroup", false, "accepted for engines; cordon always places a container in its own cgroups (recorded)")
	pf.BoolVar(&o.debug, "debug", false, "log at debug level")
	pf.StringVar(&o.rootless, "rootless", "auto", "accepted for engines; cordon runs as root")
	pf.StringVar(&o.criu, "criu", "", "accepted for engines; checkpointing is not supported")
	pf.StringVar(&o.level, "level", sandbox.DedicatedContainer.String(), "HOST OPERATOR: isolation level every container must evidence (set in the engine's runtime arguments)")
	pf.StringArrayVar(&o.volumeRoots, "volume-root", nil, "HOST OPERATOR: a directory where the engine keeps its volumes (Docker: DATA-ROOT/volumes; kubelet: /var/lib/kubelet/pods), repeatable; a bind from below it holds the image's ids and is mapped as the image's root (writable whatever its owner); root's, writable by no one else")
	pf.StringVar(&o.configDir, "config-dir", "/etc/cordon/oci", "HOST OPERATOR: directory of the gateway configurations a container may name (annotation dev.cordon.config=NAME → DIR/NAME.yaml)")
	pf.StringVar(&o.engineNetwork, "engine-network", oci.EngineNetworkOwn, "HOST OPERATOR: own (cordon's own network namespace, loopback only) or accept (join the engine's network namespace config.json names, e.g. a pod's: the network boundary is then not verified; needs --level "+sandbox.DedicatedRuntime.String()+" or lower)")
	_ = pf.MarkHidden("criu")
	// The OCI runtime command line: an unknown command exits non-zero
	// (a command group's default would print help and exit 0), and
	// --version answers as runc's does.
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	setVersionFlag(cmd)
	cmd.AddCommand(o.createCmd(), o.startCmd(), o.stateCmd(), o.killCmd(), o.deleteCmd(), o.execCmd(), o.featuresCmd(), o.listCmd(),
		o.keeperCmd(), o.execProxyCmd())
	for _, name := range []string{"pause", "resume", "update", "checkpoint", "restore", "ps", "events"} {
		cmd.AddCommand(o.unsupportedCmd(name))
	}
	return cmd
}

// fail records err where the engine reads runtime errors (--log) and
// returns it.
func (o *ociFlags) fail(err error) error {
	if err == nil || o.logPath == "" {
		return err
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	msg := describe(err)
	var line []byte
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if o.g.logf.format == "json" {
		line, _ = json.Marshal(map[string]string{"level": "error", "msg": msg, "time": now})
	} else {
		line = []byte(fmt.Sprintf("time=%q level=error msg=%q", now, msg))
	}
	appendLogLine(o.logPath, append(line, '\n'))
	return err
}

// appendLogLine appends line to the engine's log file, opened as root:
// never through a symlink, never blocking on a FIFO (O_NONBLOCK), and only
// into a regular file with one name (a hard link would carry the line
// into another file).
func appendLogLine(path string, line []byte) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return
	}
	_, _ = unix.Write(fd, line)
}

func (o *ociFlags) options() (oci.Options, error) {
	lvl, err := sandbox.ParseLevel(o.level)
	if err != nil {
		return oci.Options{}, failure.Failf(failure.KindUsage, "oci", "--level: %v", err)
	}
	if !filepath.IsAbs(o.configDir) {
		return oci.Options{}, failure.Failf(failure.KindUsage, "oci", "--config-dir %q is not an absolute path", o.configDir)
	}
	var roots []string
	for _, r := range o.volumeRoots {
		if !filepath.IsAbs(r) || filepath.Clean(r) == "/" {
			return oci.Options{}, failure.Failf(failure.KindUsage, "oci", "--volume-root %q: an absolute directory below /", r)
		}
		roots = append(roots, filepath.Clean(r))
	}
	opts := oci.Options{Level: lvl, ConfigDir: filepath.Clean(o.configDir), IsKeeper: o.isKeeper, EngineNetwork: o.engineNetwork,
		KeeperEngineNet: o.keeperEngineNet, VolumeRoots: roots}
	if err := opts.Validate(); err != nil {
		return oci.Options{}, err
	}
	return opts, nil
}

// checkVolumeRoots: each volume root is root's and writable by no one
// else, as is every directory above it — no other user can put a
// directory of theirs where a volume is looked for.
func checkVolumeRoots(roots []string) error {
	for _, r := range roots {
		if err := oci.CheckOperatorDir(r); err != nil {
			return failure.Failf(failure.KindPolicyRejected, "oci", "--volume-root %s: %v", r, err)
		}
	}
	return nil
}

// isKeeper reports whether pid is a live keeper of a container under
// this root.
func (o *ociFlags) isKeeper(pid int) bool { return o.keeperState(pid) != nil }

// keeperEngineNet is the engine's network namespace the container of
// live keeper pid joined ("" for none).
func (o *ociFlags) keeperEngineNet(pid int) string {
	if s := o.keeperState(pid); s != nil {
		return s.EngineNet
	}
	return ""
}

// keeperState is the state of the live container under this root whose
// keeper is pid, or nil.
func (o *ociFlags) keeperState(pid int) *oci.State {
	r, err := oci.Open(o.root)
	if err != nil {
		return nil
	}
	ids, _ := r.List()
	for _, id := range ids {
		if s, err := r.Load(id); err == nil && s.Keeper.PID == pid && s.Live() != specs.StateStopped {
			return s
		}
	}
	return nil
}

func (o *ociFlags) openRoot() (oci.Root, error) {
	if err := requireRoot("oci"); err != nil {
		return oci.Root{}, err
	}
	return oci.Open(o.root)
}

func (o *ociFlags) startCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "start ID",
		Short: "Run the program of a created container",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.fail(o.request(args[0], oci.Request{Op: "start"}))
		},
	}
}

// request sends one request to a container's keeper and waits for its
// answer.
func (o *ociFlags) request(id string, req oci.Request) error {
	r, err := o.openRoot()
	if err != nil {
		return err
	}
	s, err := r.Load(id)
	if err != nil {
		return err
	}
	if s.Live() == specs.StateStopped {
		return failure.Failf(failure.KindUsage, "oci", "container %s: container not running (its keeper has ended)", id)
	}
	c, err := oci.Dial(r.Path(id))
	if err != nil {
		return failure.Failf(failure.KindStart, "oci", "container %s: its keeper does not answer: %v", id, err)
	}
	defer c.Close()
	if err := c.Send(req); err != nil {
		return failure.Fail(failure.KindStart, "oci", err)
	}
	var rep oci.Reply
	if _, err := c.Recv(&rep, 0); err != nil {
		if req.Op == "kill" && keeperEnded(s) {
			// The signal ended the program and the keeper with it before
			// it could answer: the kill took effect (runc answers 0 here).
			return nil
		}
		return failure.Failf(failure.KindStart, "oci", "container %s: no answer from its keeper: %v", id, err)
	}
	if !rep.OK {
		return relayed(keeperStatus{Error: rep.Error, Kind: rep.Kind})
	}
	return nil
}

// keeperEnded waits briefly for the keeper of s to be gone (exited, or a
// zombie its parent has not reaped yet) after it closed a request's
// connection without an answer.
func keeperEnded(s *oci.State) bool {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s.Live() == specs.StateStopped {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (o *ociFlags) stateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "state ID",
		Short: "Print a container's state (OCI state JSON, with cordon's annotations)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := o.openRoot()
			if err != nil {
				return o.fail(err)
			}
			s, err := r.Load(args[0])
			if err != nil {
				return o.fail(err)
			}
			out := s.State
			out.Status = s.Live()
			if out.Status == specs.StateStopped {
				out.Pid = 0
			}
			b, _ := json.MarshalIndent(out, "", "  ")
			fmt.Fprintln(o.g.stdout, string(b))
			return nil
		},
	}
}

func (o *ociFlags) killCmd() *cobra.Command {
	var all bool
	var signal string
	cmd := &cobra.Command{
		Use:   "kill [--all] ID [SIGNAL]",
		Short: "Send a signal to a container's program (default SIGTERM); SIGKILL ends the whole sandbox",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig := syscall15
			// runc's form (kill ID SIGNAL) and the OCI command line's
			// (kill --signal SIGNAL ID); not both.
			if len(args) == 2 && signal != "" {
				return o.fail(failure.Failf(failure.KindUsage, "oci", "the signal is given twice (--signal and an argument)"))
			}
			if len(args) == 2 {
				signal = args[1]
			}
			if signal != "" {
				var err error
				if sig, err = parseSignal(signal); err != nil {
					return o.fail(err)
				}
			}
			return o.fail(o.request(args[0], oci.Request{Op: "kill", Signal: sig, All: all}))
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "send the signal to every process of the container")
	cmd.Flags().StringVar(&signal, "signal", "", "the signal (the OCI command line's form; default TERM)")
	return cmd
}

const syscall15 = int(unix.SIGTERM)

// parseSignal reads a signal as a number, NAME or SIGNAME.
func parseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, failure.Failf(failure.KindUsage, "oci", "signal %d is out of range", n)
		}
		return n, nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return int(n), nil
	}
	return 0, failure.Failf(failure.KindUsage, "oci", "unknown signal %q", clipText(s))
}

func clipText(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

func (o *ociFlags) unsupportedCmd(name string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              "Not supported by cordon (refused)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.fail(failure.Failf(failure.KindUnsupported, "oci", "%s is not supported by cordon", name))
		},
	}
}

func (o *ociFlags) listCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the containers under --root with their status and admitted level",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := o.openRoot()
			if err != nil {
				return o.fail(err)
			}
			ids, err := r.List()
			if err != nil {
				return o.fail(failure.Fail(failure.KindStore, "oci", err))
			}
			fmt.Fprintf(o.g.stdout, "%-24s %-8s %-8s %s\n", "ID", "PID", "STATUS", "LEVEL")
			for _, id := range ids {
				s, err := r.Load(id)
				if err != nil {
					fmt.Fprintf(o.g.stdout, "%-24s %-8s %-8s %s\n", id, "-", "unknown", describe(err))
					continue
				}
				fmt.Fprintf(o.g.stdout, "%-24s %-8d %-8s %s\n", id, s.Pid, s.Live(), s.Annotations[oci.AnnotationLevelAdmitted])
			}
			return nil
		},
	}
}
