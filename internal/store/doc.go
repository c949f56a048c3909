// Package store is cordon's embedded persistence: one SQLite database,
// stateDir/cordon.db, opened through the pure-Go modernc.org/sqlite driver (no
// cgo). Today it owns two things that must outlive a crashed cordon process:
//
//   - the write-ahead record of every sandbox (id, kind, workload, owner
//     process, lifecycle state, and the host resources created for it), and
//   - the UID/GID lease each sandbox's user namespace is mapped onto.
//
// # Leases
//
// A [Pool] is a block of host ids cut into equal slots; lease i covers
// [Base+i*Size, Base+(i+1)*Size) for both UIDs and GIDs. [Open] refuses a pool
// that reaches below 65536, past the last valid id, or into any range listed
// in /etc/subuid or /etc/subgid, or that holds a uid or gid named in
// /etc/passwd or /etc/group. [Store.Begin] picks the lowest free slot and
// inserts the record in one BEGIN IMMEDIATE transaction, so two cordon
// processes (or goroutines) can never be handed the same slot; a UNIQUE
// constraint on the lease's first uid backs that up inside the database.
// Freeness is judged on the host id ranges actually recorded, not on slot
// numbers, so a changed Pool cannot hand out ids that overlap a live lease.
//
// # Write-ahead
//
// A record is committed before any host resource exists, and each resource
// should be recorded with [Store.AddResource] before it is created, so that
// after a crash every resource that may exist is named somewhere; cleanup
// must therefore tolerate a recorded resource that was never created.
// [Store.Finish] deletes the record and with it the lease; call it only after
// every recorded resource is gone.
//
// Reclaiming is not this package's decision. A record whose owner is no
// longer [Alive] belongs to a crashed cordon; the reconciler removes its
// resources and then calls Finish. The store never deletes a record on its
// own, because that would release ids whose cgroups or mounts still exist.
//
// # Durability
//
// The database runs in WAL mode with synchronous=NORMAL. A commit survives
// the death of the process that made it (the threat here is SIGKILL of
// cordon, not of the machine), and concurrent processes serialize through
// SQLite's locks with a busy timeout. Power loss or a kernel crash may roll
// back the last few commits. That is acceptable for leases: after a reboot the
// boot id differs, so every lease from the previous boot is reclaimable
// anyway, and namespaces and cgroups did not survive either. It is not a
// guarantee for resources that persist on disk (scratch directories under the
// state dir): reconciliation must also find those by name, not only through
// records.
//
// # What it must never do
//
//   - Never hand out a slot, or any host id, to two live sandboxes.
//   - Never store secrets: no credentials, tokens, environment values, policy
//     source or agent traffic. Records hold identifiers, host paths and pids,
//     which are trusted-side facts and must not be shown to the agent either.
//     The one exception is managed state (state.go): values an agent asked
//     to keep, stored as written, bounded by its scope's quota, and never
//     shown to another scope.
//   - Never open a database or state directory that another user can write:
//     whoever can edit the lease table can make two sandboxes share ids.
//
// # Liveness
//
// [Self] and [Alive] identify a process by (pid, start time, boot id), which
// survives pid reuse. They read the caller's /proc, so every cordon sharing a
// store must see the same pid namespace. Alive answers false only when the
// owner is provably gone; when it cannot tell (procfs unreadable), it says
// alive, because a wrongly reclaimed lease is a shared uid range.
package store
