package cli

import "github.com/cordon-project/cordon/internal/units"

// ParseSize parses a size flag (--memory, --tmp-size) in package units'
// grammar, the one a configuration file uses: 512M, 2.5G, 2GiB, 1048576.
func ParseSize(s string) (int64, error) { return units.Parse(s) }

// FormatSize renders bytes with the largest exact 1024-based unit.
func FormatSize(n int64) string { return units.Format(n) }
