package hostmgr

import (
	"context"
	"os"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// The health operation: is this daemon serving well, and with what. Any
// caller who may connect may ask. It says nothing about another user's
// sandboxes to a non-root caller: the counts are of the caller's own
// (Scope "own"); root sees the whole host (Scope "all"). A refused host
// policy set's error (it may quote policy text) goes to root only.

// Health is the health operation's result.
type Health struct {
	// Healthy is false when a check below failed (Problems says which).
	Healthy  bool     `json:"healthy"`
	Problems []string `json:"problems,omitempty"`
	// Version is cordon's version; Protocol the one the daemon speaks.
	Version  string `json:"version"`
	Protocol string `json:"protocol"`
	PID      int    `json:"pid"`
	// Started is when the daemon started; Uptime how long ago, in
	// seconds.
	Started time.Time `json:"started"`
	Uptime  float64   `json:"uptime_seconds"`
	Store   Check     `json:"store"`
	Policy  PolicyIn  `json:"policy"`
	// Scope is "all" (root: every sandbox on the host) or "own" (the
	// caller's sandboxes only); Sandboxes counts them by state, Draining
	// those in DRAIN.
	Scope     string         `json:"scope"`
	Sandboxes map[string]int `json:"sandboxes"`
	Draining  int            `json:"draining"`
	Drift     DriftLoop      `json:"drift"`
}

// Check is one health check.
type Check struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// PolicyIn is the host policy set in force.
type PolicyIn struct {
	Dir    string `json:"dir,omitempty"`
	Digest string `json:"digest"`
	Files  int    `json:"files"`
	// Refused says the last reload (SIGHUP or drift scan) read a set that
	// did not load: the set above stays in force. RefusedError (root
	// only) says why.
	Refused      bool   `json:"refused,omitempty"`
	RefusedError string `json:"refused_error,omitempty"`
}

// DriftLoop is the drift scan's schedule and last run.
type DriftLoop struct {
	Every   float64    `json:"every_seconds"`
	LastRun *time.Time `json:"last_run,omitempty"`
	// Stale: no scan finished in three intervals (plus a minute) since
	// start or the last one.
	Stale bool `json:"stale,omitempty"`
}

func (d *Daemon) opHealth(ctx context.Context, c *call) (any, error) {
	if err := c.args(&struct{}{}); err != nil {
		return nil, err
	}
	return d.health(ctx, c.peer.UID, time.Now()), nil
}

// health computes the report for a caller uid at now.
func (d *Daemon) health(ctx context.Context, uid uint32, now time.Time) Health {
	h := Health{Healthy: true, Version: d.o.BuildVersion, Protocol: proto.Version, PID: os.Getpid(),
		Started: d.started.UTC(), Uptime: now.Sub(d.started).Seconds(), Scope: "own", Sandboxes: map[string]int{}}
	if h.Version == "" {
		h.Version = d.o.Version
	}
	if uid == 0 {
		h.Scope = "all"
	}
	problem := func(p string) { h.Healthy = false; h.Problems = append(h.Problems, p) }

	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		h.Store = Check{Error: "the store cannot be read"}
		if uid == 0 {
			h.Store.Error += ": " + err.Error()
		}
		problem("store")
	} else {
		h.Store.OK = true
		for _, r := range recs {
			if uid != 0 && r.OwnerUID != uid {
				continue
			}
			h.Sandboxes[r.State]++
			if r.Drain != "" {
				h.Draining++
			}
		}
	}

	d.mu.Lock()
	hp, refused := d.hostPolicy, d.refusedPolicy
	if refused == "" {
		refused = d.refusedReload
	}
	d.mu.Unlock()
	h.Policy = PolicyIn{Dir: d.o.PolicyDir, Digest: policySetDigest(nil, hp), Files: len(hp), Refused: refused != ""}
	if refused != "" {
		if uid == 0 {
			h.Policy.RefusedError = refused
		}
		problem("host policy reload refused (the previous set stays in force)")
	}

	every := d.o.DriftEvery
	h.Drift.Every = every.Seconds()
	last := d.started
	if n := d.lastDrift.Load(); n != 0 {
		t := time.Unix(0, n).UTC()
		h.Drift.LastRun, last = &t, t
	}
	if now.Sub(last) > 3*every+time.Minute {
		h.Drift.Stale = true
		problem("drift scan stale")
	}
	return h
}
