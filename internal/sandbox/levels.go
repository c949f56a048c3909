package sandbox

import "github.com/cordon-project/cordon/internal/sandbox/level"

// Level is an isolation level (see package level); the seam re-exports it
// so callers name levels as sandbox.DedicatedContainer.
type Level = level.Level

// The levels, weakest first.
const (
	LevelUnknown       = level.LevelUnknown
	Shared             = level.Shared
	DomainIsolated     = level.DomainIsolated
	DedicatedRuntime   = level.DedicatedRuntime
	DedicatedContainer = level.DedicatedContainer
	DedicatedVM        = level.DedicatedVM
)

// Levels lists the requestable levels, weakest first.
func Levels() []Level { return level.Levels() }

// ParseLevel parses a level name (case-insensitive).
func ParseLevel(s string) (Level, error) { return level.Parse(s) }
