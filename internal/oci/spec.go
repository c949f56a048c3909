package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// MaxConfigBytes bounds the config.json read from a bundle.
const MaxConfigBytes = 4 << 20

// Annotation names (docs/oci.md).
const (
	// AnnotationConfig, in config.json, names a gateway configuration the
	// host operator placed in the operator's directory (Options.ConfigDir):
	// a name, never a path.
	AnnotationConfig = "dev.cordon.config"

	AnnotationSandboxID      = "dev.cordon.sandbox-id"
	AnnotationLevelAdmitted  = "dev.cordon.level-admitted"
	AnnotationLevelRequested = "dev.cordon.level-requested"
	AnnotationEvidence       = "dev.cordon.evidence"
	AnnotationReceiptDigest  = "dev.cordon.receipt-digest"
	AnnotationNotGranted     = "dev.cordon.not-granted"
	AnnotationNotHonoured    = "dev.cordon.not-honoured"
)

// Options are the host operator's choices for every container (the
// runtime's flags, set in the engine's runtime configuration), never the
// bundle's.
type Options struct {
	// Level is the claim every container must evidence.
	Level sandbox.Level
	// ConfigDir holds the gateway configurations a bundle may name
	// (AnnotationConfig): ConfigDir/NAME.yaml.
	ConfigDir string
	// HostNamespace reports whether a namespace file (a linux.namespaces
	// path) is the host's own namespace of that type; nil uses the host's
	// /proc/1/ns (tests replace it).
	HostNamespace func(typ specs.LinuxNamespaceType, path string) (bool, error)
	// IsKeeper reports whether pid is another cordon container's keeper
	// (its state.pid). An engine asks a container to share a pod's
	// namespaces as /proc/<that pid>/ns/TYPE; the keeper runs in the
	// host's namespaces, so the path is not a request for the host's:
	// it is not joined, and recorded. nil: no pid is a keeper.
	IsKeeper func(pid int) bool
	// VolumeRoots are the directories under which an engine keeps its
	// volumes (Docker's DATA-ROOT/volumes, kubelet's pods directory):
	// a bind whose source is strictly below one holds the image's ids
	// and is bound as the image's root is (sandbox.Bind.ImageIDs).
	// Absolute and clean; none by default.
	VolumeRoots []string
	// EngineNetwork is EngineNetworkOwn ("" too) or EngineNetworkAccept:
	// whether a network namespace path in config.json is joined.
	// KeeperEngineNet returns the engine's network namespace the
	// container of keeper pid joined ("" for cordon's own, or no such
	// keeper): with accept, a container naming that keeper's
	// /proc/PID/ns/net (a CRI pod's containers name the pod sandbox
	// container's task) joins that namespace. nil: none.
	EngineNetwork   string
	KeeperEngineNet func(pid int) string
}

// Mapped is a bundle mapped onto the provider seam.
type Mapped struct {
	Spec sandbox.Spec
	// Config is the operator's gateway configuration the bundle named
	// ("" for none: the container has no way out).
	Config   string
	Workload string
	// ConsoleSize is the terminal's initial size (with Spec.Terminal).
	// NotGranted lists what the bundle asked for and cordon does not grant
	// (capabilities, the engine's seccomp profile…); NotHonoured the other
	// fields cordon did not apply, each with what it did instead.
	NotGranted  []string
	NotHonoured []string
	// Digest is the sha256 of config.json's bytes.
	Digest string
	// Annotations are the bundle's own.
	Annotations map[string]string
	// OCIVersion is the bundle's.
	OCIVersion string
	// EngineNetPath is the engine's network namespace the container joins
	// (Options.EngineNetwork accept and a path in config.json), "" for
	// cordon's own; Network says which, for the state (AnnotationNetwork).
	EngineNetPath string
	Network       string
}

// Load reads bundle/config.json (not through a symlink, bounded).
func Load(bundle string) (*specs.Spec, []byte, error) {
	if !filepath.IsAbs(bundle) {
		return nil, nil, malformed("bundle", "%q is not an absolute path", bundle)
	}
	b, err := safefile.ReadBounded(filepath.Join(bundle, "config.json"), MaxConfigBytes, false)
	if err != nil {
		return nil, nil, malformed("config.json", "%v", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, malformed("config.json", "not a runtime spec: %v", err)
	}
	return &s, b, nil
}

// Map maps a bundle's spec onto a sandbox spec. It refuses, naming the
// field, everything it cannot make safe, and records everything else it
// does not apply.
func Map(s *specs.Spec, raw []byte, bundle string, o Options) (*Mapped, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	m := &Mapped{Digest: "sha256:" + hex.EncodeToString(sum[:]), OCIVersion: s.Version}
	m.Annotations = ownAnnotations(s.Annotations, m)
	m.Spec.Level = o.Level
	m.Spec.Image = &sandbox.Image{Hostname: s.Hostname}
	if err := mapRoot(s, bundle, m); err != nil {
		return nil, err
	}
	if err := mapProcess(s.Process, m); err != nil {
		return nil, err
	}
	if err := mapLinux(s.Linux, o, m); err != nil {
		return nil, err
	}
	if err := mapMounts(s.Mounts, m, o.VolumeRoots); err != nil {
		return nil, err
	}
	if err := mapHooks(s.Hooks, m); err != nil {
		return nil, err
	}
	if err := mapGateway(s.Annotations, o, m); err != nil {
		return nil, err
	}
	if s.Domainname != "" {
		m.NotHonoured = append(m.NotHonoured, "domainname: not set")
	}
	if err := noteNetwork(o, m); err != nil {
		return nil, err
	}
	sort.Strings(m.NotGranted)
	return m, nil
}

// ownAnnotations are the bundle's annotations the state may carry: not
// under dev.cordon. (cordon's claims: the level admitted, the evidence),
// except the bundle's own request dev.cordon.config. What is dropped is
// recorded.
func ownAnnotations(ann map[string]string, m *Mapped) map[string]string {
	if ann == nil {
		return nil
	}
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(ann))
	for _, k := range keys {
		if strings.HasPrefix(k, "dev.cordon.") && k != AnnotationConfig {
			m.NotHonoured = append(m.NotHonoured, "annotations."+clip(k)+": dropped (dev.cordon.* in the state is cordon's own)")
			continue
		}
		out[k] = ann[k]
	}
	return out
}

func mapRoot(s *specs.Spec, bundle string, m *Mapped) error {
	if s.Root == nil || s.Root.Path == "" {
		return malformed("root.path", "missing")
	}
	p := s.Root.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(bundle, p)
	}
	m.Spec.Rootfs = filepath.Clean(p)
	m.Spec.Image.Writable = !s.Root.Readonly
	return nil
}

func mapProcess(p *specs.Process, m *Mapped) error {
	if p == nil {
		return malformed("process", "missing")
	}
	if len(p.Args) == 0 || p.Args[0] == "" {
		return malformed("process.args", "no program given")
	}
	if p.CommandLine != "" {
		return malformed("process.commandLine", "is for Windows")
	}
	if p.Cwd == "" || !filepath.IsAbs(p.Cwd) {
		return malformed("process.cwd", "%q is not an absolute path", p.Cwd)
	}
	for i, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return malformed(fmt.Sprintf("process.env[%d]", i), "%q is not K=V", clip(kv))
		}
	}
	m.Spec.Argv, m.Spec.Env, m.Spec.Image.Dir = p.Args, p.Env, filepath.Clean(p.Cwd)
	img := m.Spec.Image
	img.UID, img.GID, img.AdditionalGIDs = p.User.UID, p.User.GID, p.User.AdditionalGids
	if p.User.Umask != nil {
		m.NotHonoured = append(m.NotHonoured, "process.user.umask: the sandbox's default umask applies")
	}
	if p.Terminal {
		t := &sandbox.Terminal{Stdin: true, Stdout: true, Stderr: true}
		if p.ConsoleSize != nil {
			t.Rows, t.Cols = clampU16(p.ConsoleSize.Height), clampU16(p.ConsoleSize.Width)
		}
		m.Spec.Terminal, img.TerminalAtStart = t, true
	}
	if c := p.Capabilities; c != nil {
		set := map[string]bool{}
		for _, l := range [][]string{c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient} {
			for _, n := range l {
				set[n] = true
			}
		}
		for n := range set {
			m.NotGranted = append(m.NotGranted, "process.capabilities: "+n)
		}
	}
	if !p.NoNewPrivileges {
		m.NotHonoured = append(m.NotHonoured, "process.noNewPrivileges: false asked; cordon always sets no_new_privs")
	}
	if p.ApparmorProfile != "" {
		m.NotHonoured = append(m.NotHonoured, "process.apparmorProfile: "+p.ApparmorProfile+" not applied (cordon's own layers apply)")
	}
	if p.SelinuxLabel != "" {
		m.NotHonoured = append(m.NotHonoured, "process.selinuxLabel: not applied")
	}
	if p.OOMScoreAdj != nil {
		m.NotHonoured = append(m.NotHonoured, "process.oomScoreAdj: not applied")
	}
	if p.Scheduler != nil || p.IOPriority != nil || p.ExecCPUAffinity != nil {
		m.NotHonoured = append(m.NotHonoured, "process.scheduler/ioPriority/execCPUAffinity: not applied")
	}
	return mapRlimits(p.Rlimits, m)
}

func clampU16(v uint) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// namespacedSysctls are the sysctl prefixes that live in a namespace the
// container has of its own (network, IPC): an engine's defaults there
// (Docker sets net.ipv4.ip_unprivileged_port_start and ping_group_range)
// touch nothing outside the sandbox. cordon does not apply them (the
// sandbox's own defaults stay) and records that; any other sysctl would
// reach the host's kernel and is refused.
var namespacedSysctls = []string{"net.", "kernel.shm", "kernel.msg", "kernel.sem", "fs.mqueue."}

func mapSysctl(sc map[string]string, m *Mapped) error {
	keys := make([]string, 0, len(sc))
	for k := range sc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.ContainsFunc(namespacedSysctls, func(p string) bool { return strings.HasPrefix(k, p) }) {
			return refuse("linux.sysctl."+clip(k), "not a sysctl of a namespace the container has of its own; refused")
		}
		m.NotHonoured = append(m.NotHonoured, "linux.sysctl."+clip(k)+"="+clip(sc[k])+": not applied (the sandbox's own namespace keeps its default)")
	}
	return nil
}

// procNSPid is the pid of a path /proc/PID/ns/NAME.
func procNSPid(p string) (int, bool) {
	rest, ok := strings.CutPrefix(filepath.Clean(p), "/proc/")
	if !ok {
		return 0, false
	}
	num, tail, ok := strings.Cut(rest, "/ns/")
	if !ok || strings.Contains(tail, "/") {
		return 0, false
	}
	pid, err := strconv.Atoi(num)
	return pid, err == nil && pid > 0
}

// rlimitNames are the rlimits a bundle may lower.
var rlimitNames = map[string]int{
	"RLIMIT_AS": 9, "RLIMIT_CORE": 4, "RLIMIT_CPU": 0, "RLIMIT_DATA": 2, "RLIMIT_FSIZE": 1,
	"RLIMIT_LOCKS": 10, "RLIMIT_MEMLOCK": 8, "RLIMIT_MSGQUEUE": 12, "RLIMIT_NICE": 13,
	"RLIMIT_NOFILE": 7, "RLIMIT_NPROC": 6, "RLIMIT_RSS": 5, "RLIMIT_RTPRIO": 14,
	"RLIMIT_RTTIME": 15, "RLIMIT_SIGPENDING": 11, "RLIMIT_STACK": 3,
}

func mapRlimits(rl []specs.POSIXRlimit, m *Mapped) error {
	seen := map[string]bool{}
	for i, r := range rl {
		n, ok := rlimitNames[r.Type]
		field := fmt.Sprintf("process.rlimits[%d]", i)
		if !ok {
			return malformed(field, "unknown rlimit %q", clip(r.Type))
		}
		if seen[r.Type] {
			return malformed(field, "%s given twice", r.Type)
		}
		if r.Soft > r.Hard {
			return malformed(field, "%s soft %d above hard %d", r.Type, r.Soft, r.Hard)
		}
		seen[r.Type] = true
		m.Spec.Image.Rlimits = append(m.Spec.Image.Rlimits, sandbox.Rlimit{Type: n, Soft: r.Soft, Hard: r.Hard})
	}
	return nil
}

// hostNamespaces are the namespaces whose absence from linux.namespaces
// means the container shares the host's.
var hostNamespaces = []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.NetworkNamespace}

func mapLinux(l *specs.Linux, o Options, m *Mapped) error {
	if l == nil {
		return refuse("linux", "missing: the container would share every host namespace")
	}
	if err := mapNamespaces(l.Namespaces, o, m); err != nil {
		return err
	}
	if l.Seccomp == nil {
		return refuse("linux.seccomp", "absent (seccomp disabled, e.g. --security-opt seccomp=unconfined or --privileged); cordon never runs a container without its seccomp filter")
	}
	m.NotGranted = append(m.NotGranted, "linux.seccomp: the engine's profile is replaced by cordon's own filter (stricter: docs/oci.md)")
	if len(l.MaskedPaths) == 0 {
		return refuse("linux.maskedPaths", "empty (kernel paths unmasked, e.g. --privileged or systempaths=unconfined); cordon never unmasks kernel paths")
	}
	if len(l.ReadonlyPaths) == 0 {
		return refuse("linux.readonlyPaths", "empty (kernel paths writable, e.g. --privileged or systempaths=unconfined)")
	}
	m.NotHonoured = append(m.NotHonoured, "linux.maskedPaths/readonlyPaths: cordon's own masks apply (docs/oci.md lists them)")
	if len(l.Devices) > 0 {
		return refuse(fmt.Sprintf("linux.devices[0] (%s)", clip(l.Devices[0].Path)), "host device access is refused; the sandbox's /dev has only null, zero, full, random, urandom, tty and its own ptys")
	}
	if err := mapSysctl(l.Sysctl, m); err != nil {
		return err
	}
	if l.IntelRdt != nil || l.Personality != nil || l.MemoryPolicy != nil || len(l.NetDevices) > 0 {
		return refuse("linux.intelRdt/personality/memoryPolicy/netDevices", "not supported by cordon")
	}
	if len(l.UIDMappings) > 0 || len(l.GIDMappings) > 0 {
		m.NotHonoured = append(m.NotHonoured, "linux.uidMappings/gidMappings: cordon maps the container to its own leased range")
	}
	if l.CgroupsPath != "" {
		m.NotHonoured = append(m.NotHonoured, "linux.cgroupsPath: cordon places the container in its own cgroups (cordon/<sandbox-id>)")
	}
	if l.MountLabel != "" {
		m.NotHonoured = append(m.NotHonoured, "linux.mountLabel: not applied")
	}
	return mapResources(l.Resources, m)
}

func mapNamespaces(ns []specs.LinuxNamespace, o Options, m *Mapped) error {
	have := map[specs.LinuxNamespaceType]bool{}
	for i, n := range ns {
		field := fmt.Sprintf("linux.namespaces[%d] (%s)", i, n.Type)
		if have[n.Type] {
			return malformed(field, "given twice")
		}
		have[n.Type] = true
		if n.Path == "" {
			continue
		}
		host := o.HostNamespace
		if host == nil {
			host = isHostNamespace
		}
		if pid, ok := procNSPid(n.Path); ok && o.IsKeeper != nil && o.IsKeeper(pid) {
			if joined, err := keeperEngineNet(field, n, pid, o, m); joined || err != nil {
				return err
			}
			m.NotHonoured = append(m.NotHonoured, fmt.Sprintf("linux.namespaces %s path %s (another cordon container's): not joined; the container has its own", n.Type, clip(n.Path)))
			continue
		}
		is, err := host(n.Type, n.Path)
		if err != nil {
			return malformed(field, "path %s: %v", clip(n.Path), err)
		}
		if is {
			return refuse(field, "path %s is the host's own %s namespace", clip(n.Path), n.Type)
		}
		if n.Type == specs.NetworkNamespace && o.EngineNetwork == EngineNetworkAccept {
			if err := mapEngineNet(field, n.Path, m); err != nil {
				return err
			}
			continue
		}
		if n.Type == specs.NetworkNamespace {
			m.NotHonoured = append(m.NotHonoured, "linux.namespaces network path "+clip(n.Path)+": not joined; the container has cordon's own network namespace (engine networking not accepted)")
			continue
		}
		m.NotHonoured = append(m.NotHonoured, fmt.Sprintf("linux.namespaces %s path %s: not joined; the container has its own", n.Type, clip(n.Path)))
	}
	for _, t := range hostNamespaces {
		if !have[t] {
			return refuse("linux.namespaces", "no %q namespace: the container would share the host's (e.g. --network host, --pid host); cordon gives every container its own", t)
		}
	}
	if have[specs.NetworkNamespace] && m.EngineNetPath == "" {
		m.NotHonoured = append(m.NotHonoured, "network: cordon's own network namespace (loopback only; the gateway, when configured, is the only way out)")
	}
	return nil
}

func mapResources(r *specs.LinuxResources, m *Mapped) error {
	if r == nil {
		return nil
	}
	for i, d := range r.Devices {
		if !d.Allow || !strings.ContainsAny(d.Access, "rw") {
			continue
		}
		if d.Type == "a" || d.Type == "" || d.Major == nil || (d.Minor == nil && !defaultMajor(*d.Major)) {
			return refuse(fmt.Sprintf("linux.resources.devices[%d]", i), "allows %q access to every device (privileged); refused", d.Access)
		}
	}
	lim := &m.Spec.Limits
	if mem := r.Memory; mem != nil && mem.Limit != nil && *mem.Limit > 0 {
		lim.MemoryBytes = *mem.Limit
	}
	if p := r.Pids; p != nil && p.Limit != nil && *p.Limit > 0 {
		lim.Pids = *p.Limit
	}
	if c := r.CPU; c != nil && c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
		lim.CPUs = float64(*c.Quota) / float64(*c.Period)
	}
	if r.BlockIO != nil || len(r.HugepageLimits) > 0 || r.Network != nil || r.Rdma != nil || len(r.Unified) > 0 {
		m.NotHonoured = append(m.NotHonoured, "linux.resources (blockIO/hugepageLimits/network/rdma/unified): not applied; memory, pids and cpu quota are")
	}
	return nil
}

// defaultMajor: the pty majors an engine's default rules allow (136: ptys,
// 5: tty/console/ptmx, 1: mem devices, 10: misc) — the sandbox's own /dev
// decides what exists, so these rules grant nothing more.
func defaultMajor(maj int64) bool { return slices.Contains([]int64{1, 5, 10, 136}, maj) }

// configName is a gateway configuration's name (AnnotationConfig).
var configName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func mapGateway(ann map[string]string, o Options, m *Mapped) error {
	name, ok := ann[AnnotationConfig]
	m.Workload = "oci"
	if !ok {
		return nil
	}
	if !configName.MatchString(name) || strings.Contains(name, "..") {
		return malformed("annotations."+AnnotationConfig, "%q is not a configuration name (lower-case letters, digits, '.', '_', '-'; a name, never a path)", clip(name))
	}
	if o.ConfigDir == "" {
		return refuse("annotations."+AnnotationConfig, "no operator configuration directory is set (--config-dir)")
	}
	m.Config, m.Workload = filepath.Join(o.ConfigDir, name+".yaml"), name
	return nil
}
