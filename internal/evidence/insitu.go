package evidence

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// maxUDPTable bounds the /proc/PID/net/udp text parseUDPRemotes reads:
// the sandbox decides how many sockets its namespace holds.
const maxUDPTable = 1 << 20

// parseUDPRemotes returns the remote address ("a.b.c.d:port") of every
// socket in a /proc/net/udp table (the first line is the header). The
// kernel prints each address as the little-endian hex of the IPv4 address
// and the hex port.
func parseUDPRemotes(b []byte) ([]string, error) {
	if len(b) > maxUDPTable {
		return nil, fmt.Errorf("udp table of %d bytes, over %d", len(b), maxUDPTable)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []string
	for i, l := range lines {
		if i == 0 || strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: %d fields", i+1, len(f))
		}
		a, err := parseHexAddr4(f[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func parseHexAddr4(s string) (string, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok || len(h) != 8 || len(p) != 4 {
		return "", fmt.Errorf("address %q: want 8 hex digits, ':', 4 hex digits", s)
	}
	ab, err := hex.DecodeString(h)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", s, err)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", s, err)
	}
	ip := netip.AddrFrom4([4]byte{ab[3], ab[2], ab[1], ab[0]})
	return netip.AddrPortFrom(ip, uint16(port)).String(), nil
}

// InSitu is the judged in-situ set of one sandbox, read by the trusted
// side after the init made its attempts and before the program started.
type InSitu struct {
	Set string `json:"set"` // "default" or "full"
	// Checks are the judged attempts and their positive controls
	// (Control); Boundary names the boundary each one is a fact of.
	Checks []Check `json:"checks"`
	// AttemptMicros is the init's own time for the attempts (a measure,
	// not evidence); JudgeMicros the trusted side's time to judge them.
	AttemptMicros int64 `json:"attempt_us"`
	JudgeMicros   int64 `json:"judge_us"`
}

// ApplyInSitu makes every boundary with a failed in-situ check (an
// attempt observed to succeed, or a control that did not show) unverified,
// with the failed check among its facts, so admission refuses it exactly
// as it refuses any other failed fact.
func ApplyInSitu(b map[string]Boundary, s *InSitu) {
	if s == nil {
		return
	}
	for _, c := range s.Checks {
		if c.OK {
			continue
		}
		bd := b[c.Boundary]
		bd.Verified = false
		f := c
		f.Name = "in_situ:" + c.Name
		bd.Facts = append(bd.Facts, f)
		b[c.Boundary] = bd
	}
}

// The in-situ sets (InSitu.Set).
const (
	InSituSetDefault = "default"
	InSituSetFull    = "full"
)

var inSituDefault = []string{
	"insitu_write_outside_writable", "insitu_write_control",
	"insitu_host_abstract_socket", "insitu_host_abstract_socket_control",
	"insitu_host_loopback_port", "insitu_host_loopback_port_control",
	"insitu_kernel_object_control", "insitu_io_uring_setup", "insitu_userfaultfd",
	"insitu_route_out", "insitu_route_control",
}

// InSituChecks names every check of an in-situ set (nil: no such set).
func InSituChecks(set string) []string {
	switch set {
	case InSituSetDefault:
		return slices.Clone(inSituDefault)
	case InSituSetFull:
		return append(slices.Clone(inSituDefault), "insitu_bpf_map_create", "insitu_perf_event_open", "insitu_mount_over_probe_dir")
	}
	return nil
}

// MissingInSitu names what s lacks of its set: an unknown set, or each
// check of the set it does not report. A set is a claim only whole: a
// record that leaves a check out (a provider reporting only what passed)
// must not read as "every in-situ check OK".
func MissingInSitu(s *InSitu) []string {
	want := InSituChecks(s.Set)
	if want == nil {
		return []string{fmt.Sprintf("set %q: want %s or %s", s.Set, InSituSetDefault, InSituSetFull)}
	}
	var out []string
	for _, n := range want {
		if !slices.ContainsFunc(s.Checks, func(c Check) bool { return c.Name == n }) {
			out = append(out, n+": missing from the "+s.Set+" set")
		}
	}
	return out
}
