package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// Version is set at build time with -ldflags "-X …/cli.Version=…".
var Version = "dev"

type globals struct {
	stateDir   string
	provider   string // --provider: the sandbox provider's registry name
	leaseSlots uint32
	testSkip   []string
	crashAt    string // test builds: the daemon's crash point
	panicAt    string // test builds: where cordon run panics (terminal restore tests)
	pauseAt    string // test builds: where cordon run pauses 3 s (terminal timing tests)
	// daemon flags passed to hostmgr
	daemonTenants map[uint32][]string
	daemonPerUser int
	daemonMetrics string // --metrics-address (metrics.go)
	stdout        io.Writer
	stderr        io.Writer
	// logw, when set, is where log lines go instead of stderr (cordon
	// run's log: a file once the program runs).
	logw io.Writer
	// fd3 is whether cordon was started with descriptor 3 open (run --json).
	fd3 bool
	// logf are the log flags (logging.go).
	logf logFlags
}

// exitError carries an exit status out of a command.
type exitError struct{ code int }

func (e *exitError) Error() string { return "exit " + strconv.Itoa(e.code) }

// Main runs the CLI and returns the process exit status.
func Main(args []string) int {
	g := &globals{stdout: os.Stdout, stderr: os.Stderr, fd3: fd3Open()}
	if sbinit.CgoEnabled {
		fmt.Fprintln(g.stderr, "cordon: unsupported: this binary was built with cgo; the sandbox init cannot harden every thread under cgo. Rebuild with CGO_ENABLED=0")
		return failure.ExitRefused
	}
	root := newRoot(g)
	root.SetArgs(args)
	err := root.Execute()
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(g.stderr, "cordon: %s\n", describe(err))
		return failure.ExitRefused
	}
}

// newRoot builds the command tree.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "cordon",
		Short: "Run an untrusted program or AI agent inside an evidenced Linux boundary",
		Long: `cordon runs any Linux program — an AI agent, a build, a script — inside an
OS-enforced boundary (user, PID, mount, network, IPC, UTS and cgroup namespaces
on a leased UID/GID range; no capabilities; no_new_privs; seccomp; Landlock;
cgroup limits) and admits it at an isolation level only from evidence that the
trusted side reads off the live sandbox before the program's first instruction.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	def := os.Getenv("CORDON_STATE_DIR")
	if def == "" {
		def = "/var/lib/cordon"
	}
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", def, "state directory: store, leases (env CORDON_STATE_DIR)")
	root.PersistentFlags().Uint32Var(&g.leaseSlots, "lease-slots", store.DefaultPool.Slots, "number of UID/GID ranges in the lease pool")
	_ = root.PersistentFlags().MarkHidden("lease-slots")
	root.PersistentFlags().StringVar(&g.provider, "provider", registry.Default, "sandbox provider for run, daemon, doctor and gc (this binary has: "+strings.Join(registry.Names(), ", ")+")")
	addTestFlags(root, g)
	addLogFlags(root, g)
	// An unknown --provider is refused before any command runs.
	logPre := root.PersistentPreRunE
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if err := registry.Known(g.provider); err != nil {
			return err
		}
		return logPre(c, args)
	}
	setVersionFlag(root)
	root.AddCommand(runCmd(g), doctorCmd(g), gcCmd(g), receiptsCmd(g), callsCmd(g), approvalsCmd(g), policyCmd(g), daemonCmd(g), sandboxCmd(g), volumeCmd(g), stopCmd(g), evidenceCmd(g), stateCmd(g), versionCmd(g), configCmd(g), genCmd(g), conformanceCmd(g), ociCmd(g))
	addCompletions(root) // last: over every command and flag (completion.go)
	return root
}

// describe renders an error with its failure kind, for a terminal: an
// error may embed agent or upstream text (a refused name, a daemon's
// message relayed from a sandbox), so it goes through textsafe.Line.
func describe(err error) string {
	if s, ok := describeConfigProblems(err); ok {
		return s
	}
	var se *failure.Error
	if errors.As(err, &se) {
		return textsafe.Line(se.Error())
	}
	// A failure relayed by the daemon keeps its kind (failure.Carrier).
	var c failure.Carrier
	if errors.As(err, &c) && failure.Known(c.FailureKind()) {
		return textsafe.Line(fmt.Sprintf("%s: %v", c.FailureKind(), err))
	}
	// A daemon refusal without a lifecycle kind keeps the protocol's own
	// stable kind (not_found, conflict, unauthorized, …): it is not the
	// caller's usage.
	var pe *proto.Error
	if errors.As(err, &pe) {
		return textsafe.Line(err.Error())
	}
	return textsafe.Line(fmt.Sprintf("%s: %v", failure.KindUsage, err))
}

// requireRoot fails closed with what is needed.
func requireRoot(op string) error {
	if os.Geteuid() != 0 {
		return failure.Failf(failure.KindPrivilege, op, "cordon builds sandboxes as root (it creates user namespaces with a leased UID/GID range, cgroups and idmapped mounts); run it with sudo, or as root. There is no rootless mode yet")
	}
	return nil
}

// newProvider builds the --provider named provider for this state
// directory; an unknown name is a usage error naming the known ones.
func (g *globals) newProvider(o registry.Options) (registry.Provider, error) {
	o.StateDir = g.stateDir
	return registry.New(g.provider, o)
}

func (g *globals) openStore() (*store.Store, error) {
	if !filepath.IsAbs(g.stateDir) {
		return nil, failure.Failf(failure.KindUsage, "state dir", "%s: must be an absolute path", g.stateDir)
	}
	pool := store.DefaultPool
	pool.Slots = g.leaseSlots
	s, err := store.Open(g.stateDir, pool)
	if err != nil {
		return nil, failure.Fail(failure.KindStore, "open store", err)
	}
	return s, nil
}

// binaryDigest returns the SHA-256 of the running binary, cached in the
// state dir by (device, inode, size, mtime) so it is hashed once.
func binaryDigest(stateDir string) string {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return ""
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return ""
	}
	key := fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	cache := filepath.Join(stateDir, "binary-digest.json")
	var c struct{ Key, SHA256 string }
	if b, err := os.ReadFile(cache); err == nil && json.Unmarshal(b, &c) == nil && c.Key == key {
		return c.SHA256
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	c.Key, c.SHA256 = key, hex.EncodeToString(h.Sum(nil))
	if b, err := json.Marshal(c); err == nil {
		_ = safefile.WriteFile(cache, b, 0o600) // a cache: never through a symlink

	}
	return c.SHA256
}

// writeJSON prints v as one JSON line. Values stay exact; characters a
// terminal would act on or hide (controls, C1, bidi overrides, …) are
// written as JSON \u escapes by textsafe.JSON, so the line is safe on a
// terminal and decodes to the same value.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, textsafe.JSON(b)+"\n")
	return err
}
