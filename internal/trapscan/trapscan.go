package trapscan

import (
	"errors"
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
}

// DefaultLimits match the socket check at start.
var DefaultLimits = Limits{MaxEntries: 200000, MaxDepth: 256, MaxTraps: 1000, MaxTime: 10 * time.Second}

// ErrUnsupported: not on Linux.
var ErrUnsupported = errors.New("trap scan needs Linux")
