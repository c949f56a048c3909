//go:build !linux

package trapscan

// Scan is unsupported off Linux: the report says so.
func Scan(_ int, name string, _ Limits) Report {
	return Report{Root: name, Traps: []Trap{}, Truncated: ErrUnsupported.Error()}
}
