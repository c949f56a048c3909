package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"strconv"
	"strings"
)

const (
	// minPoolID: ids below it are the host's own (system accounts, the first
	// 65536 ids that distributions and nobody/nogroup live in).
	minPoolID = 65536
	// maxIDEnd is the exclusive upper bound of usable ids: (uid_t)-1 means
	// "no id" to the kernel and can never be mapped.
	maxIDEnd = 1<<32 - 1
)

// idRange is the half-open range [lo, hi) of host ids; uint64 so that
// arithmetic on 32-bit ids cannot overflow.
type idRange struct{ lo, hi uint64 }

func (a idRange) overlaps(b idRange) bool { return a.lo < b.hi && b.lo < a.hi }

func (p Pool) end() uint64 { return uint64(p.Base) + uint64(p.Size)*uint64(p.Slots) }

func (p Pool) lease(slot uint32) Lease {
	id := p.Base + slot*p.Size // validate guarantees no overflow
	return Lease{Slot: slot, UID: id, GID: id, Size: p.Size}
}

// validate checks the pool's own shape.
func (p Pool) validate() error {
	switch {
	case p.Size == 0:
		return fmt.Errorf("pool %+v: zero slot size", p)
	case p.Slots == 0:
		return fmt.Errorf("pool %+v: no slots", p)
	case p.Base < minPoolID:
		return fmt.Errorf("pool %+v: starts below %d, inside the host's own ids", p, minPoolID)
	case p.end() > maxIDEnd:
		return fmt.Errorf("pool %+v: ends at %d, past the last valid id %d", p, p.end()-1, uint64(maxIDEnd-1))
	}
	return nil
}

// checkHost refuses a pool that overlaps a subordinate id range or contains
// an id the host already uses. Missing files are fine; unreadable or
// malformed ones are not, since then no overlap can be ruled out.
func (p Pool) checkHost(f hostFiles) error {
	pool := idRange{uint64(p.Base), p.end()}
	for _, path := range []string{f.subuid, f.subgid} {
		data, err := readHostFile(path)
		if err != nil {
			return err
		}
		ranges, err := parseSubIDs(data)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for _, r := range ranges {
			if r.overlaps(pool) {
				return fmt.Errorf("pool [%d, %d) overlaps range [%d, %d) in %s", pool.lo, pool.hi, r.lo, r.hi, path)
			}
		}
	}
	for _, db := range []struct {
		path   string
		fields int
	}{{f.passwd, 7}, {f.group, 4}} {
		data, err := readHostFile(db.path)
		if err != nil {
			return err
		}
		ids, err := parseIDDB(data, db.fields)
		if err != nil {
			return fmt.Errorf("parse %s: %w", db.path, err)
		}
		for _, id := range ids {
			if pool.lo <= uint64(id) && uint64(id) < pool.hi {
				return fmt.Errorf("pool [%d, %d) contains id %d, used in %s", pool.lo, pool.hi, id, db.path)
			}
		}
	}
	return nil
}

func readHostFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// parseSubIDs parses /etc/subuid or /etc/subgid (subuid(5)): one
// "owner:start:count" entry per line, owner a login name or a uid. Blank
// lines and lines starting with '#' are skipped. Any other line that is not
// exactly that shape, or whose range runs past the last valid id, is an error:
// a line we cannot read may grant the ids we are about to hand out.
func parseSubIDs(data []byte) ([]idRange, error) {
	var out []idRange
	for n, line := range lines(data) {
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) != 3 {
			return nil, lineError(n, line, fmt.Sprintf("want 3 colon-separated fields (owner:start:count), got %d", len(fields)))
		}
		if fields[0] == "" {
			return nil, lineError(n, line, "empty owner")
		}
		start, err := parseID(fields[1])
		if err != nil {
			return nil, lineError(n, line, "start: "+err.Error())
		}
		count, err := parseID(fields[2])
		if err != nil {
			return nil, lineError(n, line, "count: "+err.Error())
		}
		r := idRange{uint64(start), uint64(start) + uint64(count)}
		if r.hi > maxIDEnd {
			return nil, lineError(n, line, fmt.Sprintf("range ends at %d, past the last valid id %d", r.hi-1, uint64(maxIDEnd-1)))
		}
		out = append(out, r)
	}
	return out, nil
}

// parseIDDB returns the ids (third field) of /etc/passwd (7 fields) or
// /etc/group (4 fields). Blank lines, '#' comments and NIS compat entries
// ("+..." or "-...", which carry no id of their own) are skipped.
func parseIDDB(data []byte, fields int) ([]uint32, error) {
	var out []uint32
	for n, line := range lines(data) {
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != fields {
			return nil, lineError(n, line, fmt.Sprintf("want %d colon-separated fields, got %d", fields, len(f)))
		}
		id, err := parseID(f[2])
		if err != nil {
			return nil, lineError(n, line, "id: "+err.Error())
		}
		out = append(out, id)
	}
	return out, nil
}

// lines yields the 1-based number and the content of each line of data,
// without the line ending and surrounding white space.
func lines(data []byte) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		n := 0
		for len(data) > 0 {
			n++
			line := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				line, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			if !yield(n, strings.TrimSpace(string(line))) {
				return
			}
		}
	}
}

// parseID accepts a plain decimal uid_t: digits only, no sign, no base
// prefix, at most 4294967295.
func parseID(s string) (uint32, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return uint32(v), nil
}

func lineError(n int, line, msg string) error {
	const limit = 80
	if len(line) > limit {
		line = line[:limit] + "..."
	}
	return fmt.Errorf("line %d %q: %s", n, line, msg)
}
