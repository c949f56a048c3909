// Package cgroup owns the control groups of cordon's sandboxes: finding where
// the memory, pids and cpu controllers live, creating one group per sandbox,
// writing its limits and reading them back as facts, placing processes in it,
// counting OOM kills, killing everything in it, and removing it — including the
// residue a killed cordon left behind.
//
// Controllers are located per controller, not per machine: a host may be pure
// cgroup v1, pure v2 (unified at /sys/fs/cgroup) or a hybrid where v1 hierarchies
// enforce limits while a controller-less v2 mount exists. Whenever a v2 mount
// exists a v2 "tracking" group is created too, even with no controllers in it:
// it gives cgroup.kill (the whole process tree dies in one write) and a clone3
// CLONE_INTO_CGROUP target, so a sandbox is never running outside a group that
// can kill it.
//
// Plane: root (the Linux provider, and the daemon looking for residue when
// it reconciles).
//
// Every group lives at <mountpoint>/cordon/<name>, where name matches
// [a-z0-9-]{1,64}. The package must never:
//   - create, write or remove anything outside <mountpoint>/cordon/ (apart from
//     enabling controllers in cgroup.subtree_control of a v2 mount root, which
//     is what lets <mountpoint>/cordon have them);
//   - follow a symlink when deleting: groups are removed with rmdir relative to
//     a directory opened with O_NOFOLLOW, never recursively unlinked, so a
//     non-cgroup directory with files in it cannot be emptied by mistake;
//   - signal a process it has not just seen in one of its own cgroup.procs
//     files (pidfds close the pid-reuse race);
//   - leave a sandbox running with a limit silently missing: a limit that was
//     asked for but whose controller is absent is an error, and a limit that is
//     absent by host configuration (no swap accounting) is reported as a fact.
//
// The shared <mountpoint>/cordon parent directories are created on demand and
// never removed. Tests that need a v2 cgroupfs on a host that has none use a
// fake made of plain files.
package cgroup
