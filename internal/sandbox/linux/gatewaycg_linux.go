package linux

import (
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
)

// A sandbox's gateway runs in a cgroup of its own beside the sandbox's
// (<mount>/cordon/<id>--gw), with its own memory, pids and CPU limits.
// In the sandbox's group it was the largest process, so the agent could
// make the kernel's OOM killer pick it (fill /tmp, which is charged to
// the sandbox's memory) and escape the accounting of a stream it had
// already received; a fork bomb at pids.max could stop it from starting
// a thread. Now the agent's memory and tasks are charged only to the
// sandbox's group, whose OOM killer never sees the gateway, and the
// gateway is still bounded (and its limits read back as evidence). The
// group is in the sandbox's write-ahead record and is created, killed and
// removed with the sandbox's, by reclaim and the daemon's cleanup too.

// gatewaySuffix makes a sandbox id the name of its gateway's group. A
// sandbox id may not end with it.
const gatewaySuffix = "--gw"

// Gateway group bounds: memory at least minGatewayMemory (the sandbox's
// limit if larger: the gateway buffers what the agent sends), tasks
// gatewayPids, the same CPU quota as the sandbox.
const (
	minGatewayMemory = 256 << 20
	gatewayPids      = 1024
)

// GatewayGroup is the name of the cgroup of sandbox id's gateway.
func GatewayGroup(id string) string { return id + gatewaySuffix }

// gatewayLimits are the limits of the gateway's group for a sandbox with
// limits l (defaults applied).
func gatewayLimits(l sandbox.Limits) cgroup.Limits {
	// Its socket buffers (the agent's connections to the gateway, the
	// upstreams') are bounded like the sandbox's: on v1 they are charged
	// only under a kmem.tcp limit, and that limit is at most a quarter of
	// the host's TCP pressure threshold.
	mem := max(l.MemoryBytes, minGatewayMemory)
	return cgroup.Limits{MemoryBytes: mem, Pids: gatewayPids, CPUs: l.CPUs, TCPBytes: tcpLimit(mem, readHostTCPMem)}
}

// checkGatewayID refuses a sandbox id whose gateway group would not be a
// valid name or that names another sandbox's gateway group.
func checkGatewayID(id string) error {
	if strings.HasSuffix(id, gatewaySuffix) || !validID(GatewayGroup(id)) {
		return failure.Failf(failure.KindUsage, "provision", "invalid sandbox id %q: at most %d characters, not ending in %q", id, 64-len(gatewaySuffix), gatewaySuffix)
	}
	return nil
}

// GatewayFacts reads back the limits of a sandbox's gateway group and its
// OOM kills, for the run's report.
func (p *Provider) GatewayFacts(id string) (cgroup.Facts, int64, error) {
	g := cgroup.Open(p.layout, GatewayGroup(id))
	f, err := g.ReadBack()
	if err != nil {
		return f, 0, fmt.Errorf("gateway cgroup: %w", err)
	}
	n, err := g.OOMKills()
	return f, n, err
}

// helperFacts is GatewayFacts as the seam reports it.
func (p *Provider) helperFacts(id string) (sandbox.HelperFacts, error) {
	f, kills, err := p.GatewayFacts(id)
	return sandbox.HelperFacts{MemoryBytes: f.MemoryBytes, Pids: f.Pids, OOMKills: kills}, err
}
