package hostmgr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/store"
)

// The time index of a sandbox's log (logs --since).
//
// The log is the main program's raw output, written by the sandbox's init
// straight to the file: no line carries a time and no trusted process sees
// the bytes as they go by. So the daemon samples the log's size while the
// main program runs and, each time it has grown, appends one entry to
// <state>/logs/<id>.idx: (size, time) — "by this time the log held this
// many bytes". Bytes past an entry's size were written after its time, so
// for --since T the log is read from the size of the last entry at or
// before T: nothing written at or after T is ever left out, and at most
// one sampling interval of earlier output is shown. It works on byte
// offsets, so output without newlines is indexed like any other.
//
// The sandbox influences neither where the index is written (the path is
// the daemon's log directory and the id it minted, opened without
// following symlinks) nor its size (at most maxIndexEntries entries: when
// full, every other entry is dropped, which only moves a --since start
// earlier). What it does influence — how fast the log grows — only
// changes the numbers in entries.
const (
	indexEvery      = 250 * time.Millisecond
	maxIndexEntries = 4096
	indexEntrySize  = 16 // offset, then Unix nanoseconds: int64 little-endian each
)

// indexEntry: by At the log held Offset bytes.
type indexEntry struct {
	Offset int64
	At     time.Time
}

func indexPath(state, id string) string { return filepath.Join(logDir(state), id+".idx") }

// removeLog removes a sandbox's log and its time index.
func removeLog(state, id string) {
	os.Remove(logPath(state, id))
	os.Remove(indexPath(state, id))
}

// errIndex is a time index that is not a sequence of whole entries with
// offsets and times that never go back.
var errIndex = errors.New("damaged log time index")

// parseIndex reads an index file's bytes. A trailing partial entry (a
// daemon killed mid-write) is left out; anything else out of order is
// errIndex.
func parseIndex(b []byte) ([]indexEntry, error) {
	n := len(b) / indexEntrySize
	if n > maxIndexEntries+1 {
		return nil, fmt.Errorf("%w: %d entries, at most %d", errIndex, n, maxIndexEntries+1)
	}
	out := make([]indexEntry, 0, n)
	for i := range n {
		e := b[i*indexEntrySize:]
		off, ns := int64(binary.LittleEndian.Uint64(e)), int64(binary.LittleEndian.Uint64(e[8:]))
		if off < 0 || ns < 0 {
			return nil, fmt.Errorf("%w: entry %d is negative", errIndex, i)
		}
		if i > 0 && (off < out[i-1].Offset || ns < out[i-1].At.UnixNano()) {
			return nil, fmt.Errorf("%w: entry %d goes back", errIndex, i)
		}
		out = append(out, indexEntry{Offset: off, At: time.Unix(0, ns)})
	}
	return out, nil
}

func appendEntry(b []byte, e indexEntry) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(e.Offset))
	return binary.LittleEndian.AppendUint64(b, uint64(e.At.UnixNano()))
}

// sinceOffset is where output written at or after t begins: the size of
// the last entry at or before t (0 when there is none).
func sinceOffset(es []indexEntry, t time.Time) int64 {
	var off int64
	for _, e := range es {
		if e.At.After(t) {
			break
		}
		off = e.Offset
	}
	return off
}

// readIndex reads a sandbox's index (none: no entries).
func readIndex(state, id string) ([]indexEntry, error) {
	f, err := os.OpenFile(indexPath(state, id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, (maxIndexEntries+2)*indexEntrySize))
	if err != nil {
		return nil, err
	}
	return parseIndex(b)
}

// thin keeps every other entry and the last: half as many, each kept
// entry exact (a start found in them is only ever earlier).
func thin(es []indexEntry) []indexEntry {
	var out []indexEntry
	for i, e := range es {
		if i%2 == 0 || i == len(es)-1 {
			out = append(out, e)
		}
	}
	return out
}

// writeIndex replaces a sandbox's index with es, atomically (a new file
// beside it, renamed over it).
func writeIndex(state, id string, es []indexEntry) error {
	var b []byte
	for _, e := range es {
		b = appendEntry(b, e)
	}
	tmp := indexPath(state, id) + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, indexPath(state, id))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// logIndexer appends to one sandbox's index.
type logIndexer struct {
	state, id string
	es        []indexEntry
}

// sample records the log's size now if it has grown since the last entry.
func (x *logIndexer) sample(now time.Time) error {
	fi, err := os.Lstat(logPath(x.state, x.id))
	if err != nil {
		return err
	}
	var last indexEntry
	if len(x.es) > 0 {
		last = x.es[len(x.es)-1]
	}
	// Growth only: a log the program truncated (its descriptor allows
	// ftruncate) is read from clamped offsets; the wall clock may step
	// back, the index does not.
	if fi.Size() <= last.Offset {
		return nil
	}
	if now.Before(last.At) {
		now = last.At
	}
	e := indexEntry{Offset: fi.Size(), At: now}
	if len(x.es) >= maxIndexEntries {
		x.es = append(thin(x.es), e)
		return writeIndex(x.state, x.id, x.es)
	}
	flags := os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	if len(x.es) == 0 {
		flags |= os.O_CREATE // later, a removed index (rm) stays removed
	}
	f, err := os.OpenFile(indexPath(x.state, x.id), flags, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(appendEntry(nil, e)); err != nil {
		return err
	}
	x.es = append(x.es, e)
	return nil
}

// indexLog keeps the time index of b's log while its main program runs
// (started with it, or adopted while it runs): it samples the log's size
// every indexEvery and ends, after a last sample, once the program has
// exited, the sandbox is stopped or removed, or the log is gone.
func (d *Daemon) indexLog(b *box, id string) {
	x := &logIndexer{state: d.o.StateDir, id: id}
	es, err := readIndex(d.o.StateDir, id)
	if err != nil {
		d.log.Warn("log time index unreadable; starting it again", "id", id, "err", err)
		es = nil
	}
	// Whole entries only from here on (a partial one of a killed daemon
	// is dropped by rewriting what was read).
	if fi, err := os.Lstat(indexPath(d.o.StateDir, id)); err == nil && fi.Size() != int64(len(es)*indexEntrySize) {
		if err := writeIndex(d.o.StateDir, id, es); err != nil {
			d.log.Warn("log time index", "id", id, "err", err)
			return
		}
	}
	x.es = es
	t := time.NewTicker(indexEvery)
	defer t.Stop()
	for range t.C {
		over := false
		if b.mu.TryLock() { // a lifecycle operation holds it: look next time
			over = b.rec.State == store.DStopped || b.rec.State == store.DRemoving || b.rec.MainExit != ""
			b.mu.Unlock()
		}
		if err := x.sample(time.Now()); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				d.log.Warn("log time index", "id", id, "err", err)
			}
			return
		}
		if over {
			return
		}
	}
}

// sinceStart is where logs --since starts reading: the later of where
// output written at or after a.Since begins and a.Tail's start (a.Offset
// when a.Tail is set), within the log's size.
func (d *Daemon) sinceStart(id string, a LogsArgs, size int64) (int64, error) {
	es, err := readIndex(d.o.StateDir, id)
	if err != nil {
		return 0, proto.Errorf(proto.KindInternal, "logs --since: %v", err)
	}
	off := min(sinceOffset(es, a.Since), size)
	if a.Tail > 0 {
		off = max(off, a.Offset)
	}
	return off, nil
}
