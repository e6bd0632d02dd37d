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
	dom    *libvirt.Domain // referenced; the reader frees it
	name   string
	uuid   string
	typ    libvirt.DomainEventType
	detail int
	at     time.Time
}

// Events delivers the lifecycle events of gpuvm's domains (others are
// dropped) until ctx ends; then the channel is closed. Events arrive through
// libvirt's event loop; a reader that falls more than a few hundred events
// behind loses events, and is told so in the log.
func (c *Conn) Events(ctx context.Context) (<-chan Event, error) {
	raw := make(chan rawEvent, 512)
	done := make(chan struct{})
	id, err := call(ctx, c, "register lifecycle events", 0, func() (int, error) {
		return c.lv.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, ev *libvirt.DomainEventLifecycle) {
			// In libvirt's event loop: no RPC here, only cached values.
			name, _ := d.GetName()
			uuid, _ := d.GetUUIDString()
			if err := d.Ref(); err != nil {
				return
			}
			r := rawEvent{dom: d, name: name, uuid: strings.ToLower(uuid), typ: ev.Event, detail: ev.Detail, at: time.Now()}
			select {
			case <-done:
				_ = d.Free()
			case raw <- r:
			default:
				_ = d.Free()
				c.log.Warn("libvirt event dropped: reader too slow", "vm", name, "event", eventType(ev.Event))
			}
		})
	}, func(id int) { _ = c.lv.DomainEventDeregister(id) })
	if err != nil {
		return nil, fmt.Errorf("libvirt %s: register lifecycle events: %w", c.uri, clean(err))
	}
	c.mu.Lock()
	c.callbackIDs[id] = true
	c.mu.Unlock()

	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer func() {
			close(done)
			c.mu.Lock()
			registered := c.callbackIDs[id]
			delete(c.callbackIDs, id)
			c.mu.Unlock()
			if registered {
				c.inflight.RLock()
				c.mu.Lock()
				closed := c.closed
				c.mu.Unlock()
				if !closed {
					_ = c.lv.DomainEventDeregister(id)
				}
				c.inflight.RUnlock()
			}
			for {
				select {
				case r := <-raw:
					_ = r.dom.Free()
				default:
					return
				}
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-raw:
				meta, ok := c.ownedDomain(ctx, r)
				_ = r.dom.Free()
				if !ok {
					continue
				}
				ev := Event{Name: r.name, UUID: r.uuid, Type: eventType(r.typ), Detail: eventDetail(r.typ, r.detail), Time: r.at, VMID: meta.VMID}
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
