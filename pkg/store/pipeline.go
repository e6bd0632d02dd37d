package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	gormlogger "gorm.io/gorm/logger"
	"gorm.io/gorm/schema"
)

// A pipelined transaction is a transaction that only inserts rows, sent to
// PostgreSQL in one round trip (pgx's batch: every INSERT then one Sync, one
// implicit transaction that commits at the Sync, all or nothing) instead of
// one round trip for BEGIN, one per INSERT and one for COMMIT. On a busy
// fleet each round trip of a transaction kept its backend idle in the
// transaction until its gpuvmd got a core again: a create was six (issue
// #26). On SQLite, in this process, it is an ordinary transaction.

// errPipelined is what a statement other than insert answers inside a
// pipelined transaction: it would run outside the transaction.
var errPipelined = errors.New("store: only inserts in a pipelined transaction (a read or an update needs Tx)")

// pipeline is the inserts of a pipelined transaction, queued until it is
// sent.
type pipeline struct {
	ctx  context.Context
	db   *gorm.DB // the store's own, for rendering and sending
	rows []pipedRow
}

// pipedRow is one queued INSERT.
type pipedRow struct {
	sql  string
	vars []any
	// returning are the fields the INSERT returns (its RETURNING clause:
	// an event's or an audit entry's ID), set on value when sent.
	returning []*schema.Field
	value     reflect.Value
	wrap      func(error) error
}

// pipelined runs fn as Tx does, with every insert it makes through
// tx.insert queued and sent at its end in one round trip (PostgreSQL). fn
// may only insert: another statement fails (errPipelined). What Tx does at a
// commit (the events' watchers, the quota and hosts generations) is done
// after the send succeeds.
func (s *Store) pipelined(ctx context.Context, fn func(tx *Store) error) error {
	if s.driver != DriverPostgres || s.inTx {
		return s.Tx(ctx, fn)
	}
	var m commitMarks
	p := &pipeline{ctx: ctx, db: s.db}
	c := *s
	c.db = s.db.Session(&gorm.Session{NewDB: true, Context: ctx})
	_ = c.db.AddError(errPipelined)
	c.inTx, c.pipe = true, p
	if err := fn(m.bind(&c)); err != nil {
		return err
	}
	if err := p.send(); err != nil {
		return err
	}
	s.committed(&m)
	return nil
}

// insert inserts the row v (a pointer to a model), as gorm's Create does,
// filling what the database returns (an ID from a sequence). In a pipelined
// transaction the INSERT is queued, and its error (wrapped by wrapErr, when
// not nil) comes when the transaction is sent; otherwise it runs now.
func (s *Store) insert(v any, wrapErr func(error) error) error {
	if wrapErr == nil {
		wrapErr = func(err error) error { return err }
	}
	if s.pipe == nil {
		return wrapErr(s.db.Create(v).Error)
	}
	return s.pipe.queue(v, wrapErr)
}

// queue renders gorm's INSERT of v without running it and queues it.
func (p *pipeline) queue(v any, wrapErr func(error) error) error {
	// Rendered quietly: the batch is logged once, when it is sent.
	dry := &gorm.Session{DryRun: true, NewDB: true, Context: p.ctx, Logger: gormlogger.Discard}
	stmt := p.db.Session(dry).Create(v).Statement
	if stmt.Error != nil {
		return wrapErr(stmt.Error)
	}
	row := pipedRow{sql: stmt.SQL.String(), vars: stmt.Vars, value: stmt.ReflectValue, wrap: wrapErr}
	if c, ok := stmt.Clauses["RETURNING"]; ok {
		ret, _ := c.Expression.(clause.Returning)
		for _, col := range ret.Columns {
			f := stmt.Schema.LookUpField(col.Name)
			if f == nil {
				return wrapErr(fmt.Errorf("queue an insert into %s: it returns %q, not a field", stmt.Table, col.Name))
			}
			row.returning = append(row.returning, f)
		}
	}
	p.rows = append(p.rows, row)
	return nil
}

// send sends the queued inserts in one batch, on one connection of the
// pool, and reads their answers in order: the first that failed is the
// error (the database rolled the whole batch back).
func (p *pipeline) send() error {
	ctx := p.ctx
	if len(p.rows) == 0 {
		return nil
	}
	begin := time.Now()
	var failed error // the database's, for the log (a duplicate key is expected)
	wrapped := p.connect(ctx, func(c *pgx.Conn) error {
		var err error
		failed, err = p.sendOn(ctx, c)
		return err
	})
	if failed == nil {
		failed = wrapped
	}
	p.db.Logger.Trace(ctx, begin, func() (string, int64) {
		sqls := make([]string, len(p.rows))
		for i, r := range p.rows {
			sqls[i] = r.sql
		}
		return "pipelined: " + strings.Join(sqls, "; "), int64(len(p.rows))
	}, failed)
	return wrapped
}

// connect runs fn on a connection of the store's pool.
func (p *pipeline) connect(ctx context.Context, fn func(c *pgx.Conn) error) error {
	pool, err := p.db.DB()
	if err != nil {
		return fmt.Errorf("send a pipelined transaction: %w", err)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return fmt.Errorf("send a pipelined transaction: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("send a pipelined transaction: the driver's connection is a %T, not pgx's", dc)
		}
		return fn(sc.Conn())
	})
}

// sendOn sends the batch on c and reads every answer. It gives the
// database's error as gorm gives it, and that error as the failed insert
// describes it.
func (p *pipeline) sendOn(ctx context.Context, c *pgx.Conn) (failed, wrapped error) {
	b := &pgx.Batch{}
	for _, r := range p.rows {
		b.Queue(r.sql, r.vars...)
	}
	br := c.SendBatch(ctx, b)
	for _, r := range p.rows {
		if err := p.read(br, r); err != nil {
			failed = p.translate(err)
			wrapped = r.wrap(failed)
			break
		}
	}
	if err := br.Close(); err != nil && failed == nil {
		failed = p.translate(err)
		wrapped = fmt.Errorf("send a pipelined transaction: %w", failed)
	}
	return failed, wrapped
}

// read reads one INSERT's answer, setting what it returned on its row.
func (p *pipeline) read(br pgx.BatchResults, r pipedRow) error {
	if len(r.returning) == 0 {
		_, err := br.Exec()
		return err
	}
	dest := make([]any, len(r.returning))
	for i, f := range r.returning {
		dest[i] = reflect.New(f.FieldType).Interface()
	}
	if err := br.QueryRow().Scan(dest...); err != nil {
		return err
	}
	for i, f := range r.returning {
		if err := f.Set(p.ctx, r.value, reflect.ValueOf(dest[i]).Elem().Interface()); err != nil {
			return fmt.Errorf("set %s: %w", f.Name, err)
		}
	}
	return nil
}

// translate turns the driver's error into gorm's (a duplicate key, a
// missing parent), as gorm does for the statements it runs.
func (p *pipeline) translate(err error) error {
	if t, ok := p.db.Dialector.(gorm.ErrorTranslator); ok {
		return t.Translate(err)
	}
	return err
}

// withContext is s with its statements bound to ctx.
func (s *Store) withContext(ctx context.Context) *Store {
	c := *s
	c.db = s.db.WithContext(ctx)
	return &c
}
