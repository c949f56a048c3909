package store

import (
	"os"
	"strings"
	"testing"
)

func TestSelf(t *testing.T) {
	got, err := Self()
	if err != nil {
		t.Fatalf("Self() = %v", err)
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, start, err := parseStat(stat)
	if err != nil {
		t.Fatalf("parseStat(/proc/self/stat) = %v", err)
	}
	boot, err := os.ReadFile(bootIDPath)
	if err != nil {
		t.Fatal(err)
	}
	want := Owner{PID: os.Getpid(), StartTime: start, BootID: strings.TrimSpace(string(boot))}
	if got != want {
		t.Errorf("Self() = %+v, want %+v", got, want)
	}
}

func TestAlive(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatalf("Self() = %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Owner)
		want bool
	}{
		{"self", func(*Owner) {}, true},
		{"other start time", func(o *Owner) { o.StartTime++ }, false},
		{"other boot", func(o *Owner) { o.BootID = "00000000-0000-0000-0000-000000000000" }, false},
		{"no such pid", func(o *Owner) { o.PID = 1 << 30 }, false}, // above PID_MAX_LIMIT
		{"zero pid", func(o *Owner) { o.PID = 0 }, false},
	} {
		o := self
		tc.edit(&o)
		if got := Alive(o); got != tc.want {
			t.Errorf("%s: Alive(%+v) = %v, want %v", tc.name, o, got, tc.want)
		}
	}
}

// statLine builds a /proc/PID/stat line with the given comm and start time.
func statLine(comm, start string) string {
	// fields 3..21, then starttime (22), then a few more
	return "77 (" + comm + ") S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 " + start + " 1000 200 18446744073709551615\n"
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in        string
		wantPID   int
		wantStart uint64
		wantErr   bool
	}{
		{in: statLine("cordon", "4242"), wantPID: 77, wantStart: 4242},
		{in: statLine("a b) S 1 2 3 (c", "99"), wantPID: 77, wantStart: 99}, // agent-chosen comm
		{in: statLine(")", "5"), wantPID: 77, wantStart: 5},
		{in: statLine("x", "-1"), wantErr: true},
		{in: "77 (x) S 1 2 3\n", wantErr: true},
		{in: "77 x S 1\n", wantErr: true},
		{in: "(x) " + statLine("x", "1")[5:], wantErr: true},
		{in: "", wantErr: true},
	} {
		pid, start, err := parseStat([]byte(tc.in))
		if gotErr := err != nil; gotErr != tc.wantErr || (err == nil && (pid != tc.wantPID || start != tc.wantStart)) {
			t.Errorf("parseStat(%q) = %d, %d, %v, want %d, %d, error: %v", tc.in, pid, start, err, tc.wantPID, tc.wantStart, tc.wantErr)
		}
	}
}

// FuzzParseStat: the comm field is chosen by the (possibly hostile) process,
// so the parser must never panic on any content.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine("cordon", "4242")))
	f.Add([]byte(statLine("a) b (c", "1")))
	f.Add([]byte("1 () "))
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, _, err := parseStat(b)
		if err == nil && pid <= 0 {
			t.Errorf("parseStat(%q) accepted pid %d", b, pid)
		}
	})
}
