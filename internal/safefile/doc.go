// Package safefile writes a file at a path a caller gave, for a process
// that runs as root: the evidence record of `cordon run --evidence`, key
// files, caches and token files in the state directory.
//
// Plane: root (the trusted side), on the host.
//
// The target's parent directory is opened with openat2(RESOLVE_NO_SYMLINKS)
// — no symlink anywhere in the path is followed — and everything after that
// is relative to that directory descriptor: a temporary file created with
// O_CREAT|O_EXCL|O_NOFOLLOW under a random name, written, fsynced, renamed
// onto the target with renameat in the same directory, and the directory
// fsynced. A symlink or a non-regular file (FIFO, socket, device,
// directory) at the target is an error, never followed or replaced.
//
// ReadBounded is the read side for inputs a caller names (configuration,
// policy files, the daemon's settings): it never blocks on a FIFO, never
// opens a device or a directory, and reads at most a bound.
//
// It must never open, create or replace anything through a path component
// that a sandbox could have turned into a symlink: a sandbox may own the
// directory (its workspace), and it may change it while cordon runs.
package safefile
