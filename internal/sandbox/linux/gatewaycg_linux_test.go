package linux

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
)

func TestGatewayGroup(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"0123456789abcdef", true},
		{strings.Repeat("a", 60), true},
		{strings.Repeat("a", 61), false}, // <id>--gw would pass 64
		{"abc--gw", false},               // another sandbox's gateway group
		{"ABC", false},
	} {
		if err := checkGatewayID(tc.id); (err == nil) != tc.ok {
			t.Errorf("checkGatewayID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
	if g := GatewayGroup("0123456789abcdef"); g != "0123456789abcdef--gw" {
		t.Errorf("GatewayGroup = %q", g)
	}
	// Bounded: at least 256MiB (the sandbox's limit when larger), 1024
	// tasks, the sandbox's CPU quota, and socket buffers as a sandbox of
	// that memory (never unbounded).
	for _, tc := range []struct {
		in   sandbox.Limits
		want cgroup.Limits
	}{
		{sandbox.Limits{MemoryBytes: 64 << 20, CPUs: 0.5}, cgroup.Limits{MemoryBytes: 256 << 20, Pids: 1024, CPUs: 0.5}},
		{sandbox.Limits{MemoryBytes: 4 << 30, CPUs: 2}, cgroup.Limits{MemoryBytes: 4 << 30, Pids: 1024, CPUs: 2}},
	} {
		tc.want.TCPBytes = tcpLimit(tc.want.MemoryBytes, readHostTCPMem)
		if tc.want.TCPBytes <= 0 || tc.want.TCPBytes > tc.want.MemoryBytes {
			t.Errorf("tcpLimit(%d) = %d, want in (0, memory]", tc.want.MemoryBytes, tc.want.TCPBytes)
		}
		if got := gatewayLimits(tc.in); got != tc.want {
			t.Errorf("gatewayLimits(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
