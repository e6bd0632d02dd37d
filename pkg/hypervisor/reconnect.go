package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// Losing the connection and getting it back.
//
// libvirt tells of a lost connection through the close callback (in its
// event loop: end of file when libvirtd stops, or the keepalive timing
// out), and a call that fails on a connection that is no longer alive says
// so too, whichever comes first. Either marks the Conn down: calls fail at
// once with ErrDisconnected, and one reconnect loop runs until it has a new
// connection (or Close). The new connection gets the close callback and the
// lifecycle callback of every Events subscriber before it replaces the old
// one, under inflight held exclusively, so that no call is running on
// either while they swap; then the old one is closed.

// watchClose registers the close callback of lv, the connection of
// generation gen.
func (c *Conn) watchClose(lv *libvirt.Connect, gen uint64) error {
	return lv.RegisterCloseCallback(func(_ *libvirt.Connect, reason libvirt.ConnectCloseReason) {
		// In libvirt's event loop: no RPC, nothing that blocks.
		if reason == libvirt.CONNECT_CLOSE_REASON_CLIENT {
			return // Close, or a reconnect retiring an old connection
		}
		c.markDisconnected(gen, "connection closed: "+closeReason(reason))
	})
}

// connectionLost reports whether a call's error came from a connection that
// is gone: the connection it ran on is no longer alive (dead), or libvirt
// says the socket of a domain's connection, an older one, is closed.
func connectionLost(lv *libvirt.Connect, err error) (lost, dead bool) {
	if alive, aerr := lv.IsAlive(); aerr != nil || !alive {
		return true, true
	}
	return strings.Contains(errMessage(err), "client socket is closed"), false
}

// generation is the current connection's generation.
func (c *Conn) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// markDisconnected marks the connection of generation gen lost, unless it
// was replaced or closed meanwhile, and starts reconnecting.
func (c *Conn) markDisconnected(gen uint64, reason string) {
	c.mu.Lock()
	if c.closed || c.down || gen != c.gen {
		c.mu.Unlock()
		return
	}
	c.down, c.downSince, c.downReason = true, time.Now(), reason
	c.up = make(chan struct{})
	start := !c.reconnecting
	c.reconnecting = true
	c.mu.Unlock()
	c.log.Warn("lost the connection to libvirt; reconnecting in the background", "reason", reason)
	if start {
		go c.reconnectLoop()
	}
	c.notify(EventDisconnected, reason)
}

// reconnectLoop tries to reconnect, waiting between attempts from
// backoffMin, doubling up to backoffMax, until it succeeds or Close.
func (c *Conn) reconnectLoop() {
	delay := c.backoffMin
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(delay)
		select {
		case <-c.stop:
			t.Stop()
			c.endReconnect()
			return
		case <-t.C:
		}
		err := c.reconnect(attempt)
		if err == nil {
			return
		}
		if errors.Is(err, ErrClosed) {
			c.endReconnect()
			return
		}
		delay = min(2*delay, c.backoffMax)
		c.log.Debug("reconnecting to libvirt failed", "attempt", attempt, "err", err, "next in", delay)
	}
}

func (c *Conn) endReconnect() {
	c.mu.Lock()
	c.reconnecting = false
	c.mu.Unlock()
}

// reconnect opens a new connection and puts it in place of the lost one.
func (c *Conn) reconnect(attempt int) error {
	lv, err := c.dialTimeout()
	if err != nil {
		return err
	}
	var ids map[*subscriber]int
	abandon := func() {
		for _, id := range ids {
			_ = lv.DomainEventDeregister(id)
		}
		_ = lv.UnregisterCloseCallback()
		_, _ = lv.Close()
	}
	if err := lv.SetKeepAlive(keepAliveInterval, keepAliveCount); err != nil {
		c.log.Debug("libvirt keepalive not set", "err", clean(err))
	}

	c.regMu.Lock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.regMu.Unlock()
		abandon()
		return ErrClosed
	}
	gen := c.gen + 1
	subs := make([]*subscriber, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()

	if err := c.watchClose(lv, gen); err != nil {
		c.log.Debug("libvirt close callback not registered", "err", clean(err))
	}
	ids = map[*subscriber]int{}
	for _, s := range subs {
		id, err := lv.DomainEventLifecycleRegister(nil, c.lifecycleCallback(s))
		if err != nil {
			c.regMu.Unlock()
			abandon()
			return fmt.Errorf("register lifecycle events: %w", clean(err))
		}
		ids[s] = id
	}
	// Calls still running on the old connection fail fast (it is gone);
	// wait for them without keeping new ones out.
	for !c.inflight.TryLock() {
		select {
		case <-c.stop:
			c.regMu.Unlock()
			abandon()
			return ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
	c.mu.Lock()
	if c.closed { // Close waits for regMu before it touches c.lv
		c.mu.Unlock()
		c.inflight.Unlock()
		c.regMu.Unlock()
		abandon()
		return ErrClosed
	}
	old, oldIDs := c.lv, c.callbackIDs
	c.lv, c.gen = lv, gen
	c.callbackIDs = map[int]bool{}
	for s, id := range ids {
		s.id = id
		c.callbackIDs[id] = true
	}
	downFor := time.Since(c.downSince)
	c.down, c.reconnecting, c.downReason = false, false, ""
	close(c.up)
	c.mu.Unlock()
	c.inflight.Unlock()
	// Still under regMu, which Close takes before it closes c.lv.
	alive, aerr := lv.IsAlive()
	c.regMu.Unlock()

	// Nothing reaches the old connection any more but the domain and pool
	// handles made on it, which hold their own references.
	go func() {
		for id := range oldIDs {
			_ = old.DomainEventDeregister(id)
		}
		_ = old.UnregisterCloseCallback()
		_, _ = old.Close()
	}()
	c.log.Info("reconnected to libvirt", "after", downFor.Round(time.Millisecond), "attempts", attempt, "subscribers", len(subs))
	c.notify(EventReconnected, fmt.Sprintf("after %v", downFor.Round(time.Millisecond)))
	if aerr != nil || !alive {
		c.markDisconnected(gen, "lost again right after reconnecting")
	}
	return nil
}

// dialTimeout opens a connection, giving up after the call timeout or at
// Close (a connection that comes later is closed).
func (c *Conn) dialTimeout() (*libvirt.Connect, error) {
	type result struct {
		lv  *libvirt.Connect
		err error
	}
	ch := make(chan result, 1)
	var handoff sync.Mutex
	abandoned := false
	go func() {
		lv, err := c.dial(c.uri)
		handoff.Lock()
		defer handoff.Unlock()
		if abandoned {
			if err == nil {
				_, _ = lv.Close()
			}
			return
		}
		ch <- result{lv, err}
	}()
	t := time.NewTimer(c.callTimeout)
	defer t.Stop()
	var why error
	select {
	case r := <-ch:
		return r.lv, r.err
	case <-t.C:
		why = fmt.Errorf("connect: %w", context.DeadlineExceeded)
	case <-c.stop:
		why = ErrClosed
	}
	handoff.Lock()
	defer handoff.Unlock()
	select {
	case r := <-ch:
		return r.lv, r.err
	default:
		abandoned = true
	}
	return nil, why
}

// Connected reports whether the connection is up: not lost, not closed.
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down && !c.closed
}

// WaitConnected waits until the connection is up again after a loss
// (at once when it is up), until ctx ends or the Conn is closed.
func (c *Conn) WaitConnected(ctx context.Context) error {
	for {
		c.mu.Lock()
		closed, down, up := c.closed, c.down, c.up
		c.mu.Unlock()
		switch {
		case closed:
			return ErrClosed
		case !down:
			return nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return fmt.Errorf("waiting for libvirt %s: %w", c.uri, ctx.Err())
		}
	}
}
