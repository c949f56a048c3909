// Package loglimit bounds the log lines an agent can cause: a broker
// writes one WARN line per refused crossing to its stderr, which is the
// run's log or the daemon's (journald), and an agent repeating a refused
// crossing must not flood it (nor, under journald's per-service rate
// limit, push out the daemon's and every other sandbox's lines). A
// Bucket admits a burst, then a steady rate, and counts what it leaves
// out so the next line logged can say so.
//
// Plane: unprivileged (the broker processes); it holds only its bucket.
//
// It must never bound receipts (the privileged side bounds those) or
// drop a line without counting it.
package loglimit
