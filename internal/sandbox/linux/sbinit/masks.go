package sbinit

// MaskKind says how a path under the sandbox's /proc is hidden.
type MaskKind string

const (
	// MaskNull binds the sandbox's /dev/null over a file, read-only:
	// reads return nothing, writes fail.
	MaskNull MaskKind = "null"
	// MaskEmpty mounts an empty read-only tmpfs over a directory.
	MaskEmpty MaskKind = "empty"
	// MaskReadOnly binds the path over itself, read-only: it stays
	// readable and is never writable.
	MaskReadOnly MaskKind = "ro"
)

// Mask is one path of the sandbox's /proc that must not show the host's
// content (or must not be writable), and why.
type Mask struct {
	Path string
	Kind MaskKind
	Why  string
}

// Masks is the security surface of the sandbox's private /proc. procfs is
// mounted per PID namespace, but most of its files outside /proc/PID
// describe the whole host: its kernel command line and build config, its
// devices, interrupts and memory zones, its boot. The set starts from
// what container runtimes mask by default (the OCI default spec of runc,
// containerd and moby: linux.maskedPaths and linux.readonlyPaths) and
// adds the host facts a sandbox has no use for. Where runc only makes a
// directory read-only but the directory lists host hardware (/proc/bus,
// /proc/irq, /proc/fs), it is masked here, which is stronger.
//
// The init applies the table in order after the root is built and every
// /proc/sys write is done, before it drops its capabilities (masks.go,
// maskProc): the program, with no capability and a seccomp filter that
// refuses every mount call, cannot remove a mask. A path the kernel does
// not have is skipped (the program cannot see it either); the trusted
// side checks each entry in the sandbox's mountinfo (evidence: mask:PATH).
//
// Order matters: a mask inside /proc/sys is applied after /proc/sys is
// bound read-only, or that bind would cover it.
//
// What stays visible on purpose (many programs need it: /proc/stat,
// /proc/meminfo, /proc/cpuinfo, /proc/loadavg, /proc/uptime, /proc/vmstat,
// /proc/version) is a non-claim in the evidence record and the README.
var Masks = []Mask{
	// runc/containerd/moby linux.maskedPaths.
	{"/proc/acpi", MaskEmpty, "OCI default: host ACPI devices and events"},
	{"/proc/asound", MaskEmpty, "OCI default: host sound cards"},
	{"/proc/kcore", MaskNull, "OCI default: an image of host physical memory"},
	{"/proc/keys", MaskNull, "OCI default: the keys of the user namespace's keyrings"},
	{"/proc/latency_stats", MaskNull, "OCI default: host scheduler latency statistics"},
	{"/proc/timer_list", MaskNull, "OCI default: every host timer, with task names and pids"},
	{"/proc/timer_stats", MaskNull, "OCI default: host timer statistics"},
	{"/proc/sched_debug", MaskNull, "OCI default: host scheduler state, every task"},
	{"/proc/scsi", MaskEmpty, "OCI default: host SCSI devices"},
	{"/proc/interrupts", MaskNull, "moby default: host interrupt counts per CPU and device"},
	// Host facts named by the attack review (issue 9, item 6).
	{"/proc/cmdline", MaskNull, "the host kernel's command line (boot parameters, hypervisor agent arguments)"},
	{"/proc/config.gz", MaskNull, "the host kernel's build configuration"},
	{"/proc/bootconfig", MaskNull, "the host's boot configuration (kernel and init command line parameters, CONFIG_BOOT_CONFIG)"},
	{"/proc/pressure", MaskEmpty, "host-wide CPU, memory and I/O pressure"},
	{"/proc/diskstats", MaskNull, "host block devices and their I/O counters"},
	{"/proc/partitions", MaskNull, "host block devices and partitions"},
	{"/proc/mdstat", MaskNull, "host software RAID arrays and their member disks"},
	{"/proc/softirqs", MaskNull, "host soft interrupt counts per CPU"},
	{"/proc/zoneinfo", MaskNull, "host memory zone statistics"},
	{"/proc/buddyinfo", MaskNull, "host memory fragmentation"},
	{"/proc/pagetypeinfo", MaskNull, "host memory fragmentation by page type"},
	{"/proc/vmallocinfo", MaskNull, "host kernel virtual memory allocations"},
	{"/proc/iomem", MaskNull, "host physical memory map"},
	{"/proc/ioports", MaskNull, "host I/O port map (devices)"},
	{"/proc/mtrr", MaskNull, "host memory type ranges"},
	{"/proc/dma", MaskNull, "host DMA channels"},
	{"/proc/swaps", MaskNull, "host swap devices and files, by host path"},
	{"/proc/locks", MaskNull, "every file lock on the host, by device and inode"},
	{"/proc/consoles", MaskNull, "host console devices"},
	{"/proc/key-users", MaskNull, "key quota usage per user"},
	{"/proc/kallsyms", MaskNull, "host kernel and module symbols"},
	{"/proc/modules", MaskNull, "host kernel modules"},
	{"/proc/driver", MaskEmpty, "host driver state (rtc)"},
	// runc linux.readonlyPaths: masked where they list host hardware.
	{"/proc/bus", MaskEmpty, "OCI default read-only; masked: host PCI and input devices"},
	{"/proc/fs", MaskEmpty, "OCI default read-only; masked: host block devices and filesystem statistics"},
	{"/proc/irq", MaskEmpty, "OCI default read-only; masked: host interrupt lines and their CPU affinity"},
	{"/proc/sysrq-trigger", MaskReadOnly, "OCI default read-only: host magic SysRq"},
	// /proc/sys last: the init writes /proc/sys/user/* limits first
	// (configureNamespaces); read-only after that.
	{"/proc/sys", MaskReadOnly, "OCI default read-only: kernel parameters"},
	{"/proc/sys/kernel/random/boot_id", MaskNull, "the host's boot id"},
}
