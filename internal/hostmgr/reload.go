package hostmgr

import (
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/policy"
)

// Host policy reload: the host policy directory is read at start, on
// Reload (the daemon's SIGHUP) and at every drift scan. A set that does
// not load — unreadable, a parse or schema error, a duplicate id — is
// refused as a whole and the set in force stays: a bad edit never leaves
// the host with fewer forbids than before, nor with a set every gateway
// sandbox would fail to plan with. Sandboxes created after a reload get
// the new set; running ones drift to DRAIN (see drift.go).

// loadHostPolicy reads and checks the host policy directory: every
// *.cedar file, loaded together with the built-in default as a sandbox
// without its own policy would get it.
func (d *Daemon) loadHostPolicy() ([]PolicySource, error) {
	hp, err := readPolicyDir(d.o.PolicyDir)
	if err != nil {
		return nil, failure.Failf(failure.KindUsage, "daemon", "host policy directory %s: %v", d.o.PolicyDir, err)
	}
	if len(hp) == 0 {
		return hp, nil
	}
	if _, err := policy.LoadSources(append([]policy.Source{policy.DefaultSource()}, policySources(hp)...)...); err != nil {
		return nil, failure.Failf(failure.KindUsage, "daemon", "host policy directory %s: %v", d.o.PolicyDir, err)
	}
	return hp, nil
}

// setHostPolicy puts hp in force and reports whether it differs from the
// set it replaces.
func (d *Daemon) setHostPolicy(hp []PolicySource) bool {
	now := policySetDigest(nil, hp)
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := policySetDigest(nil, d.hostPolicy) != now
	d.hostPolicy, d.refusedPolicy, d.refusedReload = hp, "", ""
	return changed
}

// Reload reads again what can change under a running daemon — the host
// policy directory — and logs what is in force. On error the previous set
// stays in force and the error says why.
func (d *Daemon) Reload() error {
	hp, err := d.loadHostPolicy()
	if err != nil {
		d.mu.Lock()
		d.refusedReload = err.Error() // health reports it until a set loads
		d.mu.Unlock()
		d.log.Error("reload: host policy refused; the previous set stays in force", "dir", d.o.PolicyDir, "in_force", short(policySetDigest(nil, d.hostPolicies())), "err", err)
		return err
	}
	d.setHostPolicy(hp)
	d.log.Info("reload: host policy in force", "dir", d.o.PolicyDir, "files", len(hp), "digest", short(policySetDigest(nil, hp)))
	return nil
}

// refreshPolicy is the drift scan's reload: quiet unless the set changed,
// and a refused set is logged once per content, not once per scan.
func (d *Daemon) refreshPolicy() {
	hp, err := d.loadHostPolicy()
	if err == nil {
		if d.setHostPolicy(hp) {
			d.log.Info("host policy directory changed: new set in force", "dir", d.o.PolicyDir, "files", len(hp), "digest", short(policySetDigest(nil, hp)))
		}
		return
	}
	d.mu.Lock()
	repeat := d.refusedPolicy == err.Error()
	d.refusedPolicy = err.Error()
	d.mu.Unlock()
	if !repeat {
		d.log.Error("host policy refused; the previous set stays in force", "dir", d.o.PolicyDir, "err", err)
	}
}
