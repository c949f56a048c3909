package level

import (
	"fmt"
	"strings"
)

// Level is an isolation level, ordered from weakest to strongest. The zero
// value is LevelUnknown, which satisfies no request.
type Level int

// The levels, weakest first (opentenbase-agentx "Levels").
const (
	LevelUnknown Level = iota
	// SHARED: no boundary is claimed. For explicitly trusted tests only.
	Shared
	// DOMAIN_ISOLATED: a dedicated identity (leased UID/GID range, no host
	// credentials) is evidenced; nothing more.
	DomainIsolated
	// DEDICATED_RUNTIME: identity plus process and filesystem boundaries are
	// evidenced, but not all six.
	DedicatedRuntime
	// DEDICATED_CONTAINER: all six boundaries (process, filesystem, IPC,
	// network, resource, credential) are evidenced: enforcement VERIFIED.
	DedicatedContainer
	// DEDICATED_VM: a hardware-virtualised boundary. No provider here can
	// evidence it yet.
	DedicatedVM
)

var levelNames = [...]string{"UNKNOWN", "SHARED", "DOMAIN_ISOLATED", "DEDICATED_RUNTIME", "DEDICATED_CONTAINER", "DEDICATED_VM"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("Level(%d)", int(l))
	}
	return levelNames[l]
}

// MarshalText encodes the level by name.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText decodes a level name, and "UNKNOWN", which MarshalText
// writes for LevelUnknown (a provider that could not say what it can do):
// what cordon encodes must decode. Parse still refuses it as a request.
func (l *Level) UnmarshalText(b []byte) error {
	if string(b) == "UNKNOWN" {
		*l = LevelUnknown
		return nil
	}
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Levels lists the requestable levels, weakest first.
func Levels() []Level {
	return []Level{Shared, DomainIsolated, DedicatedRuntime, DedicatedContainer, DedicatedVM}
}

// Parse parses a level name (case-insensitive).
func Parse(s string) (Level, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for _, l := range Levels() {
		if l.String() == u {
			return l, nil
		}
	}
	names := make([]string, 0, len(levelNames)-1)
	for _, l := range Levels() {
		names = append(names, l.String())
	}
	return LevelUnknown, fmt.Errorf("unknown level %q (want one of %s)", s, strings.Join(names, ", "))
}
