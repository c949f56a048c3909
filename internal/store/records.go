package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

const maxIDLen = 255

const recordColumns = `id, kind, workload, owner_pid, owner_start, owner_boot,
	slot, uid, gid, size, state, resources, created`

// Begin writes the record of a new sandbox and leases it the lowest free
// slot, in one BEGIN IMMEDIATE transaction. It returns r with Lease and State
// ("provisioning") filled in and Created set (to now, if zero). The record is
// committed when Begin returns: only then may host resources be created.
func (s *Store) Begin(ctx context.Context, r Record) (Record, error) {
	return s.BeginClaim(ctx, r, nil)
}

// BeginClaim is Begin with a host-wide claim: claim is asked, in slot
// order, about each slot free in this store, and the first slot it accepts
// is leased. It lets the caller skip slots that another state directory on
// the same host holds (see linux's lease locks). A nil claim accepts all.
func (s *Store) BeginClaim(ctx context.Context, r Record, claim func(Lease) bool) (Record, error) {
	if err := checkNew(r); err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: %w", r.ID, err)
	}
	r.State = StateProvisioning
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	r.Created = time.Unix(0, r.Created.UnixNano()).UTC() // as it reads back
	if len(r.Resources) == 0 {
		r.Resources = nil
	}
	resources, err := marshalResources(r.Resources)
	if err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: %w", r.ID, err)
	}

	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE, from the DSN
	if err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: %w", r.ID, err)
	}
	defer tx.Rollback()
	slot, err := s.freeSlot(ctx, tx, r.ID, claim)
	if err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: %w", r.ID, err)
	}
	r.Lease = s.pool.lease(slot)
	_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes (`+recordColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Kind, r.Workload, r.Owner.PID, int64(r.Owner.StartTime), r.Owner.BootID,
		r.Lease.Slot, r.Lease.UID, r.Lease.GID, r.Lease.Size, r.State, resources, r.Created.UnixNano())
	if err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: insert: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return Record{}, fmt.Errorf("begin sandbox %q: commit: %w", r.ID, err)
	}
	return r, nil
}

// slotSpan is a half-open range [lo, hi) of slot numbers.
type slotSpan struct{ lo, hi uint64 }

// freeSlot returns the lowest slot of the pool whose ids overlap no recorded
// lease, and fails with ErrExists if id already has a record. Overlap is
// judged on host id ranges rather than slot numbers, so leases granted under
// a different Pool are respected too.
func (s *Store) freeSlot(ctx context.Context, tx *sql.Tx, id string, claim func(Lease) bool) (uint32, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, uid, size FROM sandboxes`)
	if err != nil {
		return 0, fmt.Errorf("read leases: %w", err)
	}
	defer rows.Close()
	base, size, end := uint64(s.pool.Base), uint64(s.pool.Size), s.pool.end()
	var used []slotSpan
	for rows.Next() {
		var other string
		var uid, n uint64
		if err := rows.Scan(&other, &uid, &n); err != nil {
			return 0, fmt.Errorf("read leases: %w", err)
		}
		if other == id {
			return 0, ErrExists
		}
		lo, hi := max(uid, base), min(uid+n, end)
		if lo >= hi {
			continue // outside this pool
		}
		used = append(used, slotSpan{(lo - base) / size, (hi - base + size - 1) / size})
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read leases: %w", err)
	}
	slices.SortFunc(used, func(a, b slotSpan) int { return compareUint64(a.lo, b.lo) })

	// Sweep the sorted spans: each gap holds free slots, offered to claim in
	// order; the union of the spans is the number of slots in use.
	var covered, inUse uint64
	free, found := uint64(0), false
	try := func(lo, hi uint64) {
		for sl := lo; sl < hi && sl < uint64(s.pool.Slots) && !found; sl++ {
			if claim == nil || claim(s.pool.lease(uint32(sl))) {
				free, found = sl, true
			}
		}
	}
	for _, sp := range used {
		if sp.lo > covered {
			try(covered, sp.lo)
		}
		if sp.hi > covered {
			inUse += sp.hi - max(sp.lo, covered)
			covered = sp.hi
		}
	}
	try(covered, uint64(s.pool.Slots))
	if !found {
		return 0, &ExhaustedError{InUse: uint32(inUse), Slots: s.pool.Slots}
	}
	return uint32(free), nil
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AddResource records a host resource of sandbox id. Record it before
// creating it; adding a resource already recorded is a no-op, so a retried
// step does not duplicate it.
func (s *Store) AddResource(ctx context.Context, id, resource string) error {
	if resource == "" {
		return fmt.Errorf("add resource to sandbox %q: empty resource", id)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes
		SET resources = json_insert(resources, '$[#]', ?1)
		WHERE id = ?2 AND NOT EXISTS (SELECT 1 FROM json_each(sandboxes.resources) WHERE value = ?1)`,
		resource, id)
	if err != nil {
		return fmt.Errorf("add resource to sandbox %q: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("add resource to sandbox %q: %w", id, err)
	} else if n == 1 {
		return nil
	}
	// Nothing changed: either no such record, or the resource was already
	// there.
	var one int
	err = s.db.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("add resource to sandbox %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("add resource to sandbox %q: %w", id, err)
	}
	return nil
}

// SetState moves sandbox id to state.
func (s *Store) SetState(ctx context.Context, id, state string) error {
	if !validState(state) {
		return fmt.Errorf("set state of sandbox %q: unknown state %q", id, state)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = ? WHERE id = ?`, state, id)
	return affectedOne(res, err, "set state of sandbox %q", id)
}

// Finish deletes the record of sandbox id, releasing its lease. Call it only
// once every recorded resource has been removed.
func (s *Store) Finish(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	return affectedOne(res, err, "finish sandbox %q", id)
}

func affectedOne(res sql.Result, err error, format, id string) error {
	if err != nil {
		return fmt.Errorf(format+": %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf(format+": %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf(format+": %w", id, ErrNotFound)
	}
	return nil
}

// List returns every record, oldest first.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+recordColumns+` FROM sandboxes ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// Get returns the record of sandbox id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM sandboxes WHERE id = ?`, id)
	r, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, fmt.Errorf("get sandbox %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("get sandbox %q: %w", id, err)
	}
	return r, nil
}

func scanRecord(row interface{ Scan(...any) error }) (Record, error) {
	var (
		r         Record
		start     int64
		resources string
		created   int64
	)
	err := row.Scan(&r.ID, &r.Kind, &r.Workload, &r.Owner.PID, &start, &r.Owner.BootID,
		&r.Lease.Slot, &r.Lease.UID, &r.Lease.GID, &r.Lease.Size, &r.State, &resources, &created)
	if err != nil {
		return Record{}, err
	}
	r.Owner.StartTime = uint64(start)
	r.Created = time.Unix(0, created).UTC()
	if err := json.Unmarshal([]byte(resources), &r.Resources); err != nil {
		return Record{}, fmt.Errorf("sandbox %q: decode resources: %w", r.ID, err)
	}
	if len(r.Resources) == 0 {
		r.Resources = nil
	}
	return r, nil
}

func marshalResources(res []string) (string, error) {
	if res == nil {
		return "[]", nil
	}
	for _, x := range res {
		if x == "" {
			return "", errors.New("empty resource")
		}
	}
	b, err := json.Marshal(res)
	return string(b), err
}

// checkNew validates a record passed to Begin.
func checkNew(r Record) error {
	switch {
	case r.ID == "":
		return errors.New("empty sandbox id")
	case len(r.ID) > maxIDLen:
		return fmt.Errorf("sandbox id longer than %d bytes", maxIDLen)
	case !utf8.ValidString(r.ID):
		return errors.New("sandbox id is not valid UTF-8")
	case r.Kind != KindRun && r.Kind != KindDaemon:
		return fmt.Errorf("unknown kind %q", r.Kind)
	case r.Owner.PID <= 0:
		return fmt.Errorf("owner pid %d is not a process", r.Owner.PID)
	case r.Owner.BootID == "":
		return errors.New("owner has no boot id")
	}
	return nil
}

func validState(s string) bool {
	return s == StateProvisioning || s == StateRunning || s == StateStopping
}
