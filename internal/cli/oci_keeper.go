package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
	"github.com/cordon-project/cordon/internal/sessionreceipt"
	"github.com/cordon-project/cordon/internal/store"
)

// maxQueuedKills bounds the kills a keeper holds while a start is under
// way (each is delivered once the program runs: an engine's stop is TERM
// then KILL); beyond it a kill is refused, never dropped.
const maxQueuedKills = 16

// keeper is a container's trusted side: it holds the sandbox (through
// package launch, as cordon run does), its gateway and its state, serves
// the engine's calls on keeper.sock, and exits with the program's status.
type keeper struct {
	o      *ociFlags
	id     string
	root   oci.Root
	dir    string
	m      *oci.Mapped
	st     *store.Store
	l      *launch.Launch
	state  *oci.State
	logf   *os.File
	start  chan chan oci.Reply // a start request, answered on its channel
	kill   chan oci.Request    // a kill accepted before start: the container ends (or, started meanwhile, gets it)
	exited chan int            // the program's status (128+n for signal n)
	execs  *execTable
	mu     sync.Mutex // guards state's Status
}

// status is the container's status as the keeper knows it.
func (k *keeper) status() specs.ContainerState {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state == nil {
		return specs.StateCreating
	}
	return k.state.Status
}

// setStatus records a transition (and the exit status once stopped).
func (k *keeper) setStatus(s specs.ContainerState, exit *int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state == nil {
		return
	}
	k.state.Status, k.state.Exit = s, exit
	if err := k.root.Save(k.state); err != nil {
		k.o.g.logger().Warn("oci state", "err", err)
	}
}

func (o *ociFlags) keeperCmd() *cobra.Command {
	var bundle, console string
	cmd := &cobra.Command{
		Use:    "__keeper --bundle DIR ID",
		Short:  "internal: a container's keeper (started by create)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code := o.runKeeper(cmd.Context(), args[0], bundle, console)
			return &exitError{code: code}
		},
	}
	cmd.Flags().StringVar(&bundle, "bundle", "", "the bundle's directory")
	cmd.Flags().StringVar(&console, "console-socket", "", "the engine's console socket")
	return cmd
}

// runKeeper builds the container and serves it; it returns the exit
// status (the program's, or 125 when the container never ran).
func (o *ociFlags) runKeeper(ctx context.Context, id, bundle, console string) int {
	k := &keeper{o: o, id: id, start: make(chan chan oci.Reply), kill: make(chan oci.Request, maxQueuedKills), exited: make(chan int, 1)}
	k.execs = newExecTable()
	if err := k.create(ctx, bundle, console); err != nil {
		k.logError(err)
		reportStatus(keeperStatus{Error: describe(err), Kind: string(failure.KindOf(err))})
		if k.l != nil {
			k.l.Close(context.WithoutCancel(ctx))
		}
		if k.st != nil {
			k.st.Close()
		}
		return failure.ExitRefused
	}
	defer k.st.Close()
	defer k.l.Close(context.WithoutCancel(ctx))
	return k.serve(ctx)
}

// logError logs to the keeper's own log; the process the keeper reports
// to (create) writes the engine's.
func (k *keeper) logError(err error) {
	k.o.g.logger().Error("keeper", "container", k.id, "err", describe(err))
}

// create is the lifecycle up to "created": provision, start, admit, sign
// the receipt, start the gateway; then the state, the console and the
// socket. The program has not run.
func (k *keeper) create(ctx context.Context, bundle, console string) error {
	o := k.o
	tr := newTracer(time.Now())
	defer func() {
		if k.logf != nil {
			tr.flush(k.logf)
		}
	}()
	var err error
	if k.root, err = o.openRoot(); err != nil {
		return err
	}
	k.dir = k.root.Path(k.id)
	if k.logf, err = os.OpenFile(filepath.Join(k.dir, oci.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600); err != nil {
		return failure.Fail(failure.KindStart, "oci keeper log", err)
	}
	o.g.logw = k.logf
	opts, err := o.options()
	if err != nil {
		return err
	}
	s, raw, err := oci.Load(bundle)
	if err != nil {
		return err
	}
	if k.m, err = oci.Map(s, raw, bundle, opts); err != nil {
		return err
	}
	tr.mark("load_map")
	if k.st, err = o.g.openStore(); err != nil {
		return err
	}
	tr.mark("store_open")
	prov, err := o.g.newProvider(registry.Options{Store: k.st, Logger: o.g.logger(), CordonSHA256: binaryDigest(o.g.stateDir), TestSkip: o.g.testSkip})
	if err != nil {
		return err
	}
	if rc, ok := prov.(registry.Reclaimer); ok {
		if _, err := rc.Reclaim(ctx); err != nil {
			o.g.logger().Warn("reclaim residue", "err", err)
		}
	}
	tr.mark("reclaim")
	plan, err := k.plan()
	if err != nil {
		return err
	}
	spec := k.m.Spec
	spec.Workload, spec.Execs = k.m.Workload, true
	if spec.EngineNet, err = k.m.OpenEngineNet(); err != nil {
		return err
	}
	if spec.EngineNet != nil {
		// Joined by the provider in Start; nothing needs it after.
		defer spec.EngineNet.File.Close()
	}
	if spec.Terminal == nil {
		spec.Stdin, spec.Stdout, spec.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	host := &launch.Host{Provider: prov, Store: k.st, StateDir: o.g.stateDir, Logger: o.g.logger(), Version: Version,
		ToolStderr: k.logf, GatewayStderr: k.logf, CheckpointEvery: checkpointEvery}
	tr.mark("plan")
	if k.l, err = launch.Provision(ctx, host, spec, plan); err != nil {
		return err
	}
	tr.mark("provision")
	if err := k.l.Start(ctx, func(r *evidence.Record) { k.note(r) }, true); err != nil {
		k.writeEvidence()
		return err
	}
	tr.sub(k.l.Sandbox(), "start")
	rc, err := sessionreceipt.Sign(ctx, k.st, o.g.stateDir, k.l.Record, binaryDigest(o.g.stateDir), k.m.Digest)
	if err != nil {
		return failure.Failf(failure.KindStore, "session receipt", "%v; the container was not created", err)
	}
	tr.mark("receipt")
	if err := k.l.StartGateway(ctx); err != nil {
		return err
	}
	if err := k.writeEvidence(); err != nil {
		return err
	}
	if err := k.saveCreated(bundle, rc.Digest); err != nil {
		return err
	}
	tr.mark("gateway_evidence_state")
	if console != "" {
		if err := k.sendConsole(console); err != nil {
			return err
		}
	}
	ln, err := k.listen()
	if err != nil {
		return err
	}
	go k.accept(ctx, ln)
	reportStatus(keeperStatus{OK: true, Pid: os.Getpid()})
	return nil
}

// plan loads the operator's gateway configuration the bundle named:
// only a root-owned file in a root-owned directory no one else can write,
// under directories no one else can write either (no one but root can
// change it between these checks and the read).
func (k *keeper) plan() (*launch.Plan, error) {
	if k.m.Config == "" {
		return nil, nil
	}
	if err := oci.CheckAncestors(filepath.Dir(k.m.Config)); err != nil {
		return nil, failure.Failf(failure.KindPolicyRejected, "oci", "annotations.%s: %v (a host operator's file)", oci.AnnotationConfig, err)
	}
	for _, p := range []string{filepath.Dir(k.m.Config), k.m.Config} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, failure.Failf(failure.KindUsage, "oci", "annotations.%s: %s: %v", oci.AnnotationConfig, p, err)
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, failure.Failf(failure.KindPolicyRejected, "oci", "annotations.%s: %s must be root's and writable by no one else (a host operator's file)", oci.AnnotationConfig, p)
		}
	}
	warn := func(w string) { k.o.g.logger().Warn(w) }
	return launch.LoadPlan(k.m.Config, "default", warn) // the workload is the config's
}

// note records, in the evidence record, what the bundle asked for and
// cordon did not grant or honour.
func (k *keeper) note(r *evidence.Record) {
	for _, n := range k.m.NotGranted {
		r.NonClaims = append(r.NonClaims, "oci not granted: "+n)
	}
	for _, n := range k.m.NotHonoured {
		r.NonClaims = append(r.NonClaims, "oci not honoured: "+n)
	}
}

func (k *keeper) writeEvidence() error {
	if k.l == nil || k.l.Record == nil {
		return nil
	}
	b, err := json.MarshalIndent(k.l.Record, "", "  ")
	if err != nil {
		return failure.Fail(failure.KindInternal, "evidence", err)
	}
	if err := safefile.WriteFile(filepath.Join(k.dir, oci.EvidenceFile), append(b, '\n'), 0o600); err != nil {
		return failure.Fail(failure.KindStore, "evidence", err)
	}
	return nil
}

func (k *keeper) saveCreated(bundle, receipt string) error {
	self, err := store.Self()
	if err != nil {
		return failure.Fail(failure.KindInternal, "oci", err)
	}
	ann := map[string]string{}
	for a, v := range k.m.Annotations {
		ann[a] = v
	}
	ann[oci.AnnotationSandboxID] = k.l.Sandbox().ID()
	ann[oci.AnnotationLevelAdmitted] = k.l.Level.String()
	ann[oci.AnnotationLevelRequested] = k.m.Spec.Level.String()
	ann[oci.AnnotationEvidence] = filepath.Join(k.dir, oci.EvidenceFile)
	ann[oci.AnnotationReceiptDigest] = receipt
	ann[oci.AnnotationNotGranted] = joinNotes(k.m.NotGranted)
	ann[oci.AnnotationNotHonoured] = joinNotes(k.m.NotHonoured)
	ann[oci.AnnotationNetwork] = k.m.Network
	k.state = &oci.State{
		State:     specs.State{Version: specs.Version, ID: k.id, Status: specs.StateCreated, Pid: os.Getpid(), Bundle: bundle, Annotations: ann},
		Keeper:    self,
		SandboxID: k.l.Sandbox().ID(),
		StateDir:  k.o.g.stateDir,
		Created:   time.Now().UTC(),
		EngineNet: k.m.EngineNetPath,
	}
	return k.save()
}

func joinNotes(n []string) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (k *keeper) save() error {
	if err := k.root.Save(k.state); err != nil {
		return failure.Fail(failure.KindStore, "oci state", err)
	}
	return nil
}

// sendConsole hands the terminal's master to the engine's console socket
// (as runc does: one descriptor, the pty's name as the payload). cordon
// keeps no copy.
func (k *keeper) sendConsole(path string) error {
	th, ok := k.l.Sandbox().(sandbox.TerminalHolder)
	if !ok {
		return failure.Failf(failure.KindUnsupported, "oci", "the provider cannot give a terminal")
	}
	master := th.Master()
	if master == nil {
		return failure.Failf(failure.KindStart, "oci", "no terminal master after start")
	}
	defer master.Close()
	return sendMaster(path, master)
}

func (k *keeper) listen() (*net.UnixListener, error) {
	ln, err := oci.Listen(k.dir)
	if err != nil {
		return nil, failure.Fail(failure.KindStart, "oci keeper socket", err)
	}
	return ln, nil
}

// serve waits for start (or a kill before it), runs the program, and
// ends with it.
func (k *keeper) serve(ctx context.Context) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	started := false
	for {
		select {
		case reply := <-k.start:
			if started {
				reply <- oci.Reply{Error: "container already started", Kind: string(failure.KindUsage)}
				continue
			}
			if k.o.g.pauseAt == "oci.start.before_exec" {
				k.o.g.logger().Warn("test: paused before exec") // test builds only (--test-pause-at)
				time.Sleep(3 * time.Second)
			}
			if err := k.run(ctx); err != nil {
				reply <- oci.Reply{Error: describe(err), Kind: string(failure.KindOf(err))}
				return k.end(ctx, failure.ExitRefused)
			}
			started = true
			reply <- oci.Reply{OK: true}
		case req := <-k.kill:
			if !started {
				return k.end(ctx, 128+req.Signal)
			}
			// Accepted while a start was under way: the program runs
			// now, so the signal goes to it (never dropped).
			k.deliver(ctx, req)
		case s := <-sigs:
			if started {
				k.l.Sandbox().Signal(s.(syscall.Signal))
			} else {
				return k.end(ctx, 128+int(s.(syscall.Signal)))
			}
		case code := <-k.exited:
			return k.end(ctx, code)
		}
	}
}

// run executes the program and watches for its end.
func (k *keeper) run(ctx context.Context) error {
	if err := k.l.Exec(ctx); err != nil {
		var xe *sandbox.ExecError
		if errors.As(err, &xe) {
			what := "cannot be executed"
			if xe.NotFound() {
				what = "not found in the container's root"
			}
			return failure.Failf(failure.KindExec, "oci start", "%s: %s (%s)", clipText(k.m.Spec.Argv[0]), what, xe.Msg)
		}
		return err
	}
	k.setStatus(specs.StateRunning, nil)
	go func() {
		ex, err := k.l.Wait(context.WithoutCancel(ctx))
		code := ex.Code
		switch {
		case err != nil:
			code = failure.ExitRefused
		case ex.Signal != 0:
			code = 128 + ex.Signal
		}
		if rec := k.l.Record; rec != nil && err == nil {
			now := time.Now().UTC()
			rec.FinishedAt = &now
			rec.Outcome = &evidence.Outcome{ExitCode: ex.Code, Signal: ex.Signal, OOM: ex.OOM, TimedOut: ex.TimedOut}
		}
		k.exited <- code
	}()
	return nil
}

// end records the container stopped and returns its status; the
// deferred Close stops the gateway and deprovisions.
func (k *keeper) end(ctx context.Context, code int) int {
	k.execs.killAll()
	k.setStatus(specs.StateStopped, &code)
	_ = k.writeEvidence()
	_ = os.Remove(filepath.Join(k.dir, oci.SocketFile))
	if code > 255 {
		code = 255
	}
	return code
}
