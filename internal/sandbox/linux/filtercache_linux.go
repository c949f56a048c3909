package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox/linux/filter"
)

var (
	filterMu    sync.Mutex
	filterCache *filter.Program
)

// seccompFor returns the compiled seccomp filter. Compiling costs ~20 ms,
// so the result is kept in the state dir under the digest of the cordon
// binary that compiled it: the same binary always compiles the same
// program, and a different binary never reads another's file. A file
// whose content does not hash to its recorded digest is recompiled.
func seccompFor(stateDir, binarySHA string) (*filter.Program, error) {
	filterMu.Lock()
	defer filterMu.Unlock()
	if filterCache != nil {
		return filterCache, nil
	}
	var path string
	if binarySHA != "" && stateDir != "" {
		path = filepath.Join(stateDir, "seccomp-"+runtime.GOARCH+"-"+binarySHA[:32]+".bpf")
		if raw, err := os.ReadFile(path); err == nil && len(raw) > 0 {
			sum := sha256.Sum256(raw)
			if dig, err := os.ReadFile(path + ".sha256"); err == nil && string(dig) == hex.EncodeToString(sum[:]) {
				filterCache = &filter.Program{Arch: runtime.GOARCH, Raw: raw, SHA256: string(dig)}
				return filterCache, nil
			}
		}
	}
	p, err := filter.Build()
	if err != nil {
		return nil, err
	}
	if path != "" {
		_ = writeAtomic(path, p.Raw)
		_ = writeAtomic(path+".sha256", []byte(p.SHA256))
	}
	filterCache = p
	return p, nil
}

// writeAtomic replaces path (in the state dir) atomically, never through
// a symlink.
func writeAtomic(path string, b []byte) error {
	return safefile.WriteFile(path, b, 0o600)
}
