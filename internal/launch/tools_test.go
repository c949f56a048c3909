package launch

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/textsafe"
)

const hostile = "gpt\x1b[2K\x1b]0;pwned\x07\x1b[1A\x1b[10D\r\u202eevil\u009b31m\u2066\n1\tforged\trow"

// A tool server's stderr reaches the operator's terminal escaped, a line
// per line, each marked with the server's name.
func TestToolStderrEscaped(t *testing.T) {
	var buf bytes.Buffer
	w := toolStderr(&buf, "fs")
	w.Write([]byte(hostile[:9]))
	w.Write([]byte(hostile[9:] + "\n"))
	out := buf.String()
	for _, line := range strings.SplitAfter(strings.TrimSuffix(out, "\n"), "\n") {
		if !strings.HasPrefix(line, "tool fs: ") {
			t.Errorf("line %q lacks the prefix (output %q)", line, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\r\u202e\u2066\u009b\x07") {
		t.Errorf("tool stderr holds controls: %q", out)
	}
	for _, r := range out {
		if r != '\n' && r != '\t' && textsafe.Invisible(r) {
			t.Errorf("tool stderr holds %U: %q", r, out)
		}
	}
}
