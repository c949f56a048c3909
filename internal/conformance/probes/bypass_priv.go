package probes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"golang.org/x/sys/unix"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.priv.setid",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: privilege gain (setuid/setgid files)",
		Title:  "no way of leaving a setuid or setgid file or directory in the workspace works: the host sees no such bit",
		Run:    setidFiles,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.priv.gain",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: privilege gain",
		Title:  "after setuid(0), setgid(0) and capset, the program holds no capability and no host root identity",
		Run:    privGain,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.ns.nested-userns",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: nested namespaces",
		Title:  "a child in a new user namespace never runs: its marker never appears in the workspace",
		Run:    nestedUserns,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.mount",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: mounts",
		Title:  "a tmpfs mount over a workspace directory is refused: the program's mount table has no such mount and a write under it lands in the host directory",
		Run:    mountBypass,
	})
}

// setidModes lists the files under dir whose mode has a setuid or setgid
// bit, and how many files there are.
func setidModes(dir string) (bits []string, n int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	for _, en := range ents {
		fi, err := os.Lstat(filepath.Join(dir, en.Name()))
		if err != nil {
			return nil, 0, err
		}
		n++
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			bits = append(bits, en.Name()+"="+fi.Mode().String())
		}
	}
	sort.Strings(bits)
	return bits, n, nil
}

// setidFiles: the program tries chmod/fchmod/fchmodat/open/creat/mknod/
// mkdir with setuid and setgid bits in /workspace; the host stats the
// workspace. Control: without seccomp (a test build's --test-skip-layer)
// the sandbox's chmod 04755 leaves a setuid file on the host; in a release
// build, the same op on the host leaves setid files in a runner directory
// (the host stat would see them).
func setidFiles(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	r, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir}, Op: []string{"setid", ws.In}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	bits, n, err := setidModes(ws.Sub)
	if err != nil {
		return broke(err)
	}
	facts := []record.Fact{
		fact("setuid/setgid bits on the workspace's files, on the host", "none", fmt.Sprintf("%d of %d files: %s", len(bits), n, strings.Join(bits, " ")), len(bits) == 0 && n > 0, "lstat of each file in "+ws.Sub+" on the host"),
	}
	var cbits []string
	var src string
	if hasSkipLayer(ctx, e) {
		ws2, err := newWorkspace(e, "ws-control")
		if err != nil {
			return broke(err)
		}
		c, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--test-skip-layer", "seccomp", "--level", "DOMAIN_ISOLATED", "--workspace", ws2.Dir}, Op: []string{"setid", ws2.In}})
		if err != nil {
			return broke(err)
		}
		if err := ranOp(c); err != nil {
			return broke(err)
		}
		if cbits, _, err = setidModes(ws2.Sub); err != nil {
			return broke(err)
		}
		src = "a sandbox without seccomp (test build): lstat of its workspace on the host"
	} else {
		d, err := newDir(e, "host-control", 0o755)
		if err != nil {
			return broke(err)
		}
		if _, err := e.HostOp(ctx, "setid", d); err != nil {
			return broke(err)
		}
		if cbits, _, err = setidModes(d); err != nil {
			return broke(err)
		}
		src = "the same op on the host: lstat of its directory on the host"
	}
	facts = append(facts, control("setuid/setgid files left where nothing denies it", "some", strings.Join(cbits, " "), len(cbits) > 0, src))
	return conformance.Outcome{Hint: r.Hint(), Facts: facts}
}

// capsOf returns the capability sets and identity of pid from
// /proc/PID/status.
func capsOf(pid int) (map[string]string, error) {
	st, err := procStatus(pid)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range []string{"Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"} {
		out[k] = st[k]
	}
	return out, nil
}

const noCaps = "0000000000000000"

// privGain: the program, held after trying setuid(0), setgid(0) and a
// capset of every capability; the host reads its /proc/PID/status: every
// capability set empty, no host uid or gid 0, no_new_privs set. Control:
// the same reading of a process the runner holds on the host as root shows
// its capabilities and uid 0 (the reading would see a gain).
func privGain(ctx context.Context, e *conformance.Env) conformance.Outcome {
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "setuid0"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	caps, err := capsOf(prog)
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	hh, err := startHostHeld(ctx, e, nil, "ids")
	if err != nil {
		return broke(err)
	}
	hc, err := capsOf(hh.Pid())
	if err != nil {
		return broke(err)
	}
	zeroCaps := caps["CapEff"] == noCaps && caps["CapPrm"] == noCaps && caps["CapInh"] == noCaps && caps["CapAmb"] == noCaps
	var ids []string
	for _, k := range []string{"Uid", "Gid"} {
		ids = append(ids, strings.Fields(caps[k])...)
	}
	noRoot := len(ids) == 8
	for _, id := range ids {
		noRoot = noRoot && id != "0"
	}
	src := fmt.Sprintf("/proc/%d/status of the held program, read on the host", prog)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the program's capability sets (effective, permitted, inheritable, ambient)", "all "+noCaps, fmt.Sprintf("eff %s prm %s inh %s amb %s", caps["CapEff"], caps["CapPrm"], caps["CapInh"], caps["CapAmb"]), zeroCaps, src),
		fact("the program's host uids and gids (real, effective, saved, fs)", "none 0", "uid "+caps["Uid"]+" gid "+caps["Gid"], noRoot, src),
		fact("the program's no_new_privs", "1", caps["NoNewPrivs"], caps["NoNewPrivs"] == "1", src),
		control("the same reading of a process the runner holds on the host as root", "capabilities and uid 0", "eff "+hc["CapEff"]+" uid "+hc["Uid"], hc["CapEff"] != noCaps && strings.HasPrefix(hc["Uid"], "0"), fmt.Sprintf("/proc/%d/status on the host", hh.Pid())),
	}}
}

// nestedUserns: the program starts a child in a new user namespace; the
// child would write the marker in the workspace. The host looks for it.
// Controls: the program's own write of a marker there lands, and the same
// op on the host leaves its child's marker.
func nestedUserns(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	r, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir}, Op: []string{"userns", ws.In + "/marker"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	ok, got := absent(filepath.Join(ws.Sub, "marker"))
	// The same write without the nested namespace lands: the marker's
	// absence is the namespace's refusal, not a path the program lacks.
	w, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir}, Op: []string{"mark", ws.In + "/direct"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(w); err != nil {
		return broke(err)
	}
	dok, dgot := absent(filepath.Join(ws.Sub, "direct"))
	d, err := newDir(e, "host-control", 0o777)
	if err != nil {
		return broke(err)
	}
	if _, err := e.HostOp(ctx, "userns", filepath.Join(d, "marker")); err != nil {
		return broke(err)
	}
	cok, cgot := absent(filepath.Join(d, "marker"))
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the marker of the child in a nested user namespace, in the workspace", "absent", got, ok, "lstat of "+filepath.Join(ws.Sub, "marker")+" on the host"),
		control("the same marker written by the program itself, in the workspace", "present", dgot, !dok, "lstat of "+filepath.Join(ws.Sub, "direct")+" on the host"),
		control("the marker of the same op's child on the host", "present", cgot, !cok, "lstat on the host"),
	}}
}

// mountsAt lists the mount points of pid's mount table ending in suffix
// (/proc/PID/mountinfo, field 5).
func mountsAt(pid int, suffix string) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && strings.HasSuffix(fs[4], suffix) {
			out = append(out, fs[4])
		}
	}
	return out, sc.Err()
}

// mountBypass: the program, held, mounts a tmpfs on /workspace/m and
// writes m/after. The host reads the program's mount table (no mount at
// m) and finds m/after in its own directory (the write went to the
// directory, not to a tmpfs over it). Control: the same op run by the
// runner on the host mounts a tmpfs on a directory of its own, and the
// host's mount table shows it (unmounted at once).
func mountBypass(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	m := filepath.Join(ws.Sub, "m")
	if err := os.Mkdir(m, 0o755); err != nil {
		return broke(err)
	}
	if err := os.Chown(m, wsOwnerUID, wsOwnerUID); err != nil {
		return broke(err)
	}
	h, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir}, Op: []string{"hold", "kobj", "mount", ws.In + "/m"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	mounted, err := mountsAt(prog, ws.In+"/m")
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	afterOK, afterGot := absent(filepath.Join(m, "after"))
	c, err := newDir(e, "host-control", 0o755)
	if err != nil {
		return broke(err)
	}
	if _, err := e.HostOp(ctx, "kobj", "mount", c); err != nil {
		return broke(err)
	}
	cm, err := mountsAt(os.Getpid(), c)
	if err != nil {
		return broke(err)
	}
	for range cm {
		_ = unix.Unmount(c, unix.MNT_DETACH)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("mounts at "+ws.In+"/m in the program's mount table", "none", strings.Join(mounted, " "), len(mounted) == 0, fmt.Sprintf("/proc/%d/mountinfo of the held program, read on the host", prog)),
		fact("the write under the mount point, in the host directory", "present", afterGot, !afterOK, "lstat of "+filepath.Join(m, "after")+" on the host"),
		control("the same mount by the op on the host, in the host's mount table", "1 mount", fmt.Sprint(len(cm))+" mount", len(cm) == 1, "/proc/self/mountinfo of the runner"),
	}}
}
