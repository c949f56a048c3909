package engines

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI is a client of the CRI API (runtime/v1) over a Unix socket: the
// calls kubelet makes to drive pods, which the tests make the same way.
// RT and Images are the generated clients; the methods below are the
// shapes the tests use over and over.
type CRI struct {
	conn   *grpc.ClientConn
	RT     cri.RuntimeServiceClient
	Images cri.ImageServiceClient
}

// CallTimeout bounds each CRI call the helpers make: a runtime that never
// answers (or an engine that retries a failing runtime call forever, as
// containerd does for a task's delete) fails the test instead of hanging it.
const CallTimeout = 2 * time.Minute

// bound is ctx limited to CallTimeout.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// DialCRI connects to the CRI API at socket (a path).
func DialCRI(ctx context.Context, socket string) (*CRI, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}))
	if err != nil {
		return nil, fmt.Errorf("dial CRI at %s: %w", socket, err)
	}
	return &CRI{conn: conn, RT: cri.NewRuntimeServiceClient(conn), Images: cri.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *CRI) Close() error { return c.conn.Close() }

// Version is the runtime's answer to the CRI Version call.
func (c *CRI) Version(ctx context.Context) (*cri.VersionResponse, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	return c.RT.Version(ctx, &cri.VersionRequest{Version: "v1"})
}

// PodConfig is the configuration kubelet sends for a plain pod named
// name in namespace "default": the seccomp profile RuntimeDefault (cordon
// refuses a container whose seccomp was explicitly disabled, which is
// what Unconfined — Kubernetes' default without SeccompDefault — means),
// pod-scoped namespaces, and cgroupParent as its cgroup parent.
func PodConfig(name, uid, cgroupParent string) *cri.PodSandboxConfig {
	return &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		Hostname:     name,
		LogDirectory: "",
		Labels:       map[string]string{"io.kubernetes.pod.name": name},
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{
				NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_POD, Pid: cri.NamespaceMode_CONTAINER, Ipc: cri.NamespaceMode_POD},
				Seccomp:          &cri.SecurityProfile{ProfileType: cri.SecurityProfile_RuntimeDefault},
			},
		},
	}
}

// Kubelet's default masked and read-only paths (k8s.io/kubernetes
// pkg/securitycontext, procMount Default): kubelet sends them in every
// container's security context and containerd's CRI plugin applies what it
// is sent (none, if none is sent).
var (
	kubeletMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// ContainerConfig is a container of image running args as kubelet asks
// for one: the seccomp profile RuntimeDefault, kubelet's default masked
// and read-only paths, and the mounts given.
func ContainerConfig(name, image string, args []string, mounts ...*cri.Mount) *cri.ContainerConfig {
	return &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: name},
		Image:    &cri.ImageSpec{Image: image},
		Args:     args,
		Mounts:   mounts,
		Linux: &cri.LinuxContainerConfig{
			SecurityContext: &cri.LinuxContainerSecurityContext{
				NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_POD, Pid: cri.NamespaceMode_CONTAINER, Ipc: cri.NamespaceMode_POD},
				Seccomp:          &cri.SecurityProfile{ProfileType: cri.SecurityProfile_RuntimeDefault},
				MaskedPaths:      kubeletMaskedPaths,
				ReadonlyPaths:    kubeletReadonlyPaths,
			},
		},
	}
}

// RunPod creates and starts a pod sandbox under the runtime handler.
func (c *CRI) RunPod(ctx context.Context, cfg *cri.PodSandboxConfig, handler string) (string, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s (handler %s): %w", cfg.GetMetadata().GetName(), handler, err)
	}
	return r.PodSandboxId, nil
}

// CreateContainer creates a container in pod (podCfg is the pod's own
// configuration, as kubelet passes it again).
func (c *CRI) CreateContainer(ctx context.Context, pod string, cfg *cri.ContainerConfig, podCfg *cri.PodSandboxConfig) (string, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s: %w", cfg.GetMetadata().GetName(), err)
	}
	return r.ContainerId, nil
}

// StartContainer starts a created container.
func (c *CRI) StartContainer(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	if _, err := c.RT.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("StartContainer %s: %w", id, err)
	}
	return nil
}

// ExecSync runs cmd in a running container and returns its stdout,
// stderr and exit code; timeout bounds the command (CRI's timeout).
func (c *CRI) ExecSync(ctx context.Context, id string, timeout time.Duration, cmd ...string) (stdout, stderr string, code int32, err error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout / time.Second)})
	if err != nil {
		return "", "", 0, fmt.Errorf("ExecSync %s %q: %w", id, cmd, err)
	}
	return string(r.Stdout), string(r.Stderr), r.ExitCode, nil
}

// Status is the container's CRI status.
func (c *CRI) Status(ctx context.Context, id string) (*cri.ContainerStatus, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, fmt.Errorf("ContainerStatus %s: %w", id, err)
	}
	return r.Status, nil
}

// StopContainer stops a container: SIGTERM (or the image's stop signal),
// then SIGKILL after timeout.
func (c *CRI) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	if _, err := c.RT.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: id, Timeout: int64(timeout / time.Second)}); err != nil {
		return fmt.Errorf("StopContainer %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes a container (stopping it first if it runs).
func (c *CRI) RemoveContainer(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	if _, err := c.RT.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("RemoveContainer %s: %w", id, err)
	}
	return nil
}

// StopPod stops a pod sandbox and every container in it.
func (c *CRI) StopPod(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	if _, err := c.RT.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	return nil
}

// RemovePod removes a stopped pod sandbox and its containers.
func (c *CRI) RemovePod(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	if _, err := c.RT.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// PodStatus is the pod sandbox's CRI status, with the runtime's info map
// when verbose (containerd puts the sandbox task's pid there).
func (c *CRI) PodStatus(ctx context.Context, id string, verbose bool) (*cri.PodSandboxStatusResponse, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: id, Verbose: verbose})
	if err != nil {
		return nil, fmt.Errorf("PodSandboxStatus %s: %w", id, err)
	}
	return r, nil
}

// ContainerInfo is the container's CRI status with the runtime's info map
// (containerd: "info" holds a JSON object with the task's "pid").
func (c *CRI) ContainerInfo(ctx context.Context, id string) (*cri.ContainerStatusResponse, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := c.RT.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("ContainerStatus %s: %w", id, err)
	}
	return r, nil
}

// RemoveAllPods stops and removes every pod sandbox the runtime has,
// best effort (a test's cleanup).
func (c *CRI) RemoveAllPods(ctx context.Context) {
	r, err := c.RT.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, p := range r.Items {
		_ = c.StopPod(ctx, p.Id)
		_ = c.RemovePod(ctx, p.Id)
	}
}
