package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
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

// EventNotifier is what a Store may offer besides EventSource (a
// *store.Store does): a call after each of its transactions that appended
// events commits, so that the streams read events this process writes at
// once rather than at the next poll.
type EventNotifier interface {
	OnEventCommitted(fn func()) (cancel func())
}

// Defaults of the event stream.
const (
	defaultEventPoll      = 50 * time.Millisecond
	defaultEventKeepAlive = 15 * time.Second
	// eventHubKeep is how many of the newest events the hub keeps: a
	// stream further behind reads the database itself.
	eventHubKeep = 4096
)

// eventHub reads the new events once for every stream: one query per poll
// interval (and at once when this process commits an event), whatever the
// number of streams, and wakes every stream when some came. Each stream
// picks out, in memory, those it may see. Polling the database (rather
// than only a channel fed by this process) is what lets a stream see the
// events other gpuvmds of a fleet write.
type eventHub struct {
	src  EventSource
	poll time.Duration
	log  *slog.Logger
	kick chan struct{} // a read now, please
	keep int

	mu       sync.RWMutex
	gen      int           // of the running poller
	ready    bool          // base, last and recent are known
	base     int64         // recent has every event after base up to last,
	last     int64         // in ID order: the database's answer for any
	recent   []hubEvent    // filter after base
	changed  chan struct{} // closed and replaced when events came
	watchers int
	stop     context.CancelFunc
}

// hubEvent is an event with its wire form, encoded once for every stream.
type hubEvent struct {
	store.Event
	frame []byte
	err   error
}

func newEventHub(src EventSource, poll time.Duration, log *slog.Logger) *eventHub {
	h := &eventHub{src: src, poll: poll, log: log, kick: make(chan struct{}, 1), keep: eventHubKeep, changed: make(chan struct{})}
	return h
}

// nudge asks the poller for a read now; it never blocks.
func (h *eventHub) nudge() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// subscribe registers a watcher until leave. The poller runs while anyone
// watches.
func (h *eventHub) subscribe() (leave func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchers++
	if h.watchers == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		h.gen++
		h.ready, h.recent = false, nil
		go h.run(ctx, h.gen)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.watchers--
			if h.watchers == 0 {
				h.stop()
				h.ready, h.recent = false, nil
			}
		})
	}
}

// since returns the events after id that f selects, in ID order, up to the
// hub's newest (upTo), and a channel closed when newer ones come. ok is
// false when the hub cannot say (it has not read yet, or id is older than
// what it keeps): the caller reads the database.
func (h *eventHub) since(id int64, f store.EventFilter) (es []hubEvent, upTo int64, changed <-chan struct{}, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if !h.ready {
		return nil, id, h.changed, false
	}
	if id < h.base {
		return nil, h.last, h.changed, false
	}
	i, _ := slices.BinarySearchFunc(h.recent, id, func(e hubEvent, id int64) int { return cmp.Compare(e.ID, id) })
	if i < len(h.recent) && h.recent[i].ID == id {
		i++
	}
	for _, e := range h.recent[i:] {
		if eventSelected(e.Event, f) {
			es = append(es, e)
		}
	}
	return es, max(id, h.last), h.changed, true
}

// eventSelected is store.ListEventsSince's filter, in memory.
func eventSelected(e store.Event, f store.EventFilter) bool {
	return (f.VMID == "" || e.VMID == f.VMID) && (f.Owner == "" || e.Owner == f.Owner) &&
		(f.Type == "" || e.Type == f.Type) && (f.From.IsZero() || !e.CreatedAt.Before(f.From.UTC().Truncate(time.Microsecond)))
}

func (h *eventHub) run(ctx context.Context, gen int) {
	t := time.NewTicker(h.poll)
	defer t.Stop()
	failing := false
	for {
		if err := h.read(ctx, gen); err != nil {
			if ctx.Err() == nil && !failing {
				h.log.Warn("event stream cannot read the new events", "err", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
	}
}

// read reads the events after the newest the hub has, and wakes the
// streams when some came. The first read only notes where it starts.
func (h *eventHub) read(ctx context.Context, gen int) error {
	h.mu.RLock()
	ready, last := h.ready, h.last
	h.mu.RUnlock()
	if !ready {
		id, err := h.src.LastEventID(ctx)
		if err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.gen == gen {
			h.ready, h.base, h.last, h.recent = true, id, id, nil
		}
		return nil
	}
	var got []hubEvent
	for {
		es, err := h.src.ListEventsSince(ctx, last, store.EventFilter{Limit: 1000})
		if err != nil {
			return err
		}
		for _, e := range es {
			frame, err := eventFrame(e)
			got = append(got, hubEvent{Event: e, frame: frame, err: err})
			last = e.ID
		}
		if len(es) < 1000 {
			break
		}
	}
	if len(got) == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen || !h.ready {
		return nil
	}
	h.recent = append(h.recent, got...)
	if n := len(h.recent) - h.keep; n > h.keep {
		h.base = h.recent[n-1].ID
		h.recent = slices.Clone(h.recent[n:])
	}
	h.last = last
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
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
	leave := s.hub.subscribe()
	defer leave()
	if after < 0 {
		id, err := s.Store.LastEventID(ctx)
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
	s.streamEvents(ctx, w, u.Name, f, after, extend)
}

// streamEvents writes the events after after that f selects, as they come,
// until the client goes or the server closes. The hub has the new ones; a
// stream behind what it keeps reads the database, in pages.
func (s *Server) streamEvents(ctx context.Context, w gin.ResponseWriter, who string, f store.EventFilter, after int64, extend func()) {
	keep := time.NewTicker(s.eventKeepAlive)
	defer keep.Stop()
	seen := after // the hub was asked up to seen; after: the last event written
	for {
		es, upTo, changed, ok := s.hub.since(seen, f)
		if ok {
			if len(es) > 0 {
				extend()
				for _, e := range es {
					if e.err != nil {
						return
					}
					if _, err := w.Write(e.frame); err != nil {
						return
					}
					after = e.ID
				}
				w.Flush()
			}
			seen = upTo
		} else {
			var err error
			if after, err = s.eventsFromStore(ctx, w, f, after, extend); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("event stream read failed", "user", who, "err", err)
				}
				return // the client reconnects with Last-Event-ID
			}
			// The database had every event up to what the hub had seen
			// when asked: the hub goes on from there.
			seen = max(after, upTo)
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

// eventsFromStore writes the events after after that f selects from the
// database, page by page, and returns the last one written.
func (s *Server) eventsFromStore(ctx context.Context, w gin.ResponseWriter, f store.EventFilter, after int64, extend func()) (int64, error) {
	for {
		es, err := s.Store.ListEventsSince(ctx, after, f)
		if err != nil {
			return after, err
		}
		extend()
		for _, e := range es {
			if err := writeEvent(w, e); err != nil {
				return after, err
			}
			after = e.ID
		}
		w.Flush()
		if len(es) < f.Limit {
			return after, nil
		}
	}
}

func writeEvent(w gin.ResponseWriter, e store.Event) error {
	frame, err := eventFrame(e)
	if err != nil {
		return err
	}
	_, err = w.Write(frame)
	return err
}

// eventFrame is an event as the stream writes it.
func eventFrame(e store.Event) ([]byte, error) {
	data, err := json.Marshal(toAPIEvent(e))
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data), nil
}

func toAPIEvent(e store.Event) api.Event {
	return api.Event{ID: e.ID, Time: e.CreatedAt, VMID: e.VMID, Owner: e.Owner, Type: e.Type, Payload: json.RawMessage(e.Payload)}
}
