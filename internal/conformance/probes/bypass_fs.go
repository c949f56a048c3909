package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.fs.write-outside",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: host files (writes)",
		Title:  "writes to a host directory not given to the sandbox, and to a read-only bind of a world-writable host directory, never land on the host",
		Run:    writeOutside,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.fs.read-host-secret",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: host files (reads)",
		Title:  "a root-only file in a read-only bind and a host file not given to the sandbox are unreadable: their tokens never reach its output",
		Run:    readHostSecret,
	})
}

// writeOutside: the program writes NAME into its workspace (allowed),
// into /ro (a read-only bind of a 0777 directory of the runner) and at the host
// path of a 0777 directory it was not given (each in a subdirectory of a
// random name). The host looks for the files
// in its own directories. Controls: the workspace write lands on the host
// (the probe's writes do work where allowed), and the same write of the
// host directory from the host lands.
func writeOutside(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	outside, err := newDir(e, "outside", 0o777)
	if err != nil {
		return broke(err)
	}
	ro, err := newDir(e, "ro", 0o755)
	if err != nil {
		return broke(err)
	}
	roSub := "cordon-" + randToken(6)
	if _, err := newDir(e, "ro/"+roSub, 0o777); err != nil {
		return broke(err)
	}
	name := "cordon-escape-" + randToken(6)
	r, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir, "--ro", ro + ":/ro"},
		Op: []string{"writes", ws.In + "/" + name, "/ro/" + roSub + "/" + name, filepath.Join(outside, name)}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	okOut, gotOut := absent(filepath.Join(outside, name))
	okRO, gotRO := absent(filepath.Join(ro, roSub, name))
	b, werr := os.ReadFile(filepath.Join(ws.Sub, name))
	gotWS := string(b)
	if werr != nil {
		gotWS = werr.Error()
	}
	ctl := name + "-host"
	if _, err := e.HostOp(ctx, "write", filepath.Join(outside, ctl)); err != nil {
		return broke(err)
	}
	okCtl, gotCtl := absent(filepath.Join(outside, ctl))
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the sandbox's write at the host path "+filepath.Join(outside, name), "absent", gotOut, okOut, "lstat on the host"),
		fact("the sandbox's write into the read-only bind /ro, on the host", "absent", gotRO, okRO, "lstat of "+filepath.Join(ro, roSub, name)+" on the host"),
		control("the sandbox's write into /workspace, on the host", "probe", gotWS, werr == nil && gotWS == "probe", "read of "+filepath.Join(ws.Sub, name)+" on the host"),
		control("the same write of the host directory from the host", "present", gotCtl, !okCtl, "lstat on the host"),
	}}
}

// readHostSecret: a root-owned 0600 file with a random token sits in a
// directory bound read-only at /data next to a world-readable file with
// another token; a third, world-readable, sits in the runner's directory,
// not given to the sandbox. The program reads all three; the host looks
// for the secret tokens in everything the run printed and in the
// workspace. Controls: the public token does come out (the route would
// carry a secret), and the host reads the secrets.
func readHostSecret(ctx context.Context, e *conformance.Env) conformance.Outcome {
	data, err := newDir(e, "data", 0o755)
	if err != nil {
		return broke(err)
	}
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	secret, public, hostOnly := "secret-"+randToken(16), "public-"+randToken(16), "host-only-"+randToken(16)
	put := func(p, s string, mode os.FileMode) error {
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			return err
		}
		if err := os.Chown(p, 0, 0); err != nil {
			return err
		}
		return os.Chmod(p, mode)
	}
	hostPath := filepath.Join(e.Dir, "host-only")
	for _, f := range []struct {
		p, s string
		m    os.FileMode
	}{{filepath.Join(data, "secret"), secret, 0o600}, {filepath.Join(data, "public"), public, 0o644}, {hostPath, hostOnly, 0o644}} {
		if err := put(f.p, f.s, f.m); err != nil {
			return broke(err)
		}
	}
	in := "/cordon-data-" + randToken(6) // no such path on a host
	r, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--ro", data + ":" + in, "--workspace", ws.Dir},
		Op: []string{"reads", in + "/secret", hostPath, in + "/public"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	seen := r.Stdout + r.Stderr + string(r.Outcome) + wsText(ws.Dir)
	hp, err := e.HostOp(ctx, "reads", filepath.Join(data, "secret"), hostPath)
	if err != nil {
		return broke(err)
	}
	hostSeen := hp.Data
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the root-only file's token in the run's output and workspace", "absent", seenOrNot(seen, secret), !strings.Contains(seen, secret), "cordon run's stdout, stderr and outcome; the workspace's files on the host"),
		fact("the token of the host file not given to the sandbox, in its output and workspace", "absent", seenOrNot(seen, hostOnly), !strings.Contains(seen, hostOnly), "cordon run's stdout, stderr and outcome; the workspace's files on the host"),
		control("the world-readable file's token through the same bind", "present", seenOrNot(seen, public), strings.Contains(seen, public), "cordon run's stdout"),
		control("both secrets read by the same op on the host", "present", seenOrNot(hostSeen, secret)+", "+seenOrNot(hostSeen, hostOnly), strings.Contains(hostSeen, secret) && strings.Contains(hostSeen, hostOnly), "the host op's output"),
	}}
}

// wsText is the content of every regular file under dir (capped).
func wsText(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || b.Len() > 1<<20 {
			return nil
		}
		if c, err := os.ReadFile(p); err == nil {
			fmt.Fprintf(&b, "%s\n", c)
		}
		return nil
	})
	return b.String()
}

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.fs.landlock",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: writes outside the writable paths (Landlock)",
		Title:  "a write into a directory the program's own uid owns but no writable path covers is refused: the host finds no file there",
		Run:    landlockWrite,
	})
}

// probeDir is the sandbox init's Landlock probe directory: a tmpfs owned
// by the program's uid, outside every writable path, where the init wrote
// its control file before Landlock.
const probeDir = "/dev/.cordon-probe"

// landlockWrite: the program, held, writes a file into probeDir, which its
// uid owns (so only Landlock can refuse it). The host looks, through the
// program's root, for the file: absent. Controls: the init's control
// file, written there by the same uid before Landlock, is present (so the
// directory takes writes); in a test build, a sandbox without Landlock
// leaves the file.
func landlockWrite(ctx context.Context, e *conformance.Env) conformance.Outcome {
	name := "cordon-escape-" + randToken(6)
	target := probeDir + "/" + name
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "writes", target}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	root := fmt.Sprintf("/proc/%d/root", prog)
	ok, got := absent(root + target)
	cok, cgot := absent(root + probeDir + "/control")
	dirOwner := "?"
	if fi, err := os.Stat(root + probeDir); err == nil {
		dirOwner = fmt.Sprint(fi.Sys().(*syscall.Stat_t).Uid)
	}
	uid, _ := hostUID(prog)
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	facts := []record.Fact{
		fact("the program's write "+target, "absent", got, ok, "lstat through "+root+" on the host"),
		control("the init's control file in the same directory, written there before Landlock", "present", cgot, !cok, "lstat through "+root+" on the host"),
		control("owner of "+probeDir+" (the program's host uid)", uid, dirOwner, dirOwner == uid && uid != "", "stat through "+root+" on the host"),
	}
	if hasSkipLayer(ctx, e) {
		c, err := e.Start(ctx, conformance.RunOpts{Flags: []string{"--test-skip-layer", "landlock", "--level", "DOMAIN_ISOLATED"}, Op: []string{"hold", "writes", target}})
		if err != nil {
			return broke(err)
		}
		_, cprog, err := c.Pids()
		if err != nil {
			return broke(err)
		}
		sok, sgot := absent(fmt.Sprintf("/proc/%d/root%s", cprog, target))
		if _, err := c.Finish(ctx); err != nil {
			return broke(err)
		}
		facts = append(facts, control("the same write in a sandbox without Landlock (test build)", "present", sgot, !sok, "lstat through /proc/PID/root on the host"))
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: facts}
}
