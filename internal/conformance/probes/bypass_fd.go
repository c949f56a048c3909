package probes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.fd.inherited",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: descriptors inherited from the caller",
		Title:  "a descriptor of a host secret, open and inheritable in cordon's caller, never reaches the program",
		// cordon closes what it inherited before any provider runs.
		Launcher: true,
		Run:      inheritedFD,
	})
}

// inheritedFD: the runner opens a 0600 file holding a random token and
// starts cordon with it as descriptor 3 (not close-on-exec); the program
// reads descriptors 3 to 9. The token must appear nowhere in what the run
// printed. Control: the same op on the host, given the same descriptor,
// prints the token.
func inheritedFD(ctx context.Context, e *conformance.Env) conformance.Outcome {
	token := "inherited-" + randToken(16)
	p := filepath.Join(e.Dir, "inherited-secret")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		return broke(err)
	}
	f, err := os.Open(p)
	if err != nil {
		return broke(err)
	}
	defer f.Close()
	readfds := func(argv ...string) (string, error) {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.Dir = e.Dir
		cmd.ExtraFiles = []*os.File{f}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if _, exit := err.(*exec.ExitError); exit {
			err = nil
		}
		return out.String(), err
	}
	args := []string{e.Bin, "--state-dir", e.StateDir()}
	if e.Provider != "" {
		args = append(args, "--provider", e.Provider)
	}
	args = append(args, "run")
	if e.Level != "" {
		args = append(args, "--level", e.Level)
	}
	args = append(args, "--ro", e.Bin+":"+conformance.ProbeBin, "--", conformance.ProbeBin, "__probe", "reads")
	for _, n := range []string{"3", "4", "5", "6", "7", "8", "9"} {
		args = append(args, "/proc/self/fd/"+n)
	}
	out, err := readfds(args...)
	if err != nil {
		return broke(err)
	}
	if opLine(out) == "" {
		return broke(errors.New("the run did not run the probe: " + headLine(out)))
	}
	host, err := readfds(e.Bin, "__probe", "readfd", "3")
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: opLine(out), Facts: []record.Fact{
		fact("the inherited secret's token in what the run printed", "absent", seenOrNot(out, token), !strings.Contains(out, token), "cordon run's stdout and stderr"),
		control("the token, read by the same op on the host from the same descriptor", "present", seenOrNot(host, token), strings.Contains(host, token), "the host op's output"),
	}}
}
