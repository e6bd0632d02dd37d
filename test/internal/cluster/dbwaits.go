package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// WaitSample is what the database's backends were doing at one moment of
// a sampling: each one busy, by what it was doing ("gpuvmd running",
// "gpuvmd IO:WALSync", "gpuvmd idle in transaction" (waiting for its
// gpuvmd), "checkpointer IO:DataFileSync", "autovacuum worker running").
type WaitSample struct {
	At    time.Duration // from the sampling's start
	Doing []string
}

// WaitSampler samples pg_stat_activity at a steady interval, through a
// connection of its own, until Stop: where a fleet's statements wait
// (for a lock, the WAL's flush, a core, their own gpuvmd) while something
// is measured.
type WaitSampler struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []WaitSample
	err     error
}

// sampleQuery reads the backends that are doing something: the clients of
// this database but the sampler (gpuvmd's: the harness reaches gpuvmd by
// its API alone) active or inside a transaction, and PostgreSQL's own
// processes (checkpointer, WAL writer, autovacuum) unless they idle in
// their main loop (wait type Activity).
const sampleQuery = `SELECT CASE WHEN backend_type = 'client backend' THEN 'gpuvmd' ELSE backend_type END,
	COALESCE(state, ''), COALESCE(wait_event_type, ''), COALESCE(wait_event, ''), left(COALESCE(query, ''), 200)
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND (
	(backend_type = 'client backend' AND datname = current_database() AND state IN ('active', 'idle in transaction'))
	OR (backend_type <> 'client backend' AND COALESCE(wait_event_type, '') <> 'Activity'))`

// SampleWaits connects to the database at dsn (within ctx) and samples it
// every interval until Stop.
func SampleWaits(ctx context.Context, dsn string, every time.Duration) (*WaitSampler, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("cluster: sample the database's waits: %w", err)
	}
	sampling, cancel := context.WithCancel(context.Background())
	w := &WaitSampler{cancel: cancel, done: make(chan struct{})}
	go w.run(sampling, conn, every)
	return w, nil
}

func (w *WaitSampler) run(ctx context.Context, conn *pgx.Conn, every time.Duration) {
	defer close(w.done)
	defer conn.Close(context.Background())
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for {
		doing, err := sampleOnce(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		if err != nil {
			w.err = err
			w.mu.Unlock()
			return
		}
		w.samples = append(w.samples, WaitSample{At: time.Since(start), Doing: doing})
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sampleOnce(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, sampleQuery)
	if err != nil {
		return nil, fmt.Errorf("cluster: pg_stat_activity: %w", err)
	}
	var doing []string
	for rows.Next() {
		var who, state, typ, event, query string
		if err := rows.Scan(&who, &state, &typ, &event, &query); err != nil {
			return nil, fmt.Errorf("cluster: pg_stat_activity: %w", err)
		}
		d := what(who, state, typ, event)
		if state == "idle in transaction" {
			d += " after " + statementOf(query)
		}
		doing = append(doing, d)
	}
	return doing, rows.Err()
}

// what names what one backend was doing.
func what(who, state, typ, event string) string {
	switch {
	case state == "idle in transaction":
		return who + " idle in transaction"
	case typ == "":
		return who + " running"
	}
	return who + " " + typ + ":" + event
}

// statementOf names a statement by its verb and first table: "INSERT
// audit_log", "UPDATE vms", "SELECT vms" (the verb alone when it names
// none): which transactions wait for their gpuvmd.
func statementOf(query string) string {
	words := strings.Fields(query)
	if len(words) == 0 {
		return "?"
	}
	verb := strings.ToUpper(words[0])
	for i, w := range words[:len(words)-1] {
		switch strings.ToUpper(w) {
		case "INTO", "FROM", "UPDATE":
			if i > 0 || verb == "UPDATE" {
				return verb + " " + strings.Trim(words[i+1], `"(`)
			}
		}
	}
	return verb
}

// Stop ends the sampling and returns its samples (an error when it could
// not go on: the samples before it are kept).
func (w *WaitSampler) Stop() ([]WaitSample, error) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples, w.err
}

// WaitShare is one thing the backends were doing, and in how much of the
// samples: Mean is how many backends on average.
type WaitShare struct {
	Doing string
	Mean  float64
}

// Waits sums the samples taken in [from, to): what the backends were
// doing, the most first, and how many samples that covers.
func Waits(samples []WaitSample, from, to time.Duration) ([]WaitShare, int) {
	count := map[string]int{}
	n := 0
	for _, s := range samples {
		if s.At < from || s.At >= to {
			continue
		}
		n++
		for _, d := range s.Doing {
			count[d]++
		}
	}
	out := make([]WaitShare, 0, len(count))
	for d, c := range count {
		out = append(out, WaitShare{Doing: d, Mean: float64(c) / float64(max(n, 1))})
	}
	slices.SortFunc(out, func(a, b WaitShare) int {
		return cmp.Or(cmp.Compare(b.Mean, a.Mean), strings.Compare(a.Doing, b.Doing))
	})
	return out, n
}

// FormatWaits writes the first few shares on one line: "2.10 gpuvmd
// running, 0.40 gpuvmd IO:WALSync, …".
func FormatWaits(shares []WaitShare, few int) string {
	var parts []string
	for _, s := range shares[:min(few, len(shares))] {
		parts = append(parts, fmt.Sprintf("%.2f %s", s.Mean, s.Doing))
	}
	if len(parts) == 0 {
		return "nothing busy"
	}
	return strings.Join(parts, ", ")
}

// DescribeWaits is what the samples taken in [from, to) show, on one line
// with their number: "(12 samples) 2.10 gpuvmd running, …"; "" for none.
func DescribeWaits(samples []WaitSample, from, to time.Duration, few int) string {
	shares, n := Waits(samples, from, to)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("(%d samples) %s", n, FormatWaits(shares, few))
}
