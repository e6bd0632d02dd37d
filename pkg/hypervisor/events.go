package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// EventType is what happened to a domain.
type EventType string

// Lifecycle event types.
const (
	EventDefined     EventType = "defined"
	EventUndefined   EventType = "undefined"
	EventStarted     EventType = "started"
	EventSuspended   EventType = "suspended"
	EventResumed     EventType = "resumed"
	EventStopped     EventType = "stopped"
	EventShutdown    EventType = "shutdown"
	EventPMSuspended EventType = "pmsuspended"
	EventCrashed     EventType = "crashed"
)

// Connection event types: not about one domain (Name, UUID and VMID are
// empty, Detail says why). After EventDisconnected no event arrives until
// EventReconnected; what happened in between is lost, so a subscriber
// resynchronises (List) on EventReconnected.
const (
	EventDisconnected EventType = "disconnected"
	EventReconnected  EventType = "reconnected"
)

// Event is a lifecycle event of one of gpuvm's domains.
type Event struct {
	Name   string
	UUID   string
	Type   EventType
	Detail string // libvirt's detail, in words where known ("destroyed", "shutdown", "failed")
	Time   time.Time
	VMID   string // from the domain's gpuvm metadata
}

func eventType(t libvirt.DomainEventType) EventType {
	switch t {
	case libvirt.DOMAIN_EVENT_DEFINED:
		return EventDefined
	case libvirt.DOMAIN_EVENT_UNDEFINED:
		return EventUndefined
	case libvirt.DOMAIN_EVENT_STARTED:
		return EventStarted
	case libvirt.DOMAIN_EVENT_SUSPENDED:
		return EventSuspended
	case libvirt.DOMAIN_EVENT_RESUMED:
		return EventResumed
	case libvirt.DOMAIN_EVENT_STOPPED:
		return EventStopped
	case libvirt.DOMAIN_EVENT_SHUTDOWN:
		return EventShutdown
	case libvirt.DOMAIN_EVENT_PMSUSPENDED:
		return EventPMSuspended
	case libvirt.DOMAIN_EVENT_CRASHED:
		return EventCrashed
	}
	return EventType(fmt.Sprintf("event-%d", t))
}

func eventDetail(t libvirt.DomainEventType, d int) string {
	switch t {
	case libvirt.DOMAIN_EVENT_STOPPED:
		switch libvirt.DomainEventStoppedDetailType(d) {
		case libvirt.DOMAIN_EVENT_STOPPED_SHUTDOWN:
			return "shutdown"
		case libvirt.DOMAIN_EVENT_STOPPED_DESTROYED:
			return "destroyed"
		case libvirt.DOMAIN_EVENT_STOPPED_CRASHED:
			return "crashed"
		case libvirt.DOMAIN_EVENT_STOPPED_FAILED:
			return "failed"
		}
	case libvirt.DOMAIN_EVENT_STARTED:
		if libvirt.DomainEventStartedDetailType(d) == libvirt.DOMAIN_EVENT_STARTED_BOOTED {
			return "booted"
		}
	case libvirt.DOMAIN_EVENT_SUSPENDED:
		switch libvirt.DomainEventSuspendedDetailType(d) {
		case libvirt.DOMAIN_EVENT_SUSPENDED_PAUSED:
			return "paused"
		case libvirt.DOMAIN_EVENT_SUSPENDED_IOERROR:
			return "I/O error"
		case libvirt.DOMAIN_EVENT_SUSPENDED_API_ERROR:
			return "API error"
		}
	case libvirt.DOMAIN_EVENT_DEFINED:
		switch libvirt.DomainEventDefinedDetailType(d) {
		case libvirt.DOMAIN_EVENT_DEFINED_ADDED:
			return "added"
		case libvirt.DOMAIN_EVENT_DEFINED_UPDATED:
			return "updated"
		}
	case libvirt.DOMAIN_EVENT_SHUTDOWN:
		if libvirt.DomainEventShutdownDetailType(d) == libvirt.DOMAIN_EVENT_SHUTDOWN_FINISHED {
			return "finished"
		}
	}
	return fmt.Sprintf("%d", d)
}

type rawEvent struct {
	dom    *libvirt.Domain // referenced; the reader frees it; nil for connection events
	name   string
	uuid   string
	typ    libvirt.DomainEventType
	detail int
	at     time.Time

	conn   EventType // EventDisconnected or EventReconnected; then only reason and at count
	reason string
}

func (r rawEvent) free() {
	if r.dom != nil {
		_ = r.dom.Free()
	}
}

// subscriber is one Events channel: its lifecycle callback is registered on
// every connection the Conn has, one after the other.
type subscriber struct {
	raw  chan rawEvent
	done chan struct{} // closed when the subscriber goes
	id   int           // its callback's ID on the current connection; under Conn.mu
}

// push hands r to the reader without blocking libvirt's event loop.
func (c *Conn) push(s *subscriber, r rawEvent) {
	select {
	case <-s.done:
		r.free()
	case s.raw <- r:
	default:
		r.free()
		if r.conn != "" {
			c.log.Warn("connection event dropped: reader too slow", "event", r.conn)
		} else {
			c.log.Warn("libvirt event dropped: reader too slow", "vm", r.name, "event", eventType(r.typ))
		}
	}
}

// notify tells every subscriber about the connection.
func (c *Conn) notify(typ EventType, reason string) {
	c.mu.Lock()
	subs := make([]*subscriber, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		c.push(s, rawEvent{conn: typ, reason: reason, at: time.Now()})
	}
}

func (c *Conn) lifecycleCallback(s *subscriber) libvirt.DomainEventLifecycleCallback {
	return func(_ *libvirt.Connect, d *libvirt.Domain, ev *libvirt.DomainEventLifecycle) {
		// In libvirt's event loop: no RPC here, only cached values.
		name, _ := d.GetName()
		uuid, _ := d.GetUUIDString()
		if err := d.Ref(); err != nil {
			return
		}
		c.push(s, rawEvent{dom: d, name: name, uuid: strings.ToLower(uuid), typ: ev.Event, detail: ev.Detail, at: time.Now()})
	}
}

// Events delivers the lifecycle events of gpuvm's domains (others are
// dropped) until ctx ends; then the channel is closed. Events arrive through
// libvirt's event loop; a reader that falls more than a few hundred events
// behind loses events, and is told so in the log. The channel survives a
// lost connection: it gets EventDisconnected, then EventReconnected once
// the Conn has reconnected and registered it again.
func (c *Conn) Events(ctx context.Context) (<-chan Event, error) {
	s := &subscriber{raw: make(chan rawEvent, 512), done: make(chan struct{})}
	c.regMu.Lock()
	id, err := call(ctx, c, "register lifecycle events", 0, func() (int, error) {
		return c.lv.DomainEventLifecycleRegister(nil, c.lifecycleCallback(s))
	}, func(id int) { _ = c.lv.DomainEventDeregister(id) })
	if err != nil {
		c.regMu.Unlock()
		return nil, fmt.Errorf("libvirt %s: register lifecycle events: %w", c.uri, clean(err))
	}
	c.mu.Lock()
	s.id = id
	c.subs[s] = true
	c.callbackIDs[id] = true
	c.mu.Unlock()
	c.regMu.Unlock()

	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer func() {
			close(s.done)
			c.unsubscribe(s)
			for {
				select {
				case r := <-s.raw:
					r.free()
				default:
					return
				}
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-s.raw:
				var ev Event
				if r.conn != "" {
					ev = Event{Type: r.conn, Detail: r.reason, Time: r.at}
				} else {
					meta, ok := c.ownedDomain(ctx, r)
					r.free()
					if !ok {
						continue
					}
					ev = Event{Name: r.name, UUID: r.uuid, Type: eventType(r.typ), Detail: eventDetail(r.typ, r.detail), Time: r.at, VMID: meta.VMID}
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// unsubscribe deregisters a subscriber's callback from the current
// connection. While the connection is lost the callback stays registered
// on the lost one, which the reconnect retires whole.
func (c *Conn) unsubscribe(s *subscriber) {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.Lock()
	delete(c.subs, s)
	registered := c.callbackIDs[s.id] && !c.down && !c.closed
	if registered {
		delete(c.callbackIDs, s.id)
	}
	id := s.id
	c.mu.Unlock()
	if !registered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.callTimeout)
	defer cancel()
	if err := c.do(ctx, "deregister lifecycle events", func() error { return c.lv.DomainEventDeregister(id) }); err != nil {
		c.log.Debug("deregistering lifecycle events", "err", err)
	}
}

// ownedDomain says whether an event's domain is gpuvm's: from the domain's
// metadata when it still exists, else from what this connection saw of it.
func (c *Conn) ownedDomain(ctx context.Context, r rawEvent) (domain.Metadata, bool) {
	meta, err := c.metadata(ctx, r.dom)
	if err == nil {
		c.remember(r.uuid, meta)
		return meta, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.owned[r.uuid]; ok {
		if r.typ == libvirt.DOMAIN_EVENT_UNDEFINED {
			delete(c.owned, r.uuid)
		}
		return m, true
	}
	if !errors.Is(err, ErrNotGpuvm) && !IsNotFound(err) {
		c.log.Debug("cannot tell whose domain an event is about", "vm", r.name, "err", err)
	}
	return domain.Metadata{}, false
}

// remember notes a gpuvm domain, so that its events are known for gpuvm's
// even once the domain is gone.
func (c *Conn) remember(uuid string, m domain.Metadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owned == nil {
		c.owned = map[string]domain.Metadata{}
	}
	c.owned[strings.ToLower(uuid)] = m
}
