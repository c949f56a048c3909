// Package failure is cordon's closed failure taxonomy: the stable kind
// names every layer fails with, and the exit statuses the command line maps
// them to. It is a leaf (it imports nothing of cordon's), so the provider
// seam, the lifecycle, the gateway, the daemon and its protocol all fail in
// the same words and a kind survives every hop — the host protocol carries
// it beside its own transport-level kind (see hostmgr/proto.Error).
//
// Plane: any (root, unprivileged gateway, CLI). It must never grow
// a kind that callers cannot act on differently, and never rename one: users,
// scripts and evidence records match on the names.
package failure
