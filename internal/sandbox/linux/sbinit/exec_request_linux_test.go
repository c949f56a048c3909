package sbinit

import "testing"

// checkRequest takes an exec with a program and, when it asks for a pty,
// one that is at least one of stdin, stdout and stderr.
func TestCheckRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Message
		ok   bool
	}{
		{"plain", Message{Type: "exec", Argv: []string{"/bin/true"}}, true},
		{"pty on stdin", Message{Type: "exec", Argv: []string{"/bin/true"}, Pty: &Tty{Stdin: true, Rows: 24, Cols: 80}}, true},
		{"pty on stderr only", Message{Type: "exec", Argv: []string{"/bin/true"}, Pty: &Tty{Stderr: true}}, true},
		{"pty on nothing", Message{Type: "exec", Argv: []string{"/bin/true"}, Pty: &Tty{}}, false},
		{"no program", Message{Type: "exec", Pty: &Tty{Stdin: true}}, false},
		{"not an exec", Message{Type: "signal", Argv: []string{"/bin/true"}}, false},
	} {
		if err := checkRequest(&tc.m); (err == nil) != tc.ok {
			t.Errorf("%s: checkRequest = %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}
