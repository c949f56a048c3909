package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
)

// keeperStartTimeout bounds how long create waits for its keeper to
// build, evidence and admit the sandbox.
const keeperStartTimeout = 60 * time.Second

type ociCreateFlags struct {
	bundle, pidFile, consoleSocket string
	noPivot, noNewKeyring          bool
	preserveFDs                    int
}

func (o *ociFlags) createCmd() *cobra.Command {
	f := &ociCreateFlags{}
	cmd := &cobra.Command{
		Use:   "create [flags] ID",
		Short: "Create a container from an OCI bundle: build its sandbox and admit it from evidence; the program waits for start",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.fail(o.create(cmd.Context(), args[0], f))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.bundle, "bundle", "b", "", "the bundle's directory (default: the current directory)")
	fl.StringVar(&f.pidFile, "pid-file", "", "write the container's pid (its keeper's) to this file")
	fl.StringVar(&f.consoleSocket, "console-socket", "", "Unix socket to send the terminal's master to (process.terminal)")
	fl.BoolVar(&f.noPivot, "no-pivot", false, "accepted for engines; cordon always pivots")
	fl.BoolVar(&f.noNewKeyring, "no-new-keyring", false, "accepted for engines")
	fl.IntVar(&f.preserveFDs, "preserve-fds", 0, "refused unless 0: no descriptor beyond stdio reaches a sandbox")
	return cmd
}

// keeperStatus is what a keeper (or an exec proxy) tells the process that
// started it, on descriptor 3.
type keeperStatus struct {
	OK    bool   `json:"ok"`
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

func (o *ociFlags) create(ctx context.Context, id string, f *ociCreateFlags) error {
	if f.preserveFDs != 0 {
		return failure.Failf(failure.KindPolicyRejected, "oci", "--preserve-fds %d: no descriptor beyond stdio reaches a sandbox", f.preserveFDs)
	}
	if n := listenFDs(os.Getenv, os.Getpid()); n != 0 {
		return failure.Failf(failure.KindPolicyRejected, "oci", "LISTEN_FDS=%d (socket activation): no descriptor beyond stdio reaches a sandbox", n)
	}
	r, err := o.openRoot()
	if err != nil {
		return err
	}
	if err := oci.CheckID(id); err != nil {
		return err
	}
	bundle, err := bundleDir(f.bundle)
	if err != nil {
		return err
	}
	opts, err := o.options()
	if err != nil {
		return err
	}
	if err := checkVolumeRoots(opts.VolumeRoots); err != nil {
		return err
	}
	// Checked here first so that a refusal names its field at once; the
	// keeper maps the same bytes again.
	s, raw, err := oci.Load(bundle)
	if err != nil {
		return err
	}
	if _, err := oci.Map(s, raw, bundle, opts); err != nil {
		return err
	}
	if f.consoleSocket != "" && (s.Process == nil || !s.Process.Terminal) {
		return failure.Failf(failure.KindUsage, "oci", "--console-socket given but process.terminal is false")
	}
	if s.Process.Terminal && f.consoleSocket == "" {
		return failure.Failf(failure.KindUsage, "oci", "process.terminal is true but no --console-socket was given")
	}
	if _, err := r.Create(id); err != nil {
		return err
	}
	pid, err := o.spawnKeeper(ctx, id, bundle, f.consoleSocket)
	if err != nil {
		_ = r.Remove(id)
		o.reclaim(ctx)
		return err
	}
	if f.pidFile != "" {
		if err := writePidFile(f.pidFile, pid); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return err
		}
	}
	return nil
}

// listenFDs is the number of descriptors socket activation hands this
// process (LISTEN_FDS, when LISTEN_PID is this pid, as go-systemd and
// runc read them), which the OCI command line says create passes to the
// program; -1 when LISTEN_FDS is not a number. cordon refuses them rather
// than dropping them.
func listenFDs(getenv func(string) string, pid int) int {
	fds := getenv("LISTEN_FDS")
	if fds == "" || getenv("LISTEN_PID") != strconv.Itoa(pid) {
		return 0
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func bundleDir(b string) (string, error) {
	if b == "" {
		b = "."
	}
	abs, err := filepath.Abs(b)
	if err != nil {
		return "", failure.Fail(failure.KindUsage, "oci", err)
	}
	return abs, nil
}

// writePidFile writes pid where the engine asked, atomically and never
// through a symlink.
func writePidFile(path string, pid int) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return failure.Fail(failure.KindUsage, "oci", err)
	}
	if err := safefile.WriteFile(abs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return failure.Fail(failure.KindUsage, "oci --pid-file", err)
	}
	return nil
}

// spawnKeeper starts the container's keeper in its own session, with
// this process's stdio (the engine's: they become the program's), and
// waits until it reports the sandbox created and admitted, or fails.
func (o *ociFlags) spawnKeeper(ctx context.Context, id, bundle, console string) (int, error) {
	args := append(o.forwardArgs(), "__keeper", "--bundle", bundle, "--console-socket", console, id)
	cmd, pr, err := statusChild(args, console == "")
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	st, err := readStatus(pr, keeperStartTimeout)
	if err != nil || !st.OK {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if err == nil {
			err = relayed(st)
		}
		return 0, err
	}
	// The keeper lives on: once this process exits the engine's shim (a
	// subreaper) is its parent and reaps it.
	_ = cmd.Process.Release()
	return st.Pid, nil
}

// forwardArgs are the global flags a child of `cordon oci` gets.
func (o *ociFlags) forwardArgs() []string {
	a := []string{"--state-dir", o.g.stateDir, "--provider", o.g.provider, "oci", "--root", o.root, "--level", o.level, "--config-dir", o.configDir, "--engine-network", o.engineNetwork}
	for _, r := range o.volumeRoots {
		a = append(a, "--volume-root", r)
	}
	if o.logPath != "" {
		a = append(a, "--log", o.logPath)
	}
	if o.g.logf.format != "" {
		a = append(a, "--log-format", o.g.logf.format)
	}
	if o.debug {
		a = append(a, "--debug")
	}
	return append(a, testArgs(o.g)...)
}

// statusChild starts this binary with args in a new session, a status
// pipe as its descriptor 3 and, with stdio, this process's stdio (the
// program's, without a terminal). With a terminal the program's stdio is
// the terminal and the child gets /dev/null: an engine reads a create's
// output to its end (containerd's runc client does, with a console
// socket), and a long-lived child holding it would hang the engine.
func statusChild(args []string, stdio bool) (*exec.Cmd, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, failure.Fail(failure.KindStart, "oci", err)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	if stdio {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if os.Getenv("CORDON_TRACE") == "1" {
		// The keeper's phases, as `cordon run`'s: one JSON line in the
		// keeper's log (bench/ reads it for the per-phase breakdown).
		cmd.Env = append(cmd.Env, "CORDON_TRACE=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, nil, failure.Fail(failure.KindStart, "oci", err)
	}
	return cmd, pr, nil
}

func readStatus(pr *os.File, timeout time.Duration) (keeperStatus, error) {
	_ = pr.SetReadDeadline(time.Now().Add(timeout))
	var st keeperStatus
	if err := json.NewDecoder(pr).Decode(&st); err != nil {
		return st, failure.Failf(failure.KindStart, "oci", "the container's keeper ended without reporting (%v); see its log", err)
	}
	return st, nil
}

// relayed is the error a child reported, with its kind, said once.
func relayed(st keeperStatus) error {
	k := failure.Kind(st.Kind)
	if !failure.Known(k) {
		k = failure.KindInternal
	}
	return failure.Fail(k, "", errors.New(strings.TrimPrefix(st.Error, st.Kind+": ")))
}

// reportStatus writes st to descriptor 3 (the process that started this
// one) and closes it.
func reportStatus(st keeperStatus) {
	f := os.NewFile(3, "status")
	if f == nil {
		return
	}
	_ = json.NewEncoder(f).Encode(st)
	f.Close()
}

func (o *ociFlags) deleteCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete [--force] ID",
		Short: "Delete a stopped (or, with --force, any) container; nothing of its sandbox is left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.fail(o.delete(cmd.Context(), args[0], force))
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill the container first if it still runs")
	return cmd
}

func (o *ociFlags) delete(ctx context.Context, id string, force bool) error {
	r, err := o.openRoot()
	if err != nil {
		return err
	}
	s, err := r.Load(id)
	if errors.Is(err, oci.ErrNotExist) {
		if oci.CheckID(id) == nil {
			_ = r.Remove(id) // a create that never recorded its state
		}
		o.reclaim(ctx)
		if force {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if st := s.Live(); st != specs.StateStopped {
		if st == specs.StateRunning && !force {
			return failure.Failf(failure.KindUsage, "oci", "container %s is running; stop it first or use --force", id)
		}
		_ = o.request(id, oci.Request{Op: "kill", Signal: int(unix.SIGKILL), All: true})
		if !waitGone(s, 15*time.Second) {
			// The keeper does not end: end it; its sandbox dies with it
			// (parent-death signal) and reclaim removes the rest.
			if pidfd, err := unix.PidfdOpen(s.Keeper.PID, 0); err == nil {
				if !waitGone(s, 0) {
					_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
				}
				unix.Close(pidfd)
			}
			waitGone(s, 5*time.Second)
		}
	}
	o.reclaim(ctx)
	if err := r.Remove(id); err != nil {
		return failure.Fail(failure.KindStore, "oci delete", err)
	}
	return nil
}

// waitGone waits until s's keeper has provably ended.
func waitGone(s *oci.State, d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		if s.Live() == specs.StateStopped {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reclaim removes the residue of sandboxes whose owner (a keeper) is
// provably gone: their processes, cgroups, leases and sockets.
func (o *ociFlags) reclaim(ctx context.Context) {
	st, err := o.g.openStore()
	if err != nil {
		return
	}
	defer st.Close()
	prov, err := o.g.newProvider(registry.Options{Store: st, Logger: o.g.logger(), TestSkip: o.g.testSkip})
	if err != nil {
		return
	}
	if rc, ok := prov.(registry.Reclaimer); ok {
		if _, err := rc.Reclaim(ctx); err != nil {
			o.g.logger().Warn("reclaim residue", "err", err)
		}
	}
}

func (o *ociFlags) featuresCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "features",
		Short: "Print what this runtime supports (OCI runtime features JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := oci.FeaturesJSON(Version)
			if err != nil {
				return failure.Fail(failure.KindInternal, "oci features", err)
			}
			fmt.Fprintln(o.g.stdout, string(b))
			return nil
		},
	}
}
