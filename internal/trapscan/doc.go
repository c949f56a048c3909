// Package trapscan reports what a sandboxed program left in a writable
// bind (its workspace) that can trap the host user who opens it next: a
// symlink whose target leaves the tree (README.md -> /root/.ssh/id_rsa), a
// FIFO (a reader blocks), a Unix socket (a path to whatever listens; the
// next cordon run refuses the workspace), a character or block device.
//
// Plane: root (the trusted side), after the program has run.
//
// It walks the opened directory descriptor of the bind, never a path:
// openat(O_NOFOLLOW|O_DIRECTORY) for each directory, fstatat
// (AT_SYMLINK_NOFOLLOW) for each entry, and openat2(RESOLVE_BENEATH) from
// the root descriptor to tell whether a relative symlink climbs out. The
// walk is bounded in depth and entries and says when it stopped early.
//
// It must never follow a symlink, open a FIFO, device or socket, or
// change anything in the tree; names are agent-controlled and are printed
// for a person only through internal/textsafe.
package trapscan
