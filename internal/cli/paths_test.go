package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHostPathAndBindArg(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ in, want string }{
		{"", ""}, {"/abs/x", "/abs/x"}, {".", wd}, {"a/../b", filepath.Join(wd, "b")},
	} {
		if got, err := hostPath("run", "--workspace", tt.in); err != nil || got != tt.want {
			t.Errorf("hostPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, tt := range []struct{ in, host, target string }{
		{"data:/in", filepath.Join(wd, "data"), "/in"},
		{"data", filepath.Join(wd, "data"), filepath.Join(wd, "data")},
		{"/h:/t", "/h", "/t"},
	} {
		h, tg, err := bindArg("run", "--ro", tt.in)
		if err != nil || h != tt.host || tg != tt.target {
			t.Errorf("bindArg(%q) = %q, %q, %v; want %q, %q", tt.in, h, tg, err, tt.host, tt.target)
		}
	}
	for _, bad := range []string{"data:in", ":/in", "/h:"} {
		if _, _, err := bindArg("run", "--ro", bad); err == nil {
			t.Errorf("bindArg(%q) = nil error, want refused", bad)
		}
	}
}
