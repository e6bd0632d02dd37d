package cluster

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats are PostgreSQL's cumulative statistics of a fleet's database and
// schema at one moment: the database's transactions and rows (every
// schema of the database: give a fleet a database of its own for these to
// be the fleet's alone), each table of the schema's scans and rows, and
// the connections open to the database by application_name.
type Stats struct {
	At          time.Time
	Xacts       float64 // xact_commit + xact_rollback
	TupReturned float64 // rows read by sequential scans and returned by index scans
	TupFetched  float64 // rows fetched by index scans
	Tables      map[string]TableStats
	Conns       map[string]int // open connections to the database, by application_name
}

// TableStats are one table's counters (pg_stat_user_tables).
type TableStats struct {
	SeqScan, SeqRead, IdxScan, IdxFetch, Writes float64
}

// ReadStats reads the statistics through a connection of its own to dsn
// (whose search_path names the fleet's schema).
func ReadStats(ctx context.Context, dsn string) (Stats, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return Stats{}, fmt.Errorf("cluster: database statistics: %w", err)
	}
	defer conn.Close(context.Background())
	s := Stats{At: time.Now(), Tables: map[string]TableStats{}, Conns: map[string]int{}}
	err = conn.QueryRow(ctx, `SELECT (xact_commit + xact_rollback)::float8, tup_returned::float8, tup_fetched::float8
FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.Xacts, &s.TupReturned, &s.TupFetched)
	if err != nil {
		return Stats{}, fmt.Errorf("cluster: pg_stat_database: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT relname, seq_scan::float8, seq_tup_read::float8, COALESCE(idx_scan, 0)::float8,
	COALESCE(idx_tup_fetch, 0)::float8, (n_tup_ins + n_tup_upd + n_tup_del)::float8
FROM pg_stat_user_tables WHERE schemaname = current_schema()`)
	if err != nil {
		return Stats{}, fmt.Errorf("cluster: pg_stat_user_tables: %w", err)
	}
	for rows.Next() {
		var name string
		var t TableStats
		if err := rows.Scan(&name, &t.SeqScan, &t.SeqRead, &t.IdxScan, &t.IdxFetch, &t.Writes); err != nil {
			return Stats{}, fmt.Errorf("cluster: pg_stat_user_tables: %w", err)
		}
		s.Tables[name] = t
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("cluster: pg_stat_user_tables: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT application_name, count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`)
	if err != nil {
		return Stats{}, fmt.Errorf("cluster: pg_stat_activity: %w", err)
	}
	for rows.Next() {
		var app string
		var n int
		if err := rows.Scan(&app, &n); err != nil {
			return Stats{}, fmt.Errorf("cluster: pg_stat_activity: %w", err)
		}
		s.Conns[app] = n
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("cluster: pg_stat_activity: %w", err)
	}
	return s, nil
}

// Load is what the database saw between two Stats, a second.
type Load struct {
	Window time.Duration
	// Database-wide (pg_stat_database): transactions (a statement outside
	// a transaction is one) and rows read.
	Xacts, RowsReturned, RowsFetched float64
	// The schema's tables together: scans (sequential and index), rows read
	// by sequential scans, rows fetched through indexes, rows written.
	Scans, SeqScans, SeqRows, IdxRows, Writes float64
	Tables                                    []TableLoad // busiest first
	Conns                                     map[string]int
}

// TableLoad is one table's share of a Load, a second.
type TableLoad struct {
	Name                                         string
	SeqScans, SeqRows, IdxScans, IdxRows, Writes float64
}

// Diff is the load from a to b, a second. The statistics reader's own
// transactions (one each) are left out.
func Diff(a, b Stats) Load {
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 {
		secs = 1
	}
	l := Load{Window: b.At.Sub(a.At), Xacts: (b.Xacts - a.Xacts - 1) / secs,
		RowsReturned: (b.TupReturned - a.TupReturned) / secs, RowsFetched: (b.TupFetched - a.TupFetched) / secs,
		Conns: b.Conns}
	for name, t1 := range b.Tables {
		t0 := a.Tables[name]
		t := TableLoad{Name: name, SeqScans: (t1.SeqScan - t0.SeqScan) / secs, SeqRows: (t1.SeqRead - t0.SeqRead) / secs,
			IdxScans: (t1.IdxScan - t0.IdxScan) / secs, IdxRows: (t1.IdxFetch - t0.IdxFetch) / secs, Writes: (t1.Writes - t0.Writes) / secs}
		l.Scans += t.SeqScans + t.IdxScans
		l.SeqScans += t.SeqScans
		l.SeqRows += t.SeqRows
		l.IdxRows += t.IdxRows
		l.Writes += t.Writes
		if t.SeqScans+t.IdxScans+t.Writes > 0 {
			l.Tables = append(l.Tables, t)
		}
	}
	slices.SortFunc(l.Tables, func(x, y TableLoad) int {
		if c := cmpDesc(x.SeqRows+x.IdxRows, y.SeqRows+y.IdxRows); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return l
}

func cmpDesc(x, y float64) int {
	switch {
	case x > y:
		return -1
	case x < y:
		return 1
	}
	return 0
}

// String is the load in one line.
func (l Load) String() string {
	return fmt.Sprintf("%.1f transactions/s, %.0f rows read/s (%.0f returned + %.0f fetched); tables: %.1f scans/s (%.2f sequential, %.0f rows), %.0f index rows/s, %.1f row writes/s",
		l.Xacts, l.RowsReturned+l.RowsFetched, l.RowsReturned, l.RowsFetched, l.Scans, l.SeqScans, l.SeqRows, l.IdxRows, l.Writes)
}

// Print writes the load and its busiest tables (top of them; 0 all), one
// a line, each line prefixed by indent.
func (l Load) Print(w io.Writer, indent string, top int) {
	fmt.Fprintf(w, "%s%s (over %v)\n", indent, l, l.Window.Round(100*time.Millisecond))
	if len(l.Conns) > 0 {
		apps := make([]string, 0, len(l.Conns))
		for app, n := range l.Conns {
			apps = append(apps, fmt.Sprintf("%s %d", orNone(app), n))
		}
		slices.Sort(apps)
		fmt.Fprintf(w, "%sconnections: %s\n", indent, strings.Join(apps, ", "))
	}
	for i, t := range l.Tables {
		if top > 0 && i == top {
			fmt.Fprintf(w, "%s… %d more tables\n", indent, len(l.Tables)-top)
			break
		}
		fmt.Fprintf(w, "%s  %-28s seq %6.2f/s (%7.0f rows/s)  idx %7.2f/s (%7.0f rows/s)  writes %6.2f/s\n",
			indent, t.Name, t.SeqScans, t.SeqRows, t.IdxScans, t.IdxRows, t.Writes)
	}
}

func orNone(app string) string {
	if app == "" {
		return "(unnamed)"
	}
	return app
}

// WithApplication is dsn with application_name set (a URL or a key=value
// DSN), so that a node's connections are told apart in pg_stat_activity.
func WithApplication(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("cluster: database DSN: %w", err)
		}
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " application_name=" + name, nil
}
