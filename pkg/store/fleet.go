package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Queries of a fleet: several gpuvmds sharing one PostgreSQL database
// (pkg/fleet). On SQLite (one server) they answer as a fleet of one would.

// ErrNotPostgres: the query needs PostgreSQL.
var ErrNotPostgres = errors.New("needs PostgreSQL")

// Notify sends one notification per payload on a PostgreSQL channel
// (pg_notify), in one statement; listeners get them when it commits. On
// SQLite it does nothing: a single server wakes its own workers.
func (s *Store) Notify(ctx context.Context, channel string, payloads []string) error {
	if s.driver != DriverPostgres || len(payloads) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(payloads))
	q := "SELECT "
	for i, p := range payloads {
		if i > 0 {
			q += ", "
		}
		q += "pg_notify(?, ?)"
		args = append(args, channel, p)
	}
	err := s.db.WithContext(ctx).Exec(q, args...).Error
	return wrap(err, nil, "notify %s", channel)
}

// Scope names what the database a store works in is for a fleet: the
// database and the schema (search_path) its tables are in. Two fleets in
// one PostgreSQL (tests, staging beside production) differ by it.
func (s *Store) Scope(ctx context.Context) (database, schema string, err error) {
	if s.driver != DriverPostgres {
		return "", "", fmt.Errorf("fleet scope: %w", ErrNotPostgres)
	}
	row := struct {
		Database string `gorm:"column:db"`
		Schema   string `gorm:"column:sch"`
	}{}
	err = s.db.WithContext(ctx).Raw("SELECT current_database() AS db, current_schema() AS sch").Scan(&row).Error
	if err != nil {
		return "", "", wrap(err, nil, "read the database's name and schema")
	}
	return row.Database, row.Schema, nil
}

// DatabaseNow is the database server's clock (SQLite: this machine's).
func (s *Store) DatabaseNow(ctx context.Context) (time.Time, error) {
	if s.driver != DriverPostgres {
		return time.Now(), nil
	}
	var t time.Time
	if err := s.db.WithContext(ctx).Raw("SELECT now()").Scan(&t).Error; err != nil {
		return time.Time{}, wrap(err, nil, "read the database's clock")
	}
	return t, nil
}

// AdvisoryLockHolder is the application_name of the session that holds the
// two-part advisory lock (class, object), "" when none does. On SQLite it
// is ErrNotPostgres.
func (s *Store) AdvisoryLockHolder(ctx context.Context, class, object int32) (string, error) {
	if s.driver != DriverPostgres {
		return "", fmt.Errorf("advisory lock holder: %w", ErrNotPostgres)
	}
	var names []string
	err := s.db.WithContext(ctx).Raw(`SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid = ?::int::oid AND l.objid = ?::int::oid AND l.objsubid = 2 AND l.granted`, class, object).
		Scan(&names).Error
	if err != nil {
		return "", wrap(err, nil, "read the holder of advisory lock %d/%d", class, object)
	}
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

// SetHostDraining drains a host (state draining: it takes no new VMs, what
// runs on it stays) or ends its drain (state up; a host whose heartbeat
// stopped is marked down again by the next check). It returns the host as
// written; an unknown host is ErrNotFound.
func (s *Store) SetHostDraining(ctx context.Context, name string, draining bool) (*Host, error) {
	var h Host
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.db.Where("name = ?", name).Take(&h).Error; err != nil {
			return err
		}
		state := HostUp
		if draining {
			state = HostDraining
		}
		if h.State == state || (!draining && h.State == HostDown) {
			return nil
		}
		h.State, h.UpdatedAt = state, tx.clock()
		tx.touchHosts()
		return tx.db.Model(&Host{}).Where("name = ?", name).
			Updates(map[string]any{"state": h.State, "updated_at": h.UpdatedAt}).Error
	})
	if err != nil {
		return nil, wrap(err, nil, "set the drain of host %q", name)
	}
	return &h, nil
}
