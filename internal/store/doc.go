// Package store is cordon's embedded persistence: one SQLite database,
// stateDir/cordon.db, opened through the pure-Go modernc.org/sqlite driver
// (no cgo). It holds everything the trusted side must keep across a
// crashed or restarted cordon: the sandboxes' write-ahead records and
// UID/GID leases, the daemon's records, budgets and reservations,
// receipts and the evidence log they are the leaves of, approvals, tool
// calls, and the agents' managed state.
//
// Plane: root. Only the trusted side opens it — `cordon run`, the daemon,
// the operator's commands — never a process that parses agent bytes: the
// gateway process reaches it only through the root side, which checks
// every request and stamps the sandbox's identity on it.
//
// # Slices
//
// [Store] is one type, but no consumer uses all of it. The methods fall
// into slices, each in its own file; a consumer declares the slice it uses
// as a small interface in its own package (the consumer declares the
// interface: see approval.ConsoleStore and evlog.LogStore, ProofReader and
// VerifyReader), so what each caller may touch is written down there.
//
//   - Leases and write-ahead records (records.go; the pool and its checks
//     against the host's id databases in subid.go; Self and Alive in
//     owner_linux.go): Begin, BeginClaim, AddResource, SetState, Finish,
//     List, Get. Used by the Linux provider (internal/sandbox/linux:
//     provision, release, reclaiming a dead owner's sandbox) and by the
//     daemon's reconciler (internal/hostmgr: Get, List).
//   - Daemon records and volumes (daemon.go): CreateDaemonSandbox,
//     DaemonSandbox, DaemonSandboxes, UpdateDaemonSandbox,
//     DeleteDaemonSandbox, CreateVolume, Volume, Volumes, DeleteVolume.
//     Used by the daemon (internal/hostmgr) only.
//   - Budgets and reservations (budgets.go): Reserve, Settle, SettleRecord,
//     BudgetState, DropReservations, OverBudget, and Batch, whose [Tx]
//     (Reserve, SettleRecord, Record, BudgetState) group-commits many
//     crossings in one transaction. Used by the gateway's root side (model
//     and egress crossings, policy's context.budget, the reservations of
//     approved crossings), by `cordon policy explain` (OverBudget) and by
//     bench/gateway/authority.
//   - Receipts and the evidence log's leaves (budgets.go: RecordReceipt,
//     Receipts; evlog.go: LogSize, LogLeaf, LogLeaves, LogIndex, LogHashes,
//     LogHashReader, LogStats, SaveCheckpoint, Checkpoints,
//     LatestCheckpoint). Receipts are written by the gateway's root side,
//     and by every operation below that records one; they are read by
//     `cordon receipts` and the approval console. The leaves, stored hashes
//     and checkpoints are read, and checkpoints saved, by internal/evlog,
//     which signs and verifies them; the store only keeps them.
//   - Lost crossings (lost.go, release.go): ChargeReservations,
//     CountReceipts, ReleaseCrossings. Used by the gateway's root side when
//     a gateway ends (and to bound a sandbox's receipts), by the daemon's
//     stop and by the provider's reclaim of a crashed owner's sandbox.
//   - Approvals (approvals.go): RequestApproval, RequestApprovalLimited,
//     ConsumeApproval, HoldApproval, SetApprovalReceipt, DecideApproval,
//     RevokeApproval, RevokeApprovals, Approval, Approvals,
//     PendingApprovals. Requested, consumed and held by the gateway's root
//     side (tool calls, and model and egress crossings a policy marks
//     @approval); decided and revoked by `cordon approvals` and the console
//     (internal/approval); revoked with their sandbox by ReleaseCrossings.
//   - Tool calls (toolcalls.go): LookupToolCall, BeginToolCall,
//     EndToolCall, QuarantineStarted, ToolCalls, ReconcileToolCall. Begun
//     and ended by the gateway's root side (replay and quarantine); listed
//     and reconciled by `cordon calls`; quarantined by ReleaseCrossings.
//   - Managed state (state.go): GetState, PutState, DeleteState,
//     ListState, ResetState, RetainState, PurgeExpiredState, StateScopes.
//     Served by the gateway's root side for the state broker; the run
//     applies the workload's retention before the program starts
//     (RetainState); `cordon state` lists, exports, resets and purges.
//   - Attestations (attest.go): RecordAttestation, AttestationByDigest,
//     Attestations. A signed envelope (a conformance record, a session's
//     containment receipt) stored beside the digest-only receipt (broker
//     "evidence") that puts it in the evidence log, in one transaction;
//     written by internal/attest (Append), read by `cordon conformance
//     verify --log`.
//
// Open and Close are in store.go, with the records' and the budgets'
// tables; every other slice's tables are defined beside its code
// (logSchema, approvalSchema, toolCallSchema, daemonSchema, stateSchema,
// attestSchema).
//
// # Transactions
//
//   - One connection per Store, and every transaction is BEGIN IMMEDIATE
//     (the DSN's _txlock): a transaction holds the write lock from its
//     first statement, so a read-then-write never races another writer.
//     Processes sharing the database serialize through SQLite's file
//     locks, waiting at most busyTimeout (5 s).
//   - Each exported operation is one transaction: it commits whole or not
//     at all, and no *sql.Tx leaves the package. The one way to commit
//     several operations together is Batch: each of its Tx's operations
//     runs under its own savepoint (one that fails leaves the others
//     intact), and a failed commit fails them all.
//   - A receipt is inserted with its leaf of the evidence log and the tree
//     hashes the leaf completes, in the same transaction (recordIn,
//     appendLeaf); and an operation that records a receipt — SettleRecord,
//     the state operations, EndToolCall, ChargeReservations — commits it
//     with its effect. No crossing takes effect without its receipt, and no
//     receipt exists outside the log.
//   - Receipts, leaves, stored hashes and checkpoints are append-only:
//     triggers refuse UPDATE and DELETE. They stop bugs, not someone who
//     can write the file; the signed checkpoints are what catch that.
//   - A transaction that cannot begin or commit, and a failed read or
//     write on a crossing's path, is an error wrapping
//     crossing.ErrUnavailable: the caller denies the crossing, and there is
//     no fallback.
//   - Only the sandbox that holds a reservation can settle it, and every
//     managed-state query names the whole scope (tenant, workload,
//     purpose), so another scope's entry cannot be addressed at all.
//   - The schema version is PRAGMA user_version. Open creates or upgrades
//     the schema in one transaction (every statement is idempotent) and
//     refuses a database written by a newer cordon (ErrSchemaVersion).
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
// [Store.BeginClaim] also asks the caller about each free slot, so the
// Linux provider can skip slots another state directory on the host holds.
//
// # Write-ahead
//
// A record is committed before any host resource exists, and each resource
// should be recorded with [Store.AddResource] before it is created, so that
// after a crash every resource that may exist is named somewhere; cleanup
// must therefore tolerate a recorded resource that was never created.
// (Today the Linux provider names its cgroups, and a daemon sandbox's exec
// socket, in the record it passes to BeginClaim, and finds the rest by
// name; nothing outside the tests calls AddResource.) [Store.Finish] deletes the record and with it the lease;
// call it only after every recorded resource is gone. A daemon sandbox
// also has a daemon record (daemon.go, same id), written before the
// write-ahead record and removed after it.
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
// records. Nor is it one for receipts: the last few commits, receipts and
// their leaves included, may be lost with the machine.
//
// # Liveness
//
// [Self] and [Alive] identify a process by (pid, start time, boot id), which
// survives pid reuse. They read the caller's /proc, so every cordon sharing a
// store must see the same pid namespace. Alive answers false only when the
// owner is provably gone; when it cannot tell (procfs unreadable), it says
// alive, because a wrongly reclaimed lease is a shared uid range.
//
// # What it must never do
//
//   - Never be opened by an unprivileged process or from a state directory
//     another user can write: Open refuses a directory or database not
//     owned by the caller or writable by group or others, because whoever
//     can edit the lease table can make two sandboxes share ids, and
//     whoever can edit receipts can rewrite what happened. The gateway
//     process that parses agent traffic must never import this package.
//   - Never hand out a slot, or any host id, to two live sandboxes.
//   - Never delete a write-ahead record on its own (see Reclaiming above).
//   - Never commit a crossing's effect without its receipt, or a receipt
//     without its leaf; never change or delete a receipt, a leaf, a stored
//     hash or a checkpoint.
//   - Never let an approval authorize twice (a consumed approval never
//     matches again) or outlive its sandbox (ReleaseCrossings revokes it),
//     and never leave a reservation whose outcome is unknown uncharged.
//   - Never answer a query for one state scope with another scope's entry.
//   - Never store secrets: no credentials, tokens, environment values, policy
//     source or agent traffic. Records hold identifiers, host paths and pids,
//     which are trusted-side facts and must not be shown to the agent either.
//     The one exception is managed state (state.go): values an agent asked
//     to keep, stored as written, bounded by its scope's quota, and never
//     shown to another scope.
package store
