package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults of LeaderConfig.
const (
	DefaultCampaignInterval = time.Second
	// leaderStepTimeout bounds one campaign step (connect, try the lock,
	// check the connection): a leader whose database stops answering gives
	// up leading after it.
	leaderStepTimeout = 3 * time.Second
)

// LeaderConfig says how a node campaigns.
type LeaderConfig struct {
	// DSN is the PostgreSQL database the fleet shares (the store's).
	DSN string
	// Node is this node's name: the leader's connection carries it as its
	// application_name ("gpuvmd/NODE"), which is how every node tells who
	// leads (LeaderName).
	Node string
	// Key is the advisory lock of the fleet (Scope.LockKey).
	Key LockKey
	// Interval is how often a follower tries to take the lock and the
	// leader checks that it still holds it (default 1s). A leader that
	// stops checking (its machine died, its network broke) loses the lock
	// when the database ends its idle session, after IdleTimeout.
	Interval time.Duration
	// IdleTimeout is the leader's session's idle_session_timeout (default
	// 5 × Interval, at least 3s): how long PostgreSQL keeps the lock of a
	// leader that no longer checks in.
	IdleTimeout time.Duration
	// OnChange is called (in the campaign's goroutine) when this node
	// starts or stops leading.
	OnChange func(leading bool)
	Log      *slog.Logger
}

// LockKey is the two-part key of a PostgreSQL advisory lock
// (pg_try_advisory_lock(int, int)).
type LockKey struct{ Class, Object int32 }

// Leader elects one node of the fleet with a PostgreSQL advisory lock held
// by a dedicated session: the node whose session holds the lock leads, for
// as long as that session lives. A node that loses its connection stops
// leading at once (its next check fails); the database releases the lock
// when the session ends, and another node takes it within an Interval.
// Its methods are safe for concurrent use.
type Leader struct {
	cfg     LeaderConfig
	log     *slog.Logger
	leading atomic.Bool

	mu   sync.Mutex // the campaign's state: one step at a time
	conn *pgx.Conn
	// since is when this node took the lead (zero while following).
	since time.Time
}

// NewLeader returns a Leader that has not campaigned yet: call Step once
// at start, then Run.
func NewLeader(cfg LeaderConfig) *Leader {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultCampaignInterval
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = max(5*cfg.Interval, 3*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Leader{cfg: cfg, log: cfg.Log.With("component", "fleet", "node", cfg.Node)}
}

// IsLeader reports whether this node leads the fleet now.
func (l *Leader) IsLeader() bool { return l.leading.Load() }

// Run campaigns every Interval until ctx ends; then, if it leads, it
// releases the lock so that another node takes over at once.
func (l *Leader) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	defer l.resign()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.Step(ctx); err != nil && ctx.Err() == nil {
			l.log.Debug("fleet leadership: campaign step failed; trying again", "err", err)
		}
	}
}

// Step is one round of the campaign: a follower connects if it must and
// tries to take the lock; the leader checks that its session still holds
// it. Any failure of the leader's session ends its leadership.
func (l *Leader) Step(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, leaderStepTimeout)
	defer cancel()
	if l.conn == nil {
		conn, err := l.connect(sctx)
		if err != nil {
			return err
		}
		l.conn = conn
	}
	var held bool
	var err error
	if l.leading.Load() {
		err = l.conn.QueryRow(sctx, `SELECT count(*) > 0 FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid = $1::int::oid AND objid = $2::int::oid AND objsubid = 2 AND granted`,
			l.cfg.Key.Class, l.cfg.Key.Object).Scan(&held)
		if err == nil && !held {
			err = errors.New("the session no longer holds the fleet lock")
		}
	} else {
		err = l.conn.QueryRow(sctx, "SELECT pg_try_advisory_lock($1::int, $2::int)", l.cfg.Key.Class, l.cfg.Key.Object).Scan(&held)
	}
	if err != nil {
		l.drop()
		return fmt.Errorf("fleet leadership: %w", err)
	}
	if held && !l.leading.Load() {
		l.since = time.Now()
		l.leading.Store(true)
		l.log.Info("fleet leadership taken: this node runs the scheduling cycle and the fleet's singletons")
		if l.cfg.OnChange != nil {
			l.cfg.OnChange(true)
		}
	}
	return nil
}

// connect opens the campaign's session: application_name names the node,
// and idle_session_timeout makes PostgreSQL end the session (and free the
// lock) of a leader that stopped checking in.
func (l *Leader) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(l.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("fleet leadership: parse the database DSN: %w", err)
	}
	cc.RuntimeParams["application_name"] = ApplicationName(l.cfg.Node)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("fleet leadership: connect: %w", err)
	}
	ms := l.cfg.IdleTimeout.Milliseconds()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", ms)); err != nil {
		// PostgreSQL before 14: a dead leader's lock lasts until the
		// server notices its connection is gone (TCP keepalive).
		l.log.Warn("fleet leadership: the database has no idle_session_timeout (PostgreSQL 14+); a leader whose machine dies keeps the lead until the database notices its connection is gone", "err", err)
	}
	return conn, nil
}

// drop closes the campaign's session after a failure; a leader stops
// leading first.
func (l *Leader) drop() {
	l.stopLeading("its database session failed")
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.conn.Close(ctx)
		cancel()
		l.conn = nil
	}
}

func (l *Leader) stopLeading(why string) {
	if !l.leading.Swap(false) {
		return
	}
	l.log.Warn("fleet leadership lost: "+why, "led_for", time.Since(l.since).Round(time.Millisecond))
	l.since = time.Time{}
	if l.cfg.OnChange != nil {
		l.cfg.OnChange(false)
	}
}

// resign gives the lead up at shutdown: the lock is released and the
// session closed, so another node takes over within an Interval.
func (l *Leader) resign() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l.leading.Load() {
		if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1::int, $2::int)", l.cfg.Key.Class, l.cfg.Key.Object); err != nil {
			l.log.Warn("fleet leadership: release the lock", "err", err)
		}
		l.stopLeading("gpuvmd is stopping")
	}
	_ = l.conn.Close(ctx)
	l.conn = nil
}

// ApplicationName is the application_name of a node's leadership session.
func ApplicationName(node string) string { return "gpuvmd/" + node }
