package fleet

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener receives the fleet's wake-ups: a dedicated session LISTENs on
// the fleet's channel and hands every payload to a function. A lost
// session is opened again (after Backoff); each time it (re)connects the
// function gets Everyone, since notifications sent meanwhile are lost and
// the work they announced must be looked for.
type Listener struct {
	DSN     string
	Channel string
	// Name is the session's application_name (default "gpuvmd-listen").
	Name string
	// Handle is called with each payload, in the listener's goroutine.
	Handle  func(payload string)
	Backoff time.Duration // default 1s
	Log     *slog.Logger
}

// Run listens until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	backoff := l.Backoff
	if backoff <= 0 {
		backoff = time.Second
	}
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	failures := 0
	for ctx.Err() == nil {
		err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		// The first failure of a session that worked is worth a warning;
		// a database that stays away is said once, then at debug.
		level := slog.LevelDebug
		if failures == 1 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "fleet wake-ups: the LISTEN session failed; polling covers the gap until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// session is one LISTEN session's life; it returns why it ended.
func (l *Listener) session(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var conn *pgx.Conn
	cc, err := pgx.ParseConfig(l.DSN)
	if err == nil {
		cc.RuntimeParams["application_name"] = cmp.Or(l.Name, "gpuvmd-listen")
		conn, err = pgx.ConnectConfig(cctx, cc)
	}
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.Channel}.Sanitize())
	}
	cancel()
	if err != nil {
		if conn != nil {
			closeConn(conn)
		}
		return fmt.Errorf("listen on %s: %w", l.Channel, err)
	}
	defer closeConn(conn)
	l.Handle(Everyone) // whatever was announced while not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.Handle(n.Payload)
	}
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
