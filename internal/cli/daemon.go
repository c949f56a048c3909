package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
)

func daemonCmd(g *globals) *cobra.Command {
	var socket, group, policyDir, volumeDir, settings string
	var tenants []string
	var perUser int
	var drift time.Duration
	var manifest []string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the host manager: long-lived sandboxes over the cordon-host/v1 protocol",
		Long: `Run cordon's host manager (as root). It owns sandboxes that outlive the CLI
— created, started, exec'd into, stopped and removed with 'cordon sandbox' —
and serves the cordon-host/v1 protocol on a Unix socket (default
/run/cordon/cordon.sock, mode 0600; --group lets that group's members
connect, mode 0660). Callers are identified by SO_PEERCRED: root may act on
every sandbox, another user only on the sandboxes they created. The daemon
reads no host path a caller names: workspaces arrive as open descriptors.

At start it reconciles its records with the host: sandboxes still running
are adopted (their gateway reopened, their profile reset to SAFE_GUIDED),
the residue of every other one is removed, and host residue it cannot
attribute is reported. Standalone 'cordon run' and 'cordon gc' never touch
daemon-owned sandboxes.

Drift of the cordon binary, of the policy (a sandbox's own, plus the host
policy directory) or of the base rootfs manifest puts a sandbox in DRAIN:
running work continues, start and exec are refused until
'cordon sandbox readmit NAME'.

It logs to stderr at INFO (--log-level, --log-format text|json; start
with socket and pid, ready, every sandbox's create, start, stop, rm and
adoption with its id and owner uid, drain, reloads, stop).

Under systemd (dist/systemd/cordon.service, Type=notify) it reports
readiness on $NOTIFY_SOCKET: READY=1 once its socket accepts and
reconciliation is done, RELOADING=1 then READY=1 around a reload,
STOPPING=1 on SIGTERM. It removes NOTIFY_SOCKET from its environment, so
no sandbox, gateway or broker inherits it.

SIGHUP never stops it. It reloads:
  - the settings file (--settings, default /etc/cordon/daemon.conf):
    log-level; a file without it returns to the level the daemon started
    with (--log-level, CORDON_LOG_LEVEL, else info); a file that does not
    parse changes nothing;
  - the host policy directory (a set that does not load is refused whole
    and the set in force stays, said in the log and in 'daemon status').
Everything else — socket, group, state, volume and policy directory
paths, --log-format, tenants, limits — needs a restart.
SIGTERM stops accepting; the sandboxes keep running and the next
daemon adopts them.

'cordon daemon status' asks a running daemon for its health.`,
		Example: `  cordon daemon
  cordon daemon --group cordon --policy-dir /etc/cordon/policy
  cordon daemon --log-format json --settings /etc/cordon/daemon.conf
  cordon daemon status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("daemon"); err != nil {
				return err
			}
			gid := -1
			if n, err := strconv.Atoi(group); err == nil && n >= 0 {
				gid = n
			} else if group != "" {
				gr, err := user.LookupGroup(group)
				if err != nil {
					return failure.Failf(failure.KindUsage, "daemon", "--group %s: %v", group, err)
				}
				gid, _ = strconv.Atoi(gr.Gid)
			}
			tmap := map[uint32][]string{}
			for _, t := range tenants {
				u, name, ok := strings.Cut(t, "=")
				n, err := strconv.ParseUint(u, 10, 32)
				if !ok || err != nil || name == "" {
					return failure.Failf(failure.KindUsage, "daemon", "--tenant %q: want UID=TENANT", t)
				}
				tmap[uint32(n)] = append(tmap[uint32(n)], name)
			}
			g.daemonTenants, g.daemonPerUser = tmap, perUser
			return g.daemon(cmd.Context(), socket, gid, policyDir, volumeDir, manifest, drift, settings)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&socket, "socket", defaultSocket(), "Unix socket to serve (env CORDON_SOCKET)")
	fl.StringVar(&group, "group", "", "group (name or gid) whose members may connect (socket mode 0660); default: root only")
	fl.StringArrayVar(&tenants, "tenant", nil, "UID=TENANT: let that user's sandboxes claim TENANT (repeatable); by default a non-root user's tenant is u<uid> and their workloads u<uid>-…")
	fl.IntVar(&perUser, "max-per-user", 64, "sandboxes a non-root user may hold at once (not stopped)")
	fl.StringVar(&volumeDir, "volume-dir", hostmgr.DefaultVolumeDir, "where named volumes live (never under the state dir)")
	fl.StringVar(&policyDir, "policy-dir", "", "host-wide Cedar policies (*.cedar) added to every sandbox's policy set; reloaded on SIGHUP; changes put sandboxes in DRAIN")
	fl.StringVar(&settings, "settings", DefaultSettings, "settings file read at start and again on SIGHUP (log-level = debug|info|warn|error); absent is fine")
	fl.DurationVar(&drift, "drift-interval", 10*time.Second, "how often drift is checked")
	fl.StringVar(&g.daemonMetrics, "metrics-address", "", "serve Prometheus metrics on HOST:PORT, e.g. 127.0.0.1:9464 (default off; host network only; see docs/metrics.md)")
	fl.StringArrayVar(&manifest, "base-manifest", nil, "files whose digest identifies the default base rootfs (default /var/lib/dpkg/status)")
	_ = fl.MarkHidden("base-manifest")
	addDaemonTestFlags(fl, g)
	cmd.AddCommand(daemonStatusCmd(g))
	return cmd
}

func defaultSocket() string {
	if s := os.Getenv("CORDON_SOCKET"); s != "" {
		return s
	}
	return hostmgr.DefaultSocket
}

func (g *globals) daemon(ctx context.Context, socket string, gid int, policyDir, volumeDir string, manifest []string, drift time.Duration, settings string) error {
	// SIGHUP (an ssh logout after 'cordon daemon &') never kills the
	// daemon: it is caught from the first moment and, once serving,
	// reloads the settings file and the host policy directory.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log := g.daemonLogger()
	// Read and unset $NOTIFY_SOCKET before anything can start a child.
	notify := hostmgr.NotifierFromEnv(log)
	startLevel := g.logf.levelVar.Level()
	set, err := loadSettings(settings)
	if err != nil {
		return err
	}
	if set.LogLevel != nil && !g.logf.explicit {
		g.logf.levelVar.Set(*set.LogLevel)
	}
	log.Info("daemon starting", "socket", socket, "pid", os.Getpid(), "state_dir", g.stateDir, "policy_dir", policyDir,
		"settings", settings, "log_level", levelName(g.logf.levelVar.Level()), "version", Version)
	st, err := g.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	lifecycle, stopMetrics, err := g.startMetrics(st, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	prov, err := g.newProvider(registry.Options{Store: st, Logger: log, CordonSHA256: binaryDigest(g.stateDir), TestSkip: g.testSkip, Daemon: true})
	if err != nil {
		return err
	}
	exe, _ := os.Executable()
	// The daemon's own environment decides trace export for every
	// sandbox it runs; a client's telemetry section is ignored.
	tp, err := newTelemetry(ctx, nil, log)
	if err != nil {
		return err
	}
	defer tp.Shutdown(context.WithoutCancel(ctx))
	d, err := hostmgr.New(hostmgr.Options{
		Telemetry: tp,
		StateDir:  g.stateDir, Socket: socket, Group: gid, Store: st, Provider: prov, Logger: log,
		Version: Version, BuildVersion: currentVersion().Version,
		RuntimeDigest: "sha256:" + binaryDigest(g.stateDir), Executable: exe,
		PolicyDir: policyDir, VolumeDir: volumeDir, BaseManifest: manifest, DriftEvery: drift, CrashAt: g.crashAt,
		Tenants: g.daemonTenants, MaxPerUser: g.daemonPerUser, Notifier: notify, Lifecycle: lifecycle,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	signals := make(chan struct{})
	go func() {
		defer close(signals)
		select {
		case <-d.Ready():
		case <-ctx.Done():
			notify.Stopping()
			return
		}
		for {
			select {
			case <-ctx.Done():
				log.Info("stopping: no new connections; sandboxes keep running")
				notify.Stopping()
				return
			case <-hup:
				log.Info("SIGHUP: reloading")
				notify.Reloading()
				status := g.reloadSettings(log, settings, startLevel)
				if err := d.Reload(); err != nil { // logs what is in force, or why the new set was refused
					status = "host policy reload refused; the previous set stays in force"
				}
				notify.Ready(status)
			}
		}
	}()
	err = d.Run(ctx)
	stop()
	<-signals
	if errors.Is(err, context.Canceled) {
		log.Info("daemon stopped accepting; sandboxes keep running", "socket", socket)
		return nil
	}
	return err
}

// reloadSettings applies the settings file again (SIGHUP): its log-level,
// or the level the daemon started with when the file names none. A file
// that does not parse changes nothing. It returns the STATUS to report.
func (g *globals) reloadSettings(log *slog.Logger, path string, startLevel slog.Level) string {
	set, err := loadSettings(path)
	if err != nil {
		log.Error("reload: settings refused; the log level stays", "settings", path, "log_level", levelName(g.logf.levelVar.Level()), "err", err)
		return "settings refused; serving"
	}
	l := startLevel
	if set.LogLevel != nil {
		l = *set.LogLevel
	}
	g.logf.levelVar.Set(l)
	log.Info("reload: log level in force", "settings", path, "log_level", levelName(l))
	log.Debug("reload: debug logging on")
	return "serving; reloaded"
}
