// Package hostmgr is cordon's host manager: `cordon daemon`, a root
// process that owns long-lived sandboxes on this host and serves the
// cordon-host/v1 protocol (package proto) on a Unix socket.
//
// Callers are authenticated by SO_PEERCRED and authorised per operation:
// root may do everything; another user may create sandboxes (when the
// socket's group lets them connect) and act only on the sandboxes they
// own. The daemon takes no shell text and no host path from a caller:
// the workspace, --ro/--rw binds and --rootfs arrive as open descriptors
// (SCM_RIGHTS) that the caller must own, a gateway configuration arrives as bytes with its
// policy files' bytes and the secret values the caller resolved, and an
// exec's stdio arrives as descriptors — with a terminal, only those not on
// it: the exec then runs on a pty of the sandbox's own, whose master (and
// nothing else: it checks) the daemon sends back to that caller alone.
//
// Lifecycle: the daemon drives package launch (the same lifecycle as
// cordon run: one validation, one admission rule, one gateway assembly
// with tool servers) through the provider seam; it takes a
// sandbox.Resident, never a concrete provider. A daemon record is written
// before any host resource, and removed last:
//
//	create  → record (creating) → provision: lease, cgroups, binds by fd → created
//	start   → spawn the init (no parent-death signal) → evidence → admit → gateway → running
//	exec    → the sandbox's own init forks argv with the caller's stdio (or its own pty)
//	stop    → stopping → kill the tree, close the gateway, revoke approvals, release the lease → stopped
//	rm      → stop if needed → removing → delete the record and logs
//
// At start the daemon reconciles its records with the host: it adopts
// sandboxes whose init is alive (same pid and start time, in the
// sandbox's cgroups) and reopens their gateway; it removes the residue of
// every other one and reports what it cannot attribute. Drift of the
// runtime (the cordon binary), the policy or the base rootfs manifest puts
// a sandbox in DRAIN: its work continues, new starts and execs are
// refused until it is re-admitted.
//
// As a service (notify.go, health.go): it tells a service manager READY=1
// on $NOTIFY_SOCKET once its socket listens and reconciliation is done,
// and takes the variable out of its environment so no child inherits it;
// the health operation answers any caller, with counts of the caller's own
// sandboxes only unless root.
//
// Plane: root. It must never open a path a caller names, never start a
// sandbox that was not admitted from evidence (FULL_CONTROL_LAB excepted,
// with the bypass written into the record), never act for a caller on
// another user's sandbox nor tell them about one (ls, health), and never
// let a readiness notification wait on the service manager.
package hostmgr
