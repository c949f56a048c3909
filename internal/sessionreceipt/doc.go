// Package sessionreceipt signs a session's containment receipt: the
// evidence record the trusted side read when it admitted a sandbox (its
// boundaries and its in-situ set, judged from outside), as a DSSE
// envelope over an in-toto Statement (predicate type PredicateType,
// subjects the cordon binary and the configuration), signed with the
// evidence log's key (generated on first use, as the log does) and
// appended to the evidence log, so a third party holding only log.pub can
// check how a given session was contained.
//
// Plane: root (it reads the 0600 signing key and writes the store).
//
// It must never sign a record the trusted side did not collect itself,
// never sign with any key but the evidence log's, and never let a failure
// to sign or log pass silently: the caller refuses the session.
package sessionreceipt
