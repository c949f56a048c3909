package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
)

// Default is the provider used when none is named.
const Default = "linux-native"

// Options are what every provider constructor takes (the options the
// native provider took before the registry).
type Options struct {
	StateDir string
	Store    *store.Store
	Logger   *slog.Logger
	// CordonSHA256 is the digest of the running binary, for evidence.
	CordonSHA256 string
	// TestSkip is passed to the sandbox init; only test builds honour it.
	TestSkip []string
	// Daemon asks for sandboxes that outlive the process that made them
	// (the host manager).
	Daemon bool
}

// Provider is what a registered provider gives the CLI: a provider whose
// sandboxes the daemon can own (sandbox.Resident embeds sandbox.Provider).
type Provider interface {
	sandbox.Resident
}

// Reclaimer is implemented by a provider whose standalone runs can leave
// host residue (processes, resource groups, leases) after their owner is
// killed: `cordon gc` and `cordon run` call it. A provider without it
// leaves nothing to reclaim.
type Reclaimer interface {
	Reclaim(ctx context.Context) (ReclaimReport, error)
}

// ReclaimReport says what a reclamation did.
type ReclaimReport struct {
	Reclaimed      []string `json:"reclaimed"`      // records of dead standalone runs, cleaned up
	Live           []string `json:"live"`           // records whose owner still runs
	Unattributable []string `json:"unattributable"` // residue with no record here: reported, never touched
}

// Constructor builds a provider.
type Constructor func(Options) (Provider, error)

var (
	mu    sync.Mutex
	ctors = map[string]Constructor{}
)

// Register adds a provider; a duplicate name panics (a build mistake).
func Register(name string, c Constructor) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := ctors[name]; dup || name == "" || c == nil {
		panic("registry: bad or duplicate provider " + name)
	}
	ctors[name] = c
}

// Names lists the registered providers, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(ctors))
	for n := range ctors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Known reports whether name is registered; when it is not, the error is
// a usage error naming the known providers.
func Known(name string) error {
	mu.Lock()
	_, ok := ctors[name]
	mu.Unlock()
	if ok {
		return nil
	}
	return failure.Failf(failure.KindUsage, "--provider", "unknown provider %q; this binary has: %s", name, strings.Join(Names(), ", "))
}

// New builds the provider name with o ("" is Default).
func New(name string, o Options) (Provider, error) {
	if name == "" {
		name = Default
	}
	if err := Known(name); err != nil {
		return nil, err
	}
	mu.Lock()
	c := ctors[name]
	mu.Unlock()
	p, err := c(o)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("registry: provider %s built nothing", name)
	}
	return p, nil
}
