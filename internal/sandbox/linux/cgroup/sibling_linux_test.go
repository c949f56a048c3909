package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A sandbox's gateway has its own group beside the sandbox's
// (<id>--gw, see linux/gatewaycg_linux.go) with its own limits: on a v2
// host each is one directory under <mount>/cordon with its own
// memory.max, pids.max and cpu.max, an OOM kill in the sandbox's group
// is not counted in the gateway's, and both are residue until removed.
// (The v2 path runs only on this fake here: the development hosts are
// v1 hybrids.)
func TestSiblingGatewayGroupV2Fake(t *testing.T) {
	l, h := newFakeV2(t)
	sb, err := create(l, "box", Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5}, h)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := create(l, "box--gw", Limits{MemoryBytes: 256 << 20, Pids: 1024, CPUs: 0.5}, h)
	if err != nil {
		t.Fatal(err)
	}
	dir := func(n string) string { return filepath.Join(l.Unified, "cordon", n) }
	want := map[string]string{
		filepath.Join(dir("box"), "memory.max"):     "67108864",
		filepath.Join(dir("box"), "pids.max"):       "32",
		filepath.Join(dir("box--gw"), "memory.max"): "268435456",
		filepath.Join(dir("box--gw"), "pids.max"):   "1024",
		filepath.Join(dir("box--gw"), "cpu.max"):    "50000 100000",
	}
	if d := cmp.Diff(want, readAll(t, want)); d != "" {
		t.Errorf("limits (-want +got):\n%s", d)
	}
	os.WriteFile(filepath.Join(dir("box"), "memory.events"), []byte("low 0\nhigh 0\nmax 9\noom 4\noom_kill 3\n"), 0o644)
	if n, err := sb.OOMKills(); n != 3 || err != nil {
		t.Errorf("sandbox OOMKills = %d, %v, want 3", n, err)
	}
	if n, err := gw.OOMKills(); n != 0 || err != nil {
		t.Errorf("gateway OOMKills = %d, %v, want 0: the sandbox's OOM is not the gateway's", n, err)
	}
	if res, _ := Residue(l); !cmp.Equal(res, []string{"box", "box--gw"}) {
		t.Errorf("Residue = %v, want both groups", res)
	}
	if err := open(l, "box", h).Remove(); err != nil {
		t.Fatal(err)
	}
	if err := open(l, "box--gw", h).Remove(); err != nil {
		t.Fatal(err)
	}
	if res, _ := Residue(l); len(res) != 0 {
		t.Errorf("Residue after removal = %v, want none", res)
	}
}
