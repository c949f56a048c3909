package oci

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/setns"
)

// The host operator's choices for a container's network (Options.EngineNetwork).
const (
	// EngineNetworkOwn: every container gets cordon's own network
	// namespace (loopback only; the gateway, when configured, is the only
	// way out); a network namespace path in config.json is not joined.
	EngineNetworkOwn = "own"
	// EngineNetworkAccept: the engine's own networking is accepted as a
	// lower, recorded claim. A network namespace path in config.json (a
	// CRI pod's) is joined instead; the network boundary is then not
	// verified, so the level is at most DEDICATED_RUNTIME.
	EngineNetworkAccept = "accept"
)

// AnnotationNetwork, in the state, says which network namespace the
// container runs in.
const AnnotationNetwork = "dev.cordon.network"

// engineNetReason is who accepted an engine's namespace, for the record.
const engineNetReason = "accepted by the host operator: --engine-network=accept"

// Validate checks the operator's options together: accepting the
// engine's network lowers the claim, so it needs a level the evidence can
// then support.
func (o Options) Validate() error {
	switch o.EngineNetwork {
	case "", EngineNetworkOwn:
		return nil
	case EngineNetworkAccept:
		if o.Level > sandbox.DedicatedRuntime {
			return failure.Failf(failure.KindUsage, "oci", "--engine-network=accept lowers the claim (the engine's network namespace is not a verified boundary): it needs --level %s or lower, and --level is %s", sandbox.DedicatedRuntime, o.Level)
		}
		return nil
	}
	return failure.Failf(failure.KindUsage, "oci", "--engine-network %q: want %s or %s", o.EngineNetwork, EngineNetworkOwn, EngineNetworkAccept)
}

// mapEngineNet records a network namespace path the operator accepts
// (after the host check): it must be a network namespace the sandbox may
// join (setns.OpenEngineNet). The keeper opens it again (OpenEngineNet)
// and the provider checks the descriptor it joins.
func mapEngineNet(field, path string, m *Mapped) error {
	f, err := setns.OpenEngineNet(path)
	if err != nil {
		return refuse(field, "path %s: %v; --engine-network=accept joins only an engine's network namespace owned by the host's user namespace", clip(path), err)
	}
	f.Close()
	m.EngineNetPath = path
	m.Network = "engine network namespace " + clip(path) + " joined (" + engineNetReason + "; network boundary not verified)"
	return nil
}

// keeperEngineNet: with accept, a network namespace path that is another
// cordon container's keeper's (/proc/PID/ns/net: the host's namespace, where
// keepers run) stands for the namespace that container joined — a CRI
// pod's, which its sandbox container joined — and is mapped to that one,
// checked again. joined is false when there is none (the container has
// cordon's own): the path is then recorded and not joined.
func keeperEngineNet(field string, n specs.LinuxNamespace, pid int, o Options, m *Mapped) (joined bool, err error) {
	if n.Type != specs.NetworkNamespace || o.EngineNetwork != EngineNetworkAccept || o.KeeperEngineNet == nil {
		return false, nil
	}
	path := o.KeeperEngineNet(pid)
	if path == "" {
		return false, nil
	}
	if err := mapEngineNet(field, path, m); err != nil {
		return false, err
	}
	m.Network += " — the namespace of the cordon container whose keeper " + clip(n.Path) + " names"
	return true, nil
}

// OpenEngineNet opens the engine's network namespace the bundle named
// (Mapped.EngineNetPath) for the provider to join, checked again.
func (m *Mapped) OpenEngineNet() (*sandbox.EngineNet, error) {
	if m.EngineNetPath == "" {
		return nil, nil
	}
	f, err := setns.OpenEngineNet(m.EngineNetPath)
	if err != nil {
		return nil, refuse("linux.namespaces (network)", "path %s: %v", clip(m.EngineNetPath), err)
	}
	return &sandbox.EngineNet{File: f, Path: m.EngineNetPath, Reason: engineNetReason}, nil
}

// noteNetwork finishes the network's record once the whole bundle is
// mapped: which namespace. A gateway in an engine's namespace is
// refused: its listeners (127.0.0.1 there) would serve every process
// sharing the namespace — a pod's other containers, runc's included —
// with what it brokers (the model's key, the tools, the secrets), and it
// would not be the way out anyway.
func noteNetwork(o Options, m *Mapped) error {
	switch {
	case m.EngineNetPath != "":
		if m.Config != "" {
			return refuse("annotations."+AnnotationConfig, "a gateway in the engine's network namespace (--engine-network=accept joins %s): "+
				"its listeners on 127.0.0.1 would serve every process sharing that namespace (a pod's other containers) with what it brokers, "+
				"and egress would not be only through it; use cordon's own network namespace (--engine-network=own) for a container with a gateway", clip(m.EngineNetPath))
		}
	case o.EngineNetwork == EngineNetworkAccept:
		m.Network = "cordon's own network namespace (loopback only): --engine-network=accept, but config.json names no network namespace to join (the engine makes it at create and configures it in a hook, which cordon does not run — Docker's case)"
		m.NotHonoured = append(m.NotHonoured, "network: the engine's networking could not be joined (no namespace path; hooks are not run); cordon's own network namespace")
	default:
		m.Network = "cordon's own network namespace (loopback only; the gateway, when configured, is the only way out)"
	}
	return nil
}
