package probes

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"golang.org/x/sys/unix"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.dev.mknod",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: devices",
		Title:  "mknod of character and block devices in the workspace is refused: the host finds no device node there",
		Run:    devMknod,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.dev.nodes",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: devices",
		Title:  "the sandbox's /dev, read on the host through /proc/PID/root, holds only the safe device set (null, zero, full, random, urandom, tty, its own ptys)",
		Run:    devNodes,
	})
}

// deviceNodes lists the character and block device nodes under dir
// ("path c MAJ:MIN"), without following symlinks or leaving dir's mount.
func deviceNodes(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		kind := "b"
		if fi.Mode()&fs.ModeCharDevice != 0 {
			kind = "c"
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fmt.Sprintf("%s %s %d:%d", rel, kind, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		return nil
	})
	return out, err
}

// devMknod: the program tries mknod of /dev/null (c 1:3), /dev/mem (c 1:1)
// and /dev/loop0 (b 7:0) look-alikes in its workspace; the host lists the
// device nodes in the workspace: none. Controls: the program's mknod of a
// regular file there lands (so the directory was the program's to write,
// even under a provider where the workspace path does not exist), and the
// same op on the host (root) creates the devices in a runner directory,
// seen by the same listing.
func devMknod(ctx context.Context, e *conformance.Env) conformance.Outcome {
	ws, err := newWorkspace(e, "ws")
	if err != nil {
		return broke(err)
	}
	r, err := e.Run(ctx, conformance.RunOpts{Flags: []string{"--workspace", ws.Dir}, Op: []string{"mknods", ws.In}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	got, err := deviceNodes(ws.Dir)
	if err != nil {
		return broke(err)
	}
	// The same call for a regular file lands: the directory is the
	// program's, and only the device nodes were refused.
	plainOK, plainGot := absent(filepath.Join(ws.Sub, "plain"))
	c, err := newDir(e, "host-control", 0o700)
	if err != nil {
		return broke(err)
	}
	if _, err := e.HostOp(ctx, "mknods", c); err != nil {
		return broke(err)
	}
	cgot, err := deviceNodes(c)
	if err != nil {
		return broke(err)
	}
	// The control's nodes go at once: nothing should open them.
	for _, n := range []string{"null", "mem", "loop0", "plain"} {
		_ = os.Remove(filepath.Join(c, n))
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("device nodes in the workspace, on the host", "none", strings.Join(got, ", "), len(got) == 0, "walk of "+ws.Dir+" on the host"),
		control("the program's mknod of a regular file in the same directory", "present", plainGot, !plainOK, "lstat of "+filepath.Join(ws.Sub, "plain")+" on the host"),
		control("device nodes the same op made on the host", "3", strings.Join(cgot, ", "), len(cgot) == 3, "walk of the runner's directory on the host"),
	}}
}

// safeDevices are the device numbers a sandbox's /dev may hold: null,
// zero, full, random, urandom, tty, and its own devpts ptmx.
var safeDevices = []string{"c 1:3", "c 1:5", "c 1:7", "c 1:8", "c 1:9", "c 5:0", "c 5:2"}

// unsafeNodes returns the nodes of list outside the safe set (pty
// subsidiaries, majors 136-143, are the sandbox's own devpts).
func unsafeNodes(list []string) []string {
	var out []string
	for _, n := range list {
		f := strings.Fields(n)
		kd := f[len(f)-2] + " " + f[len(f)-1]
		if slices.Contains(safeDevices, kd) {
			continue
		}
		var maj, min int
		if _, err := fmt.Sscanf(f[len(f)-1], "%d:%d", &maj, &min); err == nil && f[len(f)-2] == "c" && maj >= 136 && maj <= 143 && strings.HasPrefix(n, "pts/") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// devNodes: the program, held, lists /dev; the host walks the program's
// /dev through /proc/PID/root and lists every device node: all in the safe
// set. Control: the same walk of the host's own /dev finds nodes outside
// it (so the walk would see an unsafe node).
func devNodes(ctx context.Context, e *conformance.Env) conformance.Outcome {
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "ls", "/dev"}})
	if err != nil {
		return broke(err)
	}
	_, prog, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	nodes, err := deviceNodes(fmt.Sprintf("/proc/%d/root/dev", prog))
	if err != nil {
		return broke(err)
	}
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	host, err := deviceNodes("/dev")
	if err != nil {
		return broke(err)
	}
	bad, hostBad := unsafeNodes(nodes), unsafeNodes(host)
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("device nodes outside the safe set in the program's /dev", "none", strings.Join(bad, ", "), len(bad) == 0 && len(nodes) > 0, fmt.Sprintf("walk of /proc/%d/root/dev on the host (%d nodes)", prog, len(nodes))),
		control("device nodes outside the safe set in the host's /dev, by the same walk", "some", fmt.Sprintf("%d nodes", len(hostBad)), len(hostBad) > 0, "walk of /dev on the host"),
	}}
}
