package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// daemonSchema holds the daemon's sandboxes (version 5): the lifecycle
// record of a daemon-owned sandbox, next to the write-ahead record of its
// host resources in sandboxes (same id). The daemon row is written first
// (state creating) and removed last.
const daemonSchema = `
CREATE TABLE IF NOT EXISTS daemon_sandboxes (
	name       TEXT    NOT NULL PRIMARY KEY,
	id         TEXT    NOT NULL UNIQUE,
	owner_uid  INTEGER NOT NULL,
	state      TEXT    NOT NULL CHECK (state IN ('creating', 'created', 'starting', 'running', 'stopping', 'stopped', 'removing')),
	profile    TEXT    NOT NULL DEFAULT 'SAFE_GUIDED',
	spec       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(spec)),
	admitted   TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(admitted)),
	drain      TEXT    NOT NULL DEFAULT '',
	init_pid   INTEGER NOT NULL DEFAULT 0,
	init_start INTEGER NOT NULL DEFAULT 0, -- uint64 as its int64 bit pattern
	level      TEXT    NOT NULL DEFAULT '',
	evidence   TEXT    NOT NULL DEFAULT 'null' CHECK (json_valid(evidence)),
	main_exit  TEXT    NOT NULL DEFAULT '',
	note       TEXT    NOT NULL DEFAULT '',
	created    INTEGER NOT NULL,
	updated    INTEGER NOT NULL
) STRICT;
-- Version 6: named volumes managed by the daemon.
CREATE TABLE IF NOT EXISTS daemon_volumes (
	name      TEXT    NOT NULL PRIMARY KEY,
	owner_uid INTEGER NOT NULL,
	created   INTEGER NOT NULL
) STRICT;
`

// Daemon sandbox states.
const (
	DCreating = "creating" // record written, host resources being created
	DCreated  = "created"  // provisioned (lease, cgroups, opened binds), not started
	DStarting = "starting" // init spawned, being admitted
	DRunning  = "running"  // admitted; execs allowed (unless draining)
	DStopping = "stopping"
	DStopped  = "stopped" // final: processes gone, gateway closed, approvals revoked
	DRemoving = "removing"
)

// ErrDaemonSandboxExists: the name is taken.
var ErrDaemonSandboxExists = errors.New("a sandbox with this name exists")

// DaemonSandbox is the daemon's record of one sandbox.
type DaemonSandbox struct {
	Name      string          `json:"name"`
	ID        string          `json:"id"`
	OwnerUID  uint32          `json:"owner_uid"`
	State     string          `json:"state"`
	Profile   string          `json:"profile"`
	Spec      json.RawMessage `json:"spec"`
	Admitted  json.RawMessage `json:"admitted"`
	Drain     string          `json:"drain,omitempty"`
	InitPid   int             `json:"init_pid,omitempty"`
	InitStart uint64          `json:"init_start,omitempty"`
	Level     string          `json:"level,omitempty"`
	Evidence  json.RawMessage `json:"evidence,omitempty"`
	MainExit  string          `json:"main_exit,omitempty"`
	Note      string          `json:"note,omitempty"`
	Created   time.Time       `json:"created"`
	Updated   time.Time       `json:"updated"`
}

const daemonCols = `name, id, owner_uid, state, profile, spec, admitted, drain, init_pid, init_start, level, evidence, main_exit, note, created, updated`

func scanDaemon(row interface{ Scan(...any) error }) (DaemonSandbox, error) {
	var d DaemonSandbox
	var spec, adm, ev string
	var start, created, updated int64
	err := row.Scan(&d.Name, &d.ID, &d.OwnerUID, &d.State, &d.Profile, &spec, &adm, &d.Drain, &d.InitPid, &start, &d.Level, &ev, &d.MainExit, &d.Note, &created, &updated)
	d.Spec, d.Admitted, d.InitStart = json.RawMessage(spec), json.RawMessage(adm), uint64(start)
	if ev != "null" {
		d.Evidence = json.RawMessage(ev)
	}
	d.Created, d.Updated = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
	return d, err
}

// CreateDaemonSandbox writes the daemon's record (state creating) before
// any host resource exists.
func (s *Store) CreateDaemonSandbox(ctx context.Context, d DaemonSandbox) error {
	now := time.Now().UnixNano()
	if len(d.Spec) == 0 {
		d.Spec = json.RawMessage("{}")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO daemon_sandboxes (name, id, owner_uid, state, profile, spec, created, updated) VALUES (?,?,?,?,?,?,?,?)`,
		d.Name, d.ID, d.OwnerUID, DCreating, d.Profile, string(d.Spec), now, now)
	if err != nil {
		if _, gerr := s.DaemonSandbox(ctx, d.Name); gerr == nil {
			return fmt.Errorf("%w: %s", ErrDaemonSandboxExists, d.Name)
		}
		return err
	}
	return nil
}

// DaemonSandbox returns the record named name (ErrNotFound if none).
func (s *Store) DaemonSandbox(ctx context.Context, name string) (DaemonSandbox, error) {
	d, err := scanDaemon(s.db.QueryRowContext(ctx, `SELECT `+daemonCols+` FROM daemon_sandboxes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return d, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return d, err
}

// DaemonSandboxes lists every record, oldest first.
func (s *Store) DaemonSandboxes(ctx context.Context) ([]DaemonSandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+daemonCols+` FROM daemon_sandboxes ORDER BY created, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DaemonSandbox
	for rows.Next() {
		d, err := scanDaemon(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DaemonUpdate changes some fields of a record; nil fields stay.
type DaemonUpdate struct {
	State, Profile, Drain, Level, MainExit, Note *string
	Admitted, Evidence                           json.RawMessage
	InitPid                                      *int
	InitStart                                    *uint64
}

// UpdateDaemonSandbox applies u to the record named name.
func (s *Store) UpdateDaemonSandbox(ctx context.Context, name string, u DaemonUpdate) error {
	set := "updated = ?"
	args := []any{time.Now().UnixNano()}
	add := func(col string, v any) {
		set += ", " + col + " = ?"
		args = append(args, v)
	}
	for _, f := range []struct {
		col string
		v   *string
	}{{"state", u.State}, {"profile", u.Profile}, {"drain", u.Drain}, {"level", u.Level}, {"main_exit", u.MainExit}, {"note", u.Note}} {
		if f.v != nil {
			add(f.col, *f.v)
		}
	}
	if u.Admitted != nil {
		add("admitted", string(u.Admitted))
	}
	if u.Evidence != nil {
		add("evidence", string(u.Evidence))
	}
	if u.InitPid != nil {
		add("init_pid", *u.InitPid)
	}
	if u.InitStart != nil {
		add("init_start", int64(*u.InitStart))
	}
	args = append(args, name)
	res, err := s.db.ExecContext(ctx, `UPDATE daemon_sandboxes SET `+set+` WHERE name = ?`, args...)
	return affectedOne(res, err, "update daemon sandbox %s", name)
}

// DeleteDaemonSandbox removes the record (the last step of rm).
func (s *Store) DeleteDaemonSandbox(ctx context.Context, name string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM daemon_sandboxes WHERE name = ?`, name)
	return err
}

// Ptr returns a pointer to v (for DaemonUpdate).
func Ptr[T any](v T) *T { return &v }

// ErrVolumeExists: the volume name is taken.
var ErrVolumeExists = errors.New("a volume with this name exists")

// Volume is a named directory the daemon manages.
type Volume struct {
	Name     string    `json:"name"`
	OwnerUID uint32    `json:"owner_uid"`
	Created  time.Time `json:"created"`
}

// CreateVolume records a volume (before its directory is made).
func (s *Store) CreateVolume(ctx context.Context, v Volume) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO daemon_volumes (name, owner_uid, created) VALUES (?,?,?)`, v.Name, v.OwnerUID, time.Now().UnixNano())
	if err != nil {
		if _, gerr := s.Volume(ctx, v.Name); gerr == nil {
			return fmt.Errorf("%w: %s", ErrVolumeExists, v.Name)
		}
	}
	return err
}

// Volume returns the volume named name (ErrNotFound if none).
func (s *Store) Volume(ctx context.Context, name string) (Volume, error) {
	var v Volume
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT name, owner_uid, created FROM daemon_volumes WHERE name = ?`, name).Scan(&v.Name, &v.OwnerUID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("%w: volume %s", ErrNotFound, name)
	}
	v.Created = time.Unix(0, created).UTC()
	return v, err
}

// Volumes lists every volume by name.
func (s *Store) Volumes(ctx context.Context) ([]Volume, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, owner_uid, created FROM daemon_volumes ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Volume
	for rows.Next() {
		var v Volume
		var created int64
		if err := rows.Scan(&v.Name, &v.OwnerUID, &created); err != nil {
			return nil, err
		}
		v.Created = time.Unix(0, created).UTC()
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteVolume removes the record (after the directory).
func (s *Store) DeleteVolume(ctx context.Context, name string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM daemon_volumes WHERE name = ?`, name)
	return err
}
