package evidence

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/cordon-project/cordon/internal/setns"
	"golang.org/x/sys/unix"
)

// Inputs tell the collector what to expect. Everything it judges it reads
// itself from the host's /proc; Inputs never carry the sandbox's own word.
type Inputs struct {
	Pid                 int // host pid of the sandbox init
	LeaseUID, LeaseGID  uint32
	LeaseSize           uint32
	UID, GID            int               // the program's uid/gid inside the namespace
	CgroupPaths         map[string]string // controller ("" for v2) -> path the init must be in
	Resource            []Check           // limits read back from the cgroup filesystem by the trusted side
	MountTargets        []string          // every mount point the sandbox may have (sandbox view)
	WritableTargets     []string          // mount points that may be writable
	NoFile, FSize       uint64
	ProbeDir            string // sandbox path of the Landlock probe dir
	ProbeControl, Probe string // file names in ProbeDir
	Hostname            string
	InitEnv             []string     // the init's exact environment, as passed
	Masks               []MaskedPath // paths of the sandbox's /proc that must be masked
	// UserLimits are the /proc/sys/user/* values the init was told to set
	// in the sandbox's user namespace (name -> value).
	UserLimits map[string]uint64
	// PtyMax is the max= of the sandbox's devpts instance at /dev/pts.
	PtyMax int
	// Groups are the program's supplementary groups inside the namespace
	// (empty: none).
	Groups []int
	// MemProbe names the init's two /proc/1/mem probe children (control,
	// attempt) when the program is its namespace's root: the owner of the
	// init's /proc/PID/mem cannot tell then, and init_non_dumpable judges
	// the probes' descriptors instead (memProbeCheck).
	MemProbe [2]string
	// RootWritable: the root is an image's, mounted read-write, idmapped,
	// nosuid and nodev (image mode); otherwise it must be read-only.
	RootWritable bool
	// RootIdmapped: the root is an image's, idmapped onto the lease
	// (image mode, read-only or writable): its mount must say idmapped.
	RootIdmapped bool
	// Rlimits are further limits the init applied (an image's, lowered
	// only), by their /proc/PID/limits name: soft and hard. An entry for
	// open files or file size replaces NoFile or FSize.
	Rlimits map[string][2]uint64
}

var nsNames = []string{"pid", "mnt", "net", "ipc", "uts", "user", "cgroup"}

// Collect reads the live sandbox and judges the six boundaries.
func Collect(in Inputs) map[string]Boundary {
	proc := fmt.Sprintf("/proc/%d", in.Pid)
	ns := nsChecks(proc)
	sts, err := taskStatuses(proc)
	t := threads{proc: proc, sts: sts, err: err}
	// The reads are independent; run them side by side.
	collectors := map[string]func() []Check{
		Process:    func() []Check { return append(pick(ns, "pid"), processChecks(proc, t, in)...) },
		Credential: func() []Check { return append(pick(ns, "user"), credentialChecks(proc, t, in)...) },
		Filesystem: func() []Check { return append(pick(ns, "mnt"), filesystemChecks(proc, in)...) },
		IPC:        func() []Check { return append(pick(ns, "ipc", "uts"), ipcChecks(proc, in)...) },
		Network:    func() []Check { return append(pick(ns, "net"), networkChecks(proc)...) },
		Resource: func() []Check {
			cs := append(append(pick(ns, "cgroup"), cgroupMembership(proc, in)...), append(in.Resource, rlimitChecks(proc, in)...)...)
			return append(cs, userLimitsCheck(in.Pid, in.UserLimits), ptyMaxCheck(proc, in.PtyMax))
		},
	}
	b := map[string]Boundary{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, f := range collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := judge(f())
			mu.Lock()
			b[name] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return b
}

func judge(cs []Check) Boundary {
	ok := len(cs) > 0
	for _, c := range cs {
		ok = ok && c.OK
	}
	return Boundary{Verified: ok, Facts: cs}
}

func pick(cs []Check, names ...string) []Check {
	var out []Check
	for _, c := range cs {
		for _, n := range names {
			if c.Name == n+"_namespace" {
				out = append(out, c)
			}
		}
	}
	return out
}

// nsChecks compares each namespace of the sandbox with the trusted
// process's own (the host's).
//
// The reference is /proc/thread-self/ns, the namespaces of the thread
// doing the read, never /proc/self/ns: /proc/self names the thread-group
// leader (the main thread), and this process enters sandboxes' network
// namespaces on locked threads (gateway.ListenInNetns, the TCP watch's
// sock_diag socket) — when that thread is the main thread, /proc/self/ns/net
// is, for that moment, the sandbox's own, and a sandbox whose namespace was
// being entered compared equal to "the host". A thread running an unlocked
// goroutine is always in the process's own namespaces: every thread that
// enters another stays locked until it is back, or is discarded.
func nsChecks(proc string) []Check {
	var out []Check
	for _, n := range nsNames {
		mine, err1 := os.Readlink("/proc/thread-self/ns/" + n)
		theirs, err2 := os.Readlink(proc + "/ns/" + n)
		c := Check{Name: n + "_namespace", Want: "differs from host " + mine, Got: theirs, Source: proc + "/ns/" + n}
		if err1 != nil || err2 != nil {
			c.Got = fmt.Sprint("unreadable: ", errors.Join(err1, err2))
		} else {
			c.OK = mine != theirs
		}
		out = append(out, c)
	}
	return out
}

// taskStatuses returns /proc/PID/task/*/status for every thread.
func taskStatuses(proc string) (map[string]map[string]string, error) {
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, t := range tasks {
		st, err := readStatus(filepath.Join(proc, "task", t.Name(), "status"))
		if err != nil {
			return nil, err
		}
		out[t.Name()] = st
	}
	return out, nil
}

func readStatus(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseStatus(b), nil
}

// parseStatus parses /proc/PID/status into field -> value. A later
// duplicate field wins; a line without a colon is ignored.
func parseStatus(b []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// threads is every thread's status, read once per collection: a dozen
// checks look at different fields of the same files.
type threads struct {
	proc string
	sts  map[string]map[string]string
	err  error
}

// allTasks checks one status field on every thread.
func allTasks(t threads, field, want string, ok func(string) bool) Check {
	c := Check{Name: strings.ToLower(field), Want: want, Source: t.proc + "/task/*/status"}
	sts, err := t.sts, t.err
	if err != nil || len(sts) == 0 {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	var bad, vals []string
	for tid, st := range sts {
		v, present := st[field]
		if !present || !ok(v) {
			bad = append(bad, tid+"="+v)
		}
		if !slices.Contains(vals, v) {
			vals = append(vals, v)
		}
	}
	slices.Sort(vals)
	c.Got = strings.Join(vals, " | ")
	if len(bad) > 0 {
		c.Got += " (bad threads: " + strings.Join(bad, ", ") + ")"
	}
	c.OK = len(bad) == 0
	c.Got = fmt.Sprintf("%s [%d threads]", c.Got, len(sts))
	return c
}

func zeroCaps(v string) bool { return strings.Trim(v, "0") == "" }

func processChecks(proc string, t threads, in Inputs) []Check {
	out := []Check{
		allTasks(t, "NoNewPrivs", "1", func(v string) bool { return v == "1" }),
		allTasks(t, "Seccomp", "2 (filter)", func(v string) bool { return v == "2" }),
		allTasks(t, "Seccomp_filters", ">= 1", func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 1 }),
	}
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		out = append(out, allTasks(t, f, "0000000000000000", zeroCaps))
	}
	out = append(out, inheritableFDs(proc))
	if in.MemProbe[0] != "" {
		return append(out, memProbeCheck(proc, in.MemProbe))
	}
	// A non-dumpable process's /proc files belong to its namespace's root,
	// not to its own uid, so a same-uid process cannot open /proc/1/mem.
	c := Check{Name: "init_non_dumpable", Want: "owner of /proc/PID/mem is the namespace root, not the program uid", Source: proc + "/mem"}
	var st, sst unix.Stat_t
	err1 := unix.Stat(proc+"/mem", &st)
	err2 := unix.Stat(proc+"/status", &sst)
	if err1 != nil || err2 != nil {
		c.Got = fmt.Sprint("unreadable: ", errors.Join(err1, err2))
	} else {
		euid := statusUID(proc)
		c.Got = fmt.Sprintf("mem owner %d, process euid %d", st.Uid, euid)
		c.OK = euid >= 0 && int64(st.Uid) != euid
	}
	return append(out, c)
}

// memProbeCheck reads the init's probe children (sbinit's
// memprobe_linux.go): each opened /proc/1/mem with the program's
// credentials and stopped. The control, made while the init was dumpable,
// must hold a descriptor of it (so the open is one the uid alone would
// get); the attempt, made once it was non-dumpable again, must not.
func memProbeCheck(proc string, names [2]string) Check {
	c := Check{Name: "init_non_dumpable", Want: fmt.Sprintf("%s holds /proc/1/mem, %s does not", names[0], names[1]), Source: proc + "/task/*/children, /proc/CHILD/fd"}
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	holds := map[string]bool{}
	for _, task := range tasks {
		b, _ := os.ReadFile(proc + "/task/" + task.Name() + "/children")
		for _, child := range strings.Fields(string(b)) {
			comm, err := os.ReadFile("/proc/" + child + "/comm")
			name := strings.TrimSpace(string(comm))
			if err != nil || (name != names[0] && name != names[1]) {
				continue
			}
			fds, _ := os.ReadDir("/proc/" + child + "/fd")
			for _, fd := range fds {
				if l, err := os.Readlink("/proc/" + child + "/fd/" + fd.Name()); err == nil && strings.HasSuffix(l, "/1/mem") {
					holds[name] = true
				}
			}
			if _, seen := holds[name]; !seen {
				holds[name] = false
			}
		}
	}
	ctl, okCtl := holds[names[0]]
	try, okTry := holds[names[1]]
	c.Got = fmt.Sprintf("control found %v holds %v; attempt found %v holds %v", okCtl, ctl, okTry, try)
	c.OK = okCtl && ctl && okTry && !try
	return c
}

func statusUID(proc string) int64 {
	st, err := readStatus(proc + "/status")
	if err != nil {
		return -1
	}
	f := strings.Fields(st["Uid"])
	if len(f) < 2 {
		return -1
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func credentialChecks(proc string, t threads, in Inputs) []Check {
	// Exactly the identity asked for, inside the lease: the program's
	// uid/gid mapped to the host (the namespace's root only when that is
	// what was asked: an image's uid 0, which holds no capability — the
	// process boundary checks every set empty).
	exact := func(base uint32, id int) (string, func(string) bool) {
		ok := id >= 0 && uint32(id) < in.LeaseSize
		w := strconv.FormatUint(uint64(base)+uint64(id), 10)
		return fmt.Sprintf("all four %s (id %d inside, lease [%d, %d))", w, id, base, base+in.LeaseSize), func(v string) bool {
			return ok && strings.Join(strings.Fields(v), " ") == strings.Join([]string{w, w, w, w}, " ")
		}
	}
	wantUID, okUID := exact(in.LeaseUID, in.UID)
	wantGID, okGID := exact(in.LeaseGID, in.GID)
	var groups []string
	groupsOK := true
	for _, g := range slices.Sorted(slices.Values(in.Groups)) {
		groupsOK = groupsOK && g >= 0 && uint32(g) < in.LeaseSize
		groups = append(groups, strconv.FormatUint(uint64(in.LeaseGID)+uint64(g), 10))
	}
	wantGroups := strings.Join(groups, " ")
	out := []Check{
		allTasks(t, "Uid", wantUID, okUID),
		allTasks(t, "Gid", wantGID, okGID),
		allTasks(t, "Groups", "exactly ["+wantGroups+"]", func(v string) bool {
			f := strings.Fields(v)
			slices.SortFunc(f, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
			return groupsOK && strings.Join(f, " ") == wantGroups
		}),
	}
	for _, m := range []struct {
		file string
		base uint32
	}{{"uid_map", in.LeaseUID}, {"gid_map", in.LeaseGID}} {
		c := Check{Name: m.file, Want: fmt.Sprintf("0 %d %d", m.base, in.LeaseSize), Source: proc + "/" + m.file}
		b, err := os.ReadFile(proc + "/" + m.file)
		if err != nil {
			c.Got = fmt.Sprint("unreadable: ", err)
		} else {
			c.Got = strings.Join(strings.Fields(string(b)), " ")
			c.OK = c.Got == c.Want
		}
		out = append(out, c)
	}
	out = append(out, userNSOwner(proc, in.LeaseUID))
	// The init's environment is exactly what the trusted side passed:
	// nothing of the host's (the program's own environment is built from
	// declared values only).
	env := strings.Join(in.InitEnv, "\x00")
	if env != "" {
		env += "\x00"
	}
	c := Check{Name: "init_environment", Want: fmt.Sprintf("%q", env), Source: proc + "/environ"}
	if b, err := os.ReadFile(proc + "/environ"); err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
	} else {
		c.Got = fmt.Sprintf("%q", b)
		c.OK = string(b) == env
	}
	return append(out, c)
}

// mountEntry is one line of mountinfo.
type mountEntry struct {
	id, parent                              int
	dev, root                               string // major:minor and the path within its filesystem
	target, fstype, source, opts, superOpts string
}

func readMountinfo(path string) ([]mountEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b)
}

// parseMountinfo parses /proc/PID/mountinfo. The sandbox can influence the
// mount point strings (names it creates), so malformed input is an error,
// never a guess.
func parseMountinfo(b []byte) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 6 || sep < 6 || len(f) < sep+3 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("malformed mountinfo line %q: mount ids", sc.Text())
		}
		out = append(out, mountEntry{id: id, parent: parent, dev: f[2], root: unescape(f[3]), target: unescape(f[4]), opts: f[5], fstype: f[sep+1], source: f[sep+2], superOpts: strings.Join(f[sep+3:], " ")})
	}
	return out, sc.Err()
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func hasOpt(opts, o string) bool { return slices.Contains(strings.Split(opts, ","), o) }

func filesystemChecks(proc string, in Inputs) []Check {
	var out []Check
	ms, err := readMountinfo(proc + "/mountinfo")
	// nosuid and nodev whatever the root: a given root (an image's) holds
	// files the program did not make, and a device node or a setuid binary
	// in it is inert only on a nodev, nosuid mount.
	c := Check{Name: "root_read_only", Want: "/ mounted ro,nosuid,nodev", Source: proc + "/mountinfo"}
	if in.RootIdmapped {
		c.Want = "/ mounted ro,nosuid,nodev,idmapped (an image's root)"
	}
	if in.RootWritable {
		c = Check{Name: "root_writable_idmapped", Want: "/ mounted rw,nosuid,nodev,idmapped (an image's writable root)", Source: proc + "/mountinfo"}
	}
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return append(out, c)
	}
	for _, m := range ms {
		if m.target == "/" {
			c.Got = m.opts
			inert := hasOpt(m.opts, "nosuid") && hasOpt(m.opts, "nodev")
			c.OK = inert && hasOpt(m.opts, "ro") && (!in.RootIdmapped || hasOpt(m.opts, "idmapped"))
			if in.RootWritable {
				c.OK = inert && hasOpt(m.opts, "rw") && hasOpt(m.opts, "idmapped")
			}
		}
	}
	out = append(out, c)
	// Every mount must be one the provider declared; writable ones only
	// where declared writable.
	var undeclared, rw []string
	for _, m := range ms {
		if !slices.Contains(in.MountTargets, m.target) {
			undeclared = append(undeclared, m.target+" ("+m.fstype+" "+m.source+")")
		}
		if !hasOpt(m.opts, "ro") && !slices.Contains(in.WritableTargets, m.target) {
			rw = append(rw, m.target)
		}
	}
	out = append(out,
		Check{Name: "no_undeclared_mounts", Want: "only declared mount points", Got: fmt.Sprintf("%d mounts; undeclared: %v", len(ms), undeclared), OK: len(undeclared) == 0, Source: proc + "/mountinfo"},
		Check{Name: "writable_mounts_declared", Want: "writable only: " + strings.Join(in.WritableTargets, " "), Got: fmt.Sprintf("unexpectedly writable: %v", rw), OK: len(rw) == 0, Source: proc + "/mountinfo"},
	)
	out = append(out, nodevCheck(proc+"/mountinfo", ms))
	out = append(out, maskChecks(proc+"/mountinfo", ms, in.Masks, sandboxStat(proc))...)
	return append(out, landlockProbe(proc, in))
}

// deviceNodes are the host's device nodes a sandbox may have bound in
// (into /dev, or /dev/null over a masked /proc file), by their path in
// the host's /dev.
var deviceNodes = []string{"/null", "/zero", "/full", "/random", "/urandom", "/tty"}

// nodevCheck: every mount is nosuid, and nodev but the sandbox's own
// devpts and the single allowed device nodes. A bind of a host tree (a
// volume, an image's root) may hold device nodes and setuid files; only
// these flags keep them inert.
func nodevCheck(src string, ms []mountEntry) Check {
	var bad []string
	for _, m := range ms {
		dev := m.fstype == "devpts" || ((m.fstype == "devtmpfs" || m.fstype == "tmpfs") && slices.Contains(deviceNodes, m.root))
		if !hasOpt(m.opts, "nosuid") || (!dev && !hasOpt(m.opts, "nodev")) {
			bad = append(bad, m.target+" ("+m.opts+")")
		}
	}
	return Check{Name: "mounts_nodev", Want: "every mount nosuid, and nodev but devpts and the bound device nodes " + strings.Join(deviceNodes, " "),
		Got: fmt.Sprintf("%d mounts; without them: %v", len(ms), bad), OK: len(bad) == 0, Source: src}
}

// ptyMaxCheck reads the max= of the sandbox's devpts instance: the
// kernel's pty count is host-wide, so each sandbox's instance is bounded.
func ptyMaxCheck(proc string, max int) Check {
	c := Check{Name: "devpts_max", Want: "max=" + strconv.Itoa(max), Source: proc + "/mountinfo"}
	ms, err := readMountinfo(proc + "/mountinfo")
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	c.Got = "no devpts at /dev/pts"
	for _, m := range ms {
		if m.target == "/dev/pts" {
			c.Got = m.fstype + " " + m.superOpts
			c.OK = max > 0 && m.fstype == "devpts" && hasOpt(m.superOpts, c.Want)
		}
	}
	return c
}

// landlockProbe judges Landlock by its effect, which /proc cannot show
// here: before Landlock the init wrote the control file into a tmpfs its
// uid owns; after Landlock it tried to write the probe file. The trusted
// side looks into the sandbox's root and must find the first and not the
// second. The agent has not run yet, so nothing else wrote there.
func landlockProbe(proc string, in Inputs) Check {
	c := Check{Name: "landlock_denies_write", Want: "control file present, probe file absent", Source: proc + "/root" + in.ProbeDir}
	// /proc/PID/root is a magic link; below it, resolve inside that root
	// and follow no symlink at all.
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	defer unix.Close(root)
	dir, err := unix.Openat2(root, strings.TrimPrefix(in.ProbeDir, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	ctl := unix.Fstatat(dir, in.ProbeControl, &st, unix.AT_SYMLINK_NOFOLLOW)
	denied := unix.Fstatat(dir, in.Probe, &st, unix.AT_SYMLINK_NOFOLLOW)
	c.Got = fmt.Sprintf("control: %v, probe: %v", errText(ctl, "present"), errText(denied, "present"))
	c.OK = ctl == nil && errors.Is(denied, unix.ENOENT)
	return c
}

func errText(err error, ok string) string {
	if err == nil {
		return ok
	}
	return err.Error()
}

func ipcChecks(proc string, in Inputs) []Check {
	// /proc/sys and /proc/sysvipc show the *reader's* namespaces, so the
	// trusted side enters the sandbox's UTS and IPC namespaces on one
	// locked thread to read them (setns into these needs no unsharing of
	// the process, and returns afterwards).
	c := Check{Name: "hostname", Want: in.Hostname, Source: proc + "/ns/uts: uname"}
	err := setns.Do(proc+"/ns/uts", unix.CLONE_NEWUTS, func() error {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return err
		}
		c.Got = unix.ByteSliceToString(u.Nodename[:])
		return nil
	})
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
	}
	c.OK = err == nil && c.Got == in.Hostname
	out := []Check{c}
	var objs [3]int
	err = setns.Do(proc+"/ns/ipc", unix.CLONE_NEWIPC, func() error {
		for i, f := range []string{"msg", "sem", "shm"} {
			b, err := os.ReadFile("/proc/sysvipc/" + f)
			if err != nil {
				return err
			}
			objs[i] = len(strings.Split(strings.TrimSpace(string(b)), "\n")) - 1
		}
		return nil
	})
	for i, f := range []string{"msg", "sem", "shm"} {
		cc := Check{Name: "sysvipc_" + f + "_empty", Want: "no objects", Source: proc + "/ns/ipc: /proc/sysvipc/" + f}
		if err != nil {
			cc.Got = fmt.Sprint("unreadable: ", err)
		} else {
			cc.Got = fmt.Sprintf("%d objects", objs[i])
			cc.OK = objs[i] == 0
		}
		out = append(out, cc)
	}
	return out
}

func networkChecks(proc string) []Check {
	var out []Check
	c := Check{Name: "interfaces", Want: "lo only", Source: proc + "/net/dev"}
	if b, err := os.ReadFile(proc + "/net/dev"); err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
	} else {
		var ifs []string
		for _, l := range strings.Split(string(b), "\n")[2:] {
			if name, _, ok := strings.Cut(l, ":"); ok {
				ifs = append(ifs, strings.TrimSpace(name))
			}
		}
		c.Got = strings.Join(ifs, ",")
		c.OK = c.Got == "lo"
	}
	out = append(out, c)
	r4 := Check{Name: "ipv4_routes", Want: "none", Source: proc + "/net/route"}
	if b, err := os.ReadFile(proc + "/net/route"); err != nil {
		r4.Got = fmt.Sprint("unreadable: ", err)
	} else {
		n := len(strings.Split(strings.TrimSpace(string(b)), "\n")) - 1
		r4.Got = fmt.Sprintf("%d routes", n)
		r4.OK = n == 0
	}
	r6 := Check{Name: "ipv6_routes", Want: "none but loopback", Source: proc + "/net/ipv6_route"}
	if b, err := os.ReadFile(proc + "/net/ipv6_route"); err != nil {
		r6.Got = fmt.Sprint("unreadable: ", err)
	} else {
		var other []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(l)
			if len(f) == 10 && f[9] != "lo" {
				other = append(other, f[9])
			}
		}
		r6.Got = fmt.Sprintf("non-loopback routes: %v", other)
		r6.OK = len(other) == 0
	}
	return append(out, r4, r6)
}

func cgroupMembership(proc string, in Inputs) []Check {
	b, err := os.ReadFile(proc + "/cgroup")
	got := map[string]string{}
	if err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, ctl := range strings.Split(parts[1], ",") {
				got[ctl] = parts[2]
			}
		}
	}
	var out []Check
	ctls := make([]string, 0, len(in.CgroupPaths))
	for k := range in.CgroupPaths {
		ctls = append(ctls, k)
	}
	slices.Sort(ctls)
	if len(ctls) == 0 {
		return []Check{{Name: "cgroup_membership", Want: "a cgroup per controller", Got: "no cgroups", Source: proc + "/cgroup"}}
	}
	for _, ctl := range ctls {
		name := ctl
		if name == "" {
			name = "v2"
		}
		c := Check{Name: "cgroup_" + name, Want: in.CgroupPaths[ctl], Got: got[ctl], Source: proc + "/cgroup"}
		if err != nil {
			c.Got = fmt.Sprint("unreadable: ", err)
		}
		c.OK = err == nil && got[ctl] == in.CgroupPaths[ctl]
		out = append(out, c)
	}
	return out
}

func rlimitChecks(proc string, in Inputs) []Check {
	b, err := os.ReadFile(proc + "/limits")
	lim := map[string][2]string{}
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			// "Max open files            1024                 1048576              files"
			if len(l) < 26 {
				continue
			}
			f := strings.Fields(l[25:])
			if len(f) >= 2 {
				lim[strings.TrimSpace(l[:25])] = [2]string{f[0], f[1]}
			}
		}
	}
	type want struct {
		name, key  string
		soft, hard uint64
	}
	wants := []want{{"rlimit_core", "Max core file size", 0, 0}, {"rlimit_nofile", "Max open files", in.NoFile, in.NoFile}, {"rlimit_fsize", "Max file size", in.FSize, in.FSize}}
	for _, key := range slices.Sorted(maps.Keys(in.Rlimits)) {
		v := in.Rlimits[key]
		i := slices.IndexFunc(wants, func(w want) bool { return w.key == key })
		if i < 0 {
			name := "rlimit_" + strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(key), "max "), " ", "_")
			wants = append(wants, want{name: name, key: key})
			i = len(wants) - 1
		}
		wants[i].soft, wants[i].hard = v[0], v[1]
	}
	var out []Check
	for _, r := range wants {
		ws, wh := rlimitText(r.soft), rlimitText(r.hard)
		v := lim[r.key]
		c := Check{Name: r.name, Want: ws + " " + wh, Got: v[0] + " " + v[1], Source: proc + "/limits"}
		c.OK = err == nil && v[0] == ws && v[1] == wh
		out = append(out, c)
	}
	return out
}

// rlimitText is a limit as /proc/PID/limits writes it.
func rlimitText(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// inheritableFDs checks that the init holds no descriptor the program
// could inherit beyond stdio: every fd above 2 must be close-on-exec. A
// leaked descriptor would carry a host file, directory or socket (and with
// it the host's network) past every namespace.
func inheritableFDs(proc string) Check {
	c := Check{Name: "no_inheritable_fds", Want: "every fd above 2 close-on-exec", Source: proc + "/fdinfo"}
	ents, err := os.ReadDir(proc + "/fdinfo")
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	var bad []string
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		n++
		b, err := os.ReadFile(proc + "/fdinfo/" + e.Name())
		if err != nil {
			if os.IsNotExist(err) {
				continue // closed meanwhile
			}
			bad = append(bad, e.Name()+": unreadable")
			continue
		}
		flags, ok := fdFlags(b)
		if !ok || flags&unix.O_CLOEXEC == 0 {
			target, _ := os.Readlink(proc + "/fd/" + e.Name())
			bad = append(bad, e.Name()+" -> "+target)
		}
	}
	c.Got = fmt.Sprintf("%d fds above 2; inheritable: %v", n, bad)
	c.OK = len(bad) == 0
	return c
}

// fdFlags reads the octal "flags:" line of an fdinfo file.
func fdFlags(b []byte) (int64, bool) {
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// nsGetOwnerUID is NS_GET_OWNER_UID (linux/nsfs.h): _IO(0xb7, 0x4).
const nsGetOwnerUID = 0xb704

// userNSOwner checks that the sandbox's user namespace is owned by the
// lease's base uid, not host root: the kernel charges the namespace's
// per-user counters (inotify instances and watches, namespace counts,
// message-queue bytes, pending signals, locked memory) to its owner in the
// host's namespace, so an owner of root would let the sandbox use up host
// root's share.
func userNSOwner(proc string, lease uint32) Check {
	c := Check{Name: "user_namespace_owner", Want: strconv.FormatUint(uint64(lease), 10), Source: proc + "/ns/user: ioctl NS_GET_OWNER_UID"}
	uid, err := nsOwnerUID(proc + "/ns/user")
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	c.Got = strconv.FormatUint(uint64(uid), 10)
	c.OK = uid == lease
	return c
}

// nsOwnerUID returns the host uid that owns the user namespace at path.
func nsOwnerUID(path string) (uint32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		return 0, fmt.Errorf("NS_GET_OWNER_UID: %w", e)
	}
	return uid, nil
}
