package evidence

import (
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox/level"
)

func TestParseMountinfo(t *testing.T) {
	in := "22 1 0:21 / / ro,nosuid,nodev - tmpfs tmpfs rw,size=1024k\n" +
		"23 22 8:1 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw\n" +
		"30 22 0:40 / /work\\040space rw,nosuid,nodev - ext4 /dev/sda1 rw,idmapped\n"
	ms, err := parseMountinfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].target != "/" || !hasOpt(ms[0].opts, "ro") || ms[2].target != "/work space" || ms[1].fstype != "ext4" {
		t.Fatalf("parseMountinfo(%q) = %+v", in, ms)
	}
	for _, bad := range []string{"garbage", "1 2 3 4 5 6", "1 2 3 4 / ro -"} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("parseMountinfo(%q) = nil error, want an error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	m := parseStatus([]byte("Name:\tx\nUid:\t1 2 3 4\nGroups:\t\nCapEff:\t0000000000000000\nnocolon\n"))
	if m["Uid"] != "1 2 3 4" || m["Groups"] != "" || !zeroCaps(m["CapEff"]) || zeroCaps("0000000000000001") {
		t.Fatalf("parseStatus = %v", m)
	}
}

func TestAdmit(t *testing.T) {
	all := func(except ...string) map[string]Boundary {
		b := map[string]Boundary{}
		for _, n := range Boundaries() {
			b[n] = Boundary{Verified: true}
		}
		for _, e := range except {
			b[e] = Boundary{}
		}
		return b
	}
	tests := []struct {
		name  string
		b     map[string]Boundary
		level level.Level
		mode  string
	}{
		{"all six", all(), level.DedicatedContainer, Verified},
		{"no network", all(Network), level.DedicatedRuntime, Unverified},
		{"no ipc", all(IPC), level.DedicatedRuntime, Unverified},
		{"no filesystem", all(Filesystem), level.DomainIsolated, Unverified},
		{"no credential", all(Credential), level.Shared, Unverified},
		{"nothing", map[string]Boundary{}, level.Shared, Unverified},
	}
	for _, tt := range tests {
		l, m := Admit(tt.b)
		if l != tt.level || m != tt.mode {
			t.Errorf("Admit(%s) = %v, %v, want %v, %v", tt.name, l, m, tt.level, tt.mode)
		}
	}
}

func TestJudgeEmptyIsNotVerified(t *testing.T) {
	if judge(nil).Verified {
		t.Fatal("judge(nil).Verified = true, want false: no facts is no evidence")
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("22 1 0:21 / / ro,nosuid - tmpfs tmpfs rw\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseMountinfo(b)
		if err != nil && ms != nil {
			t.Fatalf("parseMountinfo returned entries with an error")
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Uid:\t1 2 3 4\nCapEff:\t0\n"))
	f.Fuzz(func(t *testing.T, b []byte) { _ = parseStatus(b) })
}
