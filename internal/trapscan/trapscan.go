package trapscan

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Kind is what an entry can do to a host user.
type Kind string

// The kinds of trap.
const (
	// SymlinkOut: a symlink whose target is absolute or climbs out of the
	// tree; on the host it points at a host path.
	SymlinkOut Kind = "symlink_out"
	FIFO       Kind = "fifo"
	Socket     Kind = "socket"
	CharDevice Kind = "char_device"
	BlockDev   Kind = "block_device"
)

// Trap is one entry that can trap a host user.
type Trap struct {
	Path   string `json:"path"`             // relative to the root, exact bytes
	Kind   Kind   `json:"kind"`             // what it is
	Target string `json:"target,omitempty"` // a symlink's target, exact bytes
	// PathBytes and TargetBytes repeat Path and Target (base64 in JSON)
	// when they are not valid UTF-8, which a JSON string cannot carry
	// (encoding/json writes U+FFFD): the exact name, to find the file.
	PathBytes   []byte `json:"path_bytes,omitempty"`
	TargetBytes []byte `json:"target_bytes,omitempty"`
}

// Report is the result of one scan.
type Report struct {
	Root    string `json:"root"`              // the bind's host path
	Sandbox string `json:"sandbox,omitempty"` // where the program saw it
	Traps   []Trap `json:"traps"`
	Entries int    `json:"entries_scanned"`
	// Truncated says why the walk stopped before seeing everything ("" when
	// it saw the whole tree): what it did not see is not known to be clean.
	Truncated string `json:"truncated,omitempty"`
}

// Limits bound one scan.
type Limits struct {
	MaxEntries int // entries stat'ed in all
	MaxDepth   int // directory nesting
	MaxTraps   int // traps listed (the walk goes on counting none)
	// MaxTime bounds the whole walk (0: no bound). The walk runs as root,
	// outside the sandbox's CPU limit, and the program chooses how costly
	// each entry is (a symlink that stays inside is resolved by the
	// kernel, up to 40 hops of a 4 KiB path each), so entries alone do not
	// bound it.
	MaxTime time.Duration
	// MaxBytes bounds the listed traps' size as JSON (0: no bound): names
	// and targets are the program's bytes, up to 64 KiB and 4 KiB each,
	// and an escaped control byte takes six.
	MaxBytes int
}

// DefaultLimits match the socket check at start.
var DefaultLimits = Limits{MaxEntries: 200000, MaxDepth: 256, MaxTraps: 1000, MaxTime: 10 * time.Second, MaxBytes: 1 << 20}

// ErrUnsupported: not on Linux.
var ErrUnsupported = errors.New("trap scan needs Linux")

// Size is t's size as JSON.
func (t Trap) Size() int {
	b, err := json.Marshal(t)
	if err != nil {
		return len(t.Path) + len(t.Target)
	}
	return len(b)
}

// Fit returns a copy of reps whose traps, as JSON, take at most max bytes
// in all (each report's truncated field says when its list was cut): for a
// reply that has a size limit, such as the daemon's.
func Fit(reps []Report, max int) []Report {
	out := make([]Report, len(reps))
	used := 0
	for i, r := range reps {
		n := 0
		for _, t := range r.Traps {
			if used += t.Size(); used > max {
				break
			}
			n++
		}
		if n < len(r.Traps) {
			if r.Truncated == "" {
				r.Truncated = fmt.Sprintf("%d traps not listed: the list is cut at %d bytes", len(r.Traps)-n, max)
			}
			r.Traps = r.Traps[:n:n]
			used = max + 1 // the ones after are cut too
		}
		out[i] = r
	}
	return out
}
