package hostmgr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/store"
)

// TestNewRefusesStateDirOthersCanWrite checks that the daemon refuses to
// start on a state directory (or its logs or gateway-secrets directory)
// that someone other than the daemon's user may write: there, a local
// user could plant a hard link or a symlink named like a sandbox's log or
// time index that root then reads back to them (logs) or appends to.
// Control: the same layout with mode 0700 starts.
func TestNewRefusesStateDirOthersCanWrite(t *testing.T) {
	for _, sub := range []string{"", "logs", "gateway-secrets"} {
		dir := t.TempDir()
		state := filepath.Join(dir, "state")
		st, err := store.Open(state, store.DefaultPool)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{StateDir: state, Store: st, Provider: &fake.Provider{}, VolumeDir: filepath.Join(dir, "volumes")}
		if _, err := New(o); err != nil {
			t.Fatalf("control: New = %v", err)
		}
		target := filepath.Join(state, sub)
		if err := os.Chmod(target, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "writable") {
			t.Errorf("New with %s mode 0777 = %v, want refused", target, err)
		}
		if err := os.Chmod(target, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := New(o); err != nil {
			t.Errorf("control: New with %s back at 0700 = %v", target, err)
		}
		st.Close()
	}
}
