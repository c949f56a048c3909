package linux

import (
	"errors"
	"os"
	"testing"
)

func TestTCPLimit(t *testing.T) {
	page := int64(os.Getpagesize())
	tests := []struct {
		name   string
		memory int64
		tcpMem string
		err    error
		want   int64
	}{
		{"memory below a quarter of pressure", 64 << 20, "287898 383866 575796\n", nil, 64 << 20},
		{"a quarter of pressure below memory", 4 << 30, "287898 383866 575796\n", nil, 383866 / 4 * page},
		{"unreadable tcp_mem keeps memory", 4 << 30, "", errors.New("no such file"), 4 << 30},
		{"malformed tcp_mem keeps memory", 4 << 30, "1 2\n", nil, 4 << 30},
		{"zero pressure keeps memory", 4 << 30, "0 0 0\n", nil, 4 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tcpLimit(tt.memory, func() ([]byte, error) { return []byte(tt.tcpMem), tt.err })
			if got != tt.want {
				t.Errorf("tcpLimit(%d, %q) = %d, want %d", tt.memory, tt.tcpMem, got, tt.want)
			}
		})
	}
}

func TestKernelAccountingFact(t *testing.T) {
	for _, tt := range []struct {
		cmdline string
		err     error
		ok      bool
	}{
		{"console=ttyS0 quiet psi=1", nil, true},
		{"quiet cgroup.memory=nokmem", nil, false},
		{"cgroup.memory=nosocket,nokmem quiet", nil, false},
		{"quiet -- cgroup.memory=nokmem", nil, true}, // after "--": the init's arguments
		{"", errors.New("unreadable"), false},
	} {
		if c := kernelAccountingFact(tt.cmdline, tt.err); c.OK != tt.ok {
			t.Errorf("kernelAccountingFact(%q) = %+v, want ok=%v", tt.cmdline, c, tt.ok)
		}
	}
}
