package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// EventSource is what the event stream reads from the database.
type EventSource interface {
	LastEventID(ctx context.Context) (int64, error)
	ListEventsSince(ctx context.Context, afterID int64, f store.EventFilter) ([]store.Event, error)
}

// Defaults of the event stream.
const (
	defaultEventPoll      = 250 * time.Millisecond
	defaultEventKeepAlive = 15 * time.Second
)

// eventHub watches the newest event ID with one query per poll interval,
// whatever the number of watchers, and wakes every watcher when it grows.
// Polling the database (rather than a channel fed by this process) is what
// lets a watcher see the events other gpuvmds of a fleet write.
type eventHub struct {
	src  EventSource
	poll time.Duration
	log  *slog.Logger

	mu       sync.Mutex
	last     int64
	changed  chan struct{} // closed and replaced when last grows
	watchers int
	stop     context.CancelFunc
}

func newEventHub(src EventSource, poll time.Duration, log *slog.Logger) *eventHub {
	return &eventHub{src: src, poll: poll, log: log, changed: make(chan struct{})}
}

// subscribe returns a channel closed on the next new event, and a function
// to call when the watcher leaves. The poller runs while anyone watches.
func (h *eventHub) subscribe() (wait func() <-chan struct{}, leave func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchers++
	if h.watchers == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		go h.run(ctx)
	}
	wait = func() <-chan struct{} {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.changed
	}
	var once sync.Once
	leave = func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.watchers--
			if h.watchers == 0 {
				h.stop()
			}
		})
	}
	return wait, leave
}

func (h *eventHub) run(ctx context.Context) {
	t := time.NewTicker(h.poll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, err := h.src.LastEventID(ctx)
		if err != nil {
			if ctx.Err() == nil && !failing {
				h.log.Warn("event stream cannot read the newest event", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		h.mu.Lock()
		if id != h.last {
			h.last = id
			close(h.changed)
			h.changed = make(chan struct{})
		}
		h.mu.Unlock()
	}
}

// events streams the events the caller may see as server-sent events
// (text/event-stream). Query: vm (an ID or the caller's VM name), owner
// (admins), after (an event ID; the Last-Event-ID header wins over it). With
// neither, the stream starts with what happens next. A comment line is sent
// every keep-alive interval so that proxies keep the connection.
func (s *Server) events(c *gin.Context) {
	u := user(c)
	ctx := c.Request.Context()
	f := store.EventFilter{Limit: 500}
	if !u.Admin {
		f.Owner = u.Name
	} else if o := c.Query("owner"); o != "" {
		f.Owner = o
	}
	if ref := c.Query("vm"); ref != "" {
		vm, ok := s.lookupVM(c, ref)
		if !ok {
			return
		}
		f.VMID = vm.ID
	}
	after := int64(-1)
	for _, v := range []struct{ name, val string }{{"Last-Event-ID", c.GetHeader("Last-Event-ID")}, {"after", c.Query("after")}} {
		if v.val == "" {
			continue
		}
		n, err := strconv.ParseInt(v.val, 10, 64)
		if err != nil || n < 0 {
			s.writeProblem(c, withField(errValidation, v.name, v.name+" must be an event ID (a whole number ≥ 0), got "+strconv.Quote(v.val)))
			return
		}
		after = n
		break
	}
	src := s.Store
	wait, leave := s.hub.subscribe()
	defer leave()
	if after < 0 {
		id, err := src.LastEventID(ctx)
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		after = id
	}

	w := c.Writer
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	// The stream has no write deadline (stream), but each write has one: a
	// client that stops reading is let go once the socket's buffers are
	// full and a write waits WriteTimeout.
	rc := http.NewResponseController(w)
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.HTTP.WriteTimeout)) }
	extend()
	w.WriteHeader(http.StatusOK)
	// The first line tells the client the stream is open, and where it
	// starts, before any event happens.
	if _, err := fmt.Fprintf(w, ": gpuvm events after %d\nretry: 2000\n\n", after); err != nil {
		return
	}
	w.Flush()

	keep := time.NewTicker(s.eventKeepAlive)
	defer keep.Stop()
	for {
		changed := wait()
		for {
			es, err := src.ListEventsSince(ctx, after, f)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("event stream read failed", "user", u.Name, "err", err)
				}
				return // the client reconnects with Last-Event-ID
			}
			extend()
			for _, e := range es {
				if err := writeEvent(w, e); err != nil {
					return
				}
				after = e.ID
			}
			w.Flush()
			if len(es) < f.Limit {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-keep.C:
			extend()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			w.Flush()
		case <-changed:
		}
	}
}

func writeEvent(w gin.ResponseWriter, e store.Event) error {
	data, err := json.Marshal(toAPIEvent(e))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data)
	return err
}

func toAPIEvent(e store.Event) api.Event {
	return api.Event{ID: e.ID, Time: e.CreatedAt, VMID: e.VMID, Owner: e.Owner, Type: e.Type, Payload: json.RawMessage(e.Payload)}
}
