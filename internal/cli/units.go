package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte size with 1024-based units: 512M, 2G, 2GiB,
// 64KiB, 1048576. Suffixes are case-insensitive; "B" and "iB" are optional.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	shift := 0
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			u = u[:n-1]
		}
	}
	if shift == 0 && u != strings.TrimSuffix(strings.ToUpper(t), "B") && !strings.HasSuffix(strings.ToUpper(t), "B") {
		return 0, fmt.Errorf("size %q: unknown unit", s)
	}
	f, err := strconv.ParseFloat(u, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (K, M, G, T; 1024-based)", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	v := f * float64(int64(1)<<shift)
	if v >= math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// FormatSize renders bytes with the largest exact 1024-based unit.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}
