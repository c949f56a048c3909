package hostmgr

import (
	"os"
	"testing"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// execStdio takes exactly the descriptors a request must carry: three
// without a terminal; with one, only stdout and stderr that are not on it
// (never stdin), in that order.
func TestExecStdio(t *testing.T) {
	var fs [3]*os.File
	for i := range fs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs[i] = f
	}
	for _, tc := range []struct {
		name  string
		tty   *ExecTty
		files []*os.File
		want  [3]*os.File // nil entries: on the terminal
		ok    bool
	}{
		{"no terminal, 3", nil, fs[:], fs, true},
		{"no terminal, 2", nil, fs[:2], [3]*os.File{}, false},
		{"all on the terminal, none", &ExecTty{Stdout: true, Stderr: true}, nil, [3]*os.File{}, true},
		{"all on the terminal, stdin sent", &ExecTty{Stdout: true, Stderr: true}, fs[:1], [3]*os.File{}, false},
		{"stdout a file", &ExecTty{Stderr: true}, fs[1:2], [3]*os.File{nil, fs[1], nil}, true},
		{"stderr a file", &ExecTty{Stdout: true}, fs[2:3], [3]*os.File{nil, nil, fs[2]}, true},
		{"both files", &ExecTty{}, fs[1:], [3]*os.File{nil, fs[1], fs[2]}, true},
		{"both files, three sent", &ExecTty{}, fs[:], [3]*os.File{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, term, err := execStdio(ExecArgs{Tty: tc.tty}, tc.files)
			if !tc.ok {
				if proto.KindOf(err) != proto.KindBadRequest {
					t.Fatalf("err = %v, want bad_request", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
			if (term != nil) != (tc.tty != nil) || (term != nil && (!term.Stdin || term.Stdout != tc.tty.Stdout || term.Stderr != tc.tty.Stderr)) {
				t.Errorf("terminal %+v for %+v", term, tc.tty)
			}
		})
	}
}
