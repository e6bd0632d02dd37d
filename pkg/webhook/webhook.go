// Package webhook delivers alert notifications (api.AlertNotification) to
// the webhooks of alert rules and of the policy's notices: each on its own
// goroutine, retried with backoff, recorded in the store once delivered.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Delivery: every notification goes out on its own goroutine, so
// that a slow or dead receiver never holds a sampling round. Each attempt
// has Timeout; a failed one (a network error, 408, 429 or 5xx) is
// retried after 1 s, 2 s, 4 s… up to Attempts in all. Other 4xx
// answers are not retried: the receiver refuses the body.
const (
	Timeout      = 5 * time.Second
	Attempts     = 5
	firstBackoff = time.Second
	// maxInFlight bounds the notifications being delivered; beyond it new
	// ones are dropped (and logged), so that a dead receiver cannot pile
	// up goroutines.
	maxInFlight = 256
)

// Store records deliveries (a *store.Store).
type Store interface {
	MarkAlertNotified(ctx context.Context, id int64, at time.Time) error
}

// Clock reads the time of a delivery.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Notifier POSTs alert notifications to webhooks.
type Notifier struct {
	client *http.Client
	st     Store // may be nil
	clock  Clock
	log    *slog.Logger
	// backoff is the wait before retry n (1, 2, …); sleep waits or
	// returns the context's error.
	backoff func(n int) time.Duration
	sleep   func(ctx context.Context, d time.Duration) error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}
}

// New delivers with client (nil: a client without its own
// timeout; each attempt has Timeout) until Close.
func New(client *http.Client, st Store, clock Clock, log *slog.Logger) *Notifier {
	if client == nil {
		client = &http.Client{}
	}
	if clock == nil {
		clock = realClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Notifier{client: client, st: st, clock: clock, log: log, ctx: ctx, cancel: cancel,
		slots:   make(chan struct{}, maxInFlight),
		backoff: func(n int) time.Duration { return firstBackoff << (n - 1) },
		sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		},
	}
}

// SetBackoff replaces the wait before retry n (1, 2, …), which is 1 s, 2 s,
// 4 s… by default; call it before the first Notify.
func (n *Notifier) SetBackoff(backoff func(n int) time.Duration) { n.backoff = backoff }

// Notify sends n to url in the background and returns at once.
func (n *Notifier) Notify(url string, note api.AlertNotification) {
	select {
	case n.slots <- struct{}{}:
	default:
		n.log.Error("alert notification dropped: too many being delivered", "rule", note.Rule, "subject", note.Subject,
			"state", note.State, "in_flight", maxInFlight)
		return
	}
	n.wg.Add(1)
	go func() {
		defer func() { <-n.slots; n.wg.Done() }()
		if err := n.deliver(n.ctx, url, note); err != nil {
			n.log.Error("alert notification not delivered", "rule", note.Rule, "subject", note.Subject, "state", note.State,
				"webhook", url, "err", err)
			return
		}
		if n.st != nil && note.AlertID != 0 {
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			defer cancel()
			if err := n.st.MarkAlertNotified(ctx, note.AlertID, n.clock.Now()); err != nil {
				n.log.Warn("alert notification delivered but not recorded", "alert", note.AlertID, "err", err)
			}
		}
	}()
}

// Wait waits for the notifications being delivered.
func (n *Notifier) Wait() { n.wg.Wait() }

// Close abandons the deliveries still retrying and waits for them.
func (n *Notifier) Close() {
	n.cancel()
	n.wg.Wait()
}

// deliver POSTs note, retrying as the package comment says.
func (n *Notifier) deliver(ctx context.Context, url string, note api.AlertNotification) error {
	body, err := json.Marshal(note)
	if err != nil {
		return fmt.Errorf("encode the notification: %w", err)
	}
	var last error
	for attempt := 1; attempt <= Attempts; attempt++ {
		if attempt > 1 {
			if err := n.sleep(ctx, n.backoff(attempt-1)); err != nil {
				return fmt.Errorf("gave up after %d attempts (%w); last: %w", attempt-1, err, last)
			}
		}
		retry, err := n.post(ctx, url, body, attempt)
		if err == nil {
			if attempt > 1 {
				n.log.Info("alert notification delivered after retries", "rule", note.Rule, "subject", note.Subject, "attempts", attempt)
			}
			return nil
		}
		last = err
		if !retry {
			return err
		}
		n.log.Warn("alert notification failed; retrying", "rule", note.Rule, "subject", note.Subject, "webhook", url,
			"attempt", attempt, "err", err)
	}
	return fmt.Errorf("gave up after %d attempts; last: %w", Attempts, last)
}

// post makes one attempt; retry says whether another may succeed.
func (n *Notifier) post(ctx context.Context, url string, body []byte, attempt int) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpuvmd-alerts")
	req.Header.Set("X-Gpuvm-Attempt", strconv.Itoa(attempt))
	resp, err := n.client.Do(req)
	if err != nil {
		return !errors.Is(err, context.Canceled), err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("webhook answered %s", resp.Status)
	default:
		return false, fmt.Errorf("webhook answered %s (not retried)", resp.Status)
	}
}
