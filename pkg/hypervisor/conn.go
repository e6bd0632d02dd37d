// Package hypervisor is gpuvm's libvirt layer (cgo, libvirt.org/go/libvirt):
// the connection and its event loop, the accelerator check (KVM, or software
// emulation when KVM is missing or unusable), storage (pool, disk overlays,
// cloud-init seed volumes), the lifecycle of gpuvm's domains, their events
// and their consoles.
//
// Every libvirt call runs under a deadline: the context's, capped by the
// connection's call timeout. libvirt calls block and cannot be interrupted,
// so a call that overruns is left to finish in the background while the
// caller gets ctx.Err(); the call may still take effect (a domain may still
// be defined or started), which is why callers keep their intent in the
// database and the reconciler looks again.
//
// gpuvm only touches domains that carry its metadata element
// (domain.Namespace); others on the same host are never listed, changed or
// removed.
package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// Defaults of a connection.
const (
	DefaultCallTimeout  = 60 * time.Second
	DefaultStartTimeout = 5 * time.Minute // pinning a large guest's memory for VFIO takes a while
	keepAliveInterval   = 5               // seconds between keepalive messages
	keepAliveCount      = 3               // unanswered messages before the connection is closed
)

// Conn is a connection to libvirt. It is safe for concurrent use.
type Conn struct {
	uri          string
	log          *slog.Logger
	lv           *libvirt.Connect
	driver       string // "QEMU", "Test", ...
	callTimeout  time.Duration
	startTimeout time.Duration

	probeKernel  string
	probeDir     string
	probeTimeout time.Duration
	forcedType   domain.Type

	accelMu sync.Mutex
	accel   *Accel

	// inflight is held shared by every running libvirt call and
	// exclusively by Close, so that the connection is never closed under a
	// call (an abandoned call may still be running).
	inflight sync.RWMutex

	mu          sync.Mutex
	closed      bool
	callbackIDs map[int]bool
	localFiles  map[string]bool            // volume files written without libvirt (see UploadVolume)
	owned       map[string]domain.Metadata // gpuvm domains seen, by UUID (events of vanished ones)

	// testHook, when set (tests only), runs inside every libvirt call,
	// before it; an error it returns stands for the call's.
	testHook func(op string) error
}

// Option changes how Open connects.
type Option func(*Conn)

// WithCallTimeout caps every libvirt call (default DefaultCallTimeout);
// a shorter context deadline wins.
func WithCallTimeout(d time.Duration) Option { return func(c *Conn) { c.callTimeout = d } }

// WithStartTimeout caps starting a domain (default DefaultStartTimeout).
func WithStartTimeout(d time.Duration) Option { return func(c *Conn) { c.startTimeout = d } }

// WithProbeKernel names the Linux kernel the KVM probe boots (default: the
// host's own, /boot/vmlinuz-$(uname -r)).
func WithProbeKernel(path string) Option { return func(c *Conn) { c.probeKernel = path } }

// WithProbeDir is where the KVM probe writes its serial log (default: the
// system temporary directory).
func WithProbeDir(dir string) Option { return func(c *Conn) { c.probeDir = dir } }

// WithDomainType skips the accelerator check and uses t.
func WithDomainType(t domain.Type) Option { return func(c *Conn) { c.forcedType = t } }

var (
	eventLoopOnce sync.Once
	eventLoopErr  error
)

// startEventLoop registers libvirt's default event loop implementation, once
// per process and before the first connection (lifecycle events and
// keepalive need it), and runs it for the life of the process.
func startEventLoop(log *slog.Logger) error {
	eventLoopOnce.Do(func() {
		if err := libvirt.EventRegisterDefaultImpl(); err != nil {
			eventLoopErr = fmt.Errorf("libvirt event loop: %w", err)
			return
		}
		go func() {
			for {
				if err := libvirt.EventRunDefaultImpl(); err != nil {
					log.Error("libvirt event loop iteration failed", "err", err)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	})
	return eventLoopErr
}

// Open connects to libvirt at uri ("qemu:///system", or "test:///default"
// for tests), with keepalive, logging to log (nil: slog.Default()).
func Open(ctx context.Context, uri string, log *slog.Logger, opts ...Option) (*Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Conn{
		uri:          uri,
		log:          log.With("libvirt", uri),
		callTimeout:  DefaultCallTimeout,
		startTimeout: DefaultStartTimeout,
		probeTimeout: 30 * time.Second,
		callbackIDs:  map[int]bool{},
		localFiles:   map[string]bool{},
		owned:        map[string]domain.Metadata{},
	}
	for _, o := range opts {
		o(c)
	}
	if err := startEventLoop(log); err != nil {
		return nil, err
	}
	lv, err := call(ctx, c, "connect", 0, func() (*libvirt.Connect, error) {
		return libvirt.NewConnect(uri)
	}, func(lv *libvirt.Connect) { _, _ = lv.Close() })
	if err != nil {
		return nil, fmt.Errorf("libvirt %s: connect: %w", uri, err)
	}
	c.lv = lv
	if err := c.do(ctx, "keepalive", func() error { return lv.SetKeepAlive(keepAliveInterval, keepAliveCount) }); err != nil {
		// Local drivers (test:///) have no RPC to keep alive.
		c.log.Debug("libvirt keepalive not set", "err", err)
	}
	if err := c.do(ctx, "close callback", func() error {
		return lv.RegisterCloseCallback(func(_ *libvirt.Connect, reason libvirt.ConnectCloseReason) {
			c.log.Warn("libvirt connection closed", "reason", closeReason(reason))
		})
	}); err != nil {
		c.log.Debug("libvirt close callback not registered", "err", err)
	}
	driver, err := call(ctx, c, "driver type", 0, lv.GetType, nil)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("libvirt %s: driver type: %w", uri, err)
	}
	c.driver = driver
	c.log.Info("connected to libvirt", "driver", driver)
	return c, nil
}

func closeReason(r libvirt.ConnectCloseReason) string {
	switch r {
	case libvirt.CONNECT_CLOSE_REASON_ERROR:
		return "error"
	case libvirt.CONNECT_CLOSE_REASON_EOF:
		return "end of file (libvirtd gone?)"
	case libvirt.CONNECT_CLOSE_REASON_KEEPALIVE:
		return "keepalive timeout"
	case libvirt.CONNECT_CLOSE_REASON_CLIENT:
		return "closed by client"
	}
	return fmt.Sprintf("reason %d", r)
}

// URI is the URI the connection was opened with.
func (c *Conn) URI() string { return c.uri }

// Driver is libvirt's hypervisor driver name ("QEMU", "Test").
func (c *Conn) Driver() string { return c.driver }

func (c *Conn) isTestDriver() bool { return strings.EqualFold(c.driver, "test") }

// Alive reports whether the connection still works.
func (c *Conn) Alive(ctx context.Context) bool {
	ok, err := call(ctx, c, "is alive", 0, c.lv.IsAlive, nil)
	return err == nil && ok
}

// ErrClosed says the connection was closed.
var ErrClosed = errors.New("libvirt connection closed")

// Close deregisters event callbacks and closes the connection, once every
// libvirt call still running has returned. When some call is still blocked
// after the call timeout, Close returns and the connection is closed in the
// background as soon as it can be. Close is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed || c.lv == nil {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ids := make([]int, 0, len(c.callbackIDs))
	for id := range c.callbackIDs {
		ids = append(ids, id)
	}
	c.callbackIDs = map[int]bool{}
	c.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		c.inflight.Lock()
		defer c.inflight.Unlock()
		for _, id := range ids {
			_ = c.lv.DomainEventDeregister(id)
		}
		_ = c.lv.UnregisterCloseCallback()
		refs, err := c.lv.Close()
		if err == nil && refs > 0 {
			c.log.Debug("libvirt connection still referenced after close", "refs", refs)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("libvirt %s: close: %w", c.uri, clean(err))
		}
		return nil
	case <-time.After(c.callTimeout):
		c.log.Warn("libvirt calls still running at close; the connection closes when they return")
		return nil
	}
}

// call runs f, a libvirt call, under ctx and the connection's call timeout
// (or timeout, when not 0). When the deadline passes first it returns
// ctx.Err() wrapped with op; f keeps running in the background and, if it
// then succeeds, release (when not nil) frees what it returned.
func call[T any](ctx context.Context, c *Conn, op string, timeout time.Duration, f func() (T, error), release func(T)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	if timeout == 0 {
		timeout = c.callTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	c.mu.Lock()
	closed := c.closed && op != "connect"
	c.mu.Unlock()
	if closed {
		return zero, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	hook := c.testHook
	go func() {
		c.inflight.RLock()
		defer c.inflight.RUnlock()
		if hook != nil {
			if err := hook(op); err != nil {
				ch <- result{zero, err}
				return
			}
		}
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			r := <-ch
			if r.err == nil && release != nil {
				release(r.v)
			}
		}()
		return zero, fmt.Errorf("%s: %w (libvirt may still complete the call)", op, ctx.Err())
	}
}

// do is call for functions that return only an error.
func (c *Conn) do(ctx context.Context, op string, f func() error) error {
	_, err := call(ctx, c, op, 0, func() (struct{}, error) { return struct{}{}, f() }, nil)
	return err
}

// lvCode is the libvirt error code of err, or -1.
func lvCode(err error) libvirt.ErrorNumber {
	var lv libvirt.Error
	if errors.As(err, &lv) {
		return lv.Code
	}
	return -1
}

// isCode reports whether err is a libvirt error with one of codes.
func isCode(err error, codes ...libvirt.ErrorNumber) bool {
	code := lvCode(err)
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}
