package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/store"
)

// DefaultRoot is where container state lives when the engine passes no
// --root.
const DefaultRoot = "/run/cordon-oci"

// Files in a container's directory.
const (
	StateFile    = "state.json"
	SocketFile   = "keeper.sock"
	EvidenceFile = "evidence.json"
	LogFile      = "keeper.log"
)

// validID is runc's rule for container ids: a name, never a path.
var validID = regexp.MustCompile(`^[A-Za-z0-9_+.-]{1,256}$`)

// CheckID refuses an id that is not a plain name.
func CheckID(id string) error {
	if !validID.MatchString(id) || id == "." || id == ".." {
		return failure.Failf(failure.KindUsage, "oci", "container id %q is not a valid name (letters, digits, '_', '+', '.', '-')", clip(id))
	}
	return nil
}

// State is a container's state as its keeper records it: the OCI state
// plus what cordon needs to find and judge the keeper.
type State struct {
	specs.State
	// Keeper identifies the keeper process across pid reuse.
	Keeper store.Owner `json:"keeper"`
	// SandboxID is the sandbox's id in cordon's store.
	SandboxID string `json:"sandbox_id,omitempty"`
	// StateDir is cordon's state directory the keeper used.
	StateDir string    `json:"state_dir"`
	Created  time.Time `json:"created"`
	// Exit is the program's exit status once stopped (128+n: signal n).
	Exit *int `json:"exit,omitempty"`
	// EngineNet is the engine's network namespace the container joined
	// (--engine-network=accept), "" for cordon's own: a pod's other
	// containers, which name this keeper's /proc/PID/ns/net, join it too.
	EngineNet string `json:"engine_net,omitempty"`
}

// Root is an engine's runtime root (--root): one directory per container.
type Root struct{ Dir string }

// Open checks the root directory (creating it 0700 when missing): a
// directory owned by root that no one else can write, never a symlink.
func Open(dir string) (Root, error) {
	if !filepath.IsAbs(dir) {
		return Root{}, failure.Failf(failure.KindUsage, "oci", "--root %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Root{}, failure.Fail(failure.KindProvision, "oci root", err)
	}
	// The directory as it really is (an engine's /var/run/... is /run/...):
	// every directory on its way is checked, and this path is the one used.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return Root{}, failure.Fail(failure.KindProvision, "oci root", err)
	}
	if err := checkOwnDir(real); err != nil {
		return Root{}, failure.Fail(failure.KindPolicyRejected, "oci root", err)
	}
	if err := CheckAncestors(real); err != nil {
		return Root{}, failure.Fail(failure.KindPolicyRejected, "oci root", err)
	}
	return Root{Dir: real}, nil
}

// CheckAncestors: every directory above dir is root's and writable by no
// one else, or root's and sticky (as /tmp), and none is a symlink:
// otherwise another local user could rename dir's parent away and put a
// directory of their own, or a symlink, in its place.
func CheckAncestors(dir string) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s (above the root %s) is not a directory", p, dir)
		}
		if st.Uid != 0 || (st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0) {
			return fmt.Errorf("%s (above the root %s) must be owned by root and writable by no one else, or sticky (uid %d, mode %o)", p, dir, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}

// CheckOperatorDir: dir is a host operator's directory — a real
// directory owned by root and writable by no one else, under directories
// that are root's and writable by no one else (or sticky).
func CheckOperatorDir(dir string) error {
	if err := checkOwnDir(dir); err != nil {
		return err
	}
	return CheckAncestors(dir)
}

// checkOwnDir: a real directory (not a symlink), owned by root, not
// writable by group or others.
func checkOwnDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s must be owned by root and writable by no one else (uid %d, mode %o)", dir, st.Uid, st.Mode&0o7777)
	}
	return nil
}

// Path is container id's directory (id already checked).
func (r Root) Path(id string) string { return filepath.Join(r.Dir, id) }

// Create makes container id's directory; it fails if the id exists.
func (r Root) Create(id string) (string, error) {
	if err := CheckID(id); err != nil {
		return "", err
	}
	d := filepath.Join(r.Dir, id)
	if err := os.Mkdir(d, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", failure.Failf(failure.KindUsage, "oci", "container %q already exists", id)
		}
		return "", failure.Fail(failure.KindProvision, "oci", err)
	}
	return d, nil
}

// ErrNotExist: no such container.
var ErrNotExist = errors.New("container does not exist")

// Load reads container id's state.
func (r Root) Load(id string) (*State, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	d := filepath.Join(r.Dir, id)
	if err := checkOwnDir(d); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, failure.Fail(failure.KindUsage, "oci", fmt.Errorf("%w: %s", ErrNotExist, id))
		}
		return nil, failure.Fail(failure.KindPolicyRejected, "oci", err)
	}
	b, err := safefile.ReadBounded(filepath.Join(d, StateFile), 1<<20, false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, failure.Fail(failure.KindUsage, "oci", fmt.Errorf("%w: %s (its keeper has not recorded it yet)", ErrNotExist, id))
		}
		return nil, failure.Fail(failure.KindStore, "oci state", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, failure.Fail(failure.KindStore, "oci state", err)
	}
	if s.ID != id {
		return nil, failure.Failf(failure.KindStore, "oci state", "state of %q names %q", id, s.ID)
	}
	return &s, nil
}

// Save writes s atomically (never through a symlink).
func (r Root) Save(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return safefile.WriteFile(filepath.Join(r.Dir, s.ID, StateFile), append(b, '\n'), 0o600)
}

// Remove deletes container id's directory.
func (r Root) Remove(id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(r.Dir, id))
}

// List is the ids of the containers under the root.
func (r Root) List() ([]string, error) {
	ents, err := os.ReadDir(r.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && CheckID(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Live is s's status as it is now: a container whose keeper is provably
// gone is stopped, whatever the file says.
func (s *State) Live() specs.ContainerState {
	if s.Keeper.PID > 0 && (!store.Alive(s.Keeper) || zombie(s.Keeper.PID)) {
		return specs.StateStopped
	}
	return s.Status
}

// zombie reports whether pid has exited and waits to be reaped: a keeper
// runs no code once it is one.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}
