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
// When libvirtd goes away the Conn reconnects by itself (see Conn); calls
// made meanwhile fail at once with ErrDisconnected rather than hang.
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
	"net/url"
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

	// DefaultReconnectMin and DefaultReconnectMax bound the wait between
	// two attempts to reconnect to libvirtd (it doubles after each failure).
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 10 * time.Second
)

// Conn is a connection to libvirt. It is safe for concurrent use.
//
// When the connection is lost (libvirtd stopped or restarted, keepalive
// timeout), the Conn reconnects in the background, with a wait between
// attempts that doubles from DefaultReconnectMin up to DefaultReconnectMax
// (see WithReconnectBackoff), until it succeeds or Close is called. Calls
// made meanwhile fail at once with an error that wraps ErrDisconnected; the
// subscribers of Events keep their channel, get EventDisconnected and
// EventReconnected, and should then resynchronise with List (events that
// happened in between are lost). Domains and volumes live in libvirtd, not
// in the Conn: nothing is forgotten across a reconnect.
type Conn struct {
	uri          string
	log          *slog.Logger
	driver       string // "QEMU", "Test", ...
	callTimeout  time.Duration
	startTimeout time.Duration

	// lv is the current libvirt connection and gen its generation (0 for
	// the first, +1 per reconnect). Both change only while holding
	// inflight exclusively and mu; a libvirt call reads them under
	// inflight shared.
	lv  *libvirt.Connect
	gen uint64

	backoffMin, backoffMax time.Duration
	// dial opens a libvirt connection (libvirt.NewConnect; tests replace it).
	dial func(uri string) (*libvirt.Connect, error)
	// regMu orders the (de)registration of event callbacks with the swap
	// of connections, so that every subscriber is registered on the
	// current one.
	regMu sync.Mutex

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

	mu           sync.Mutex
	closed       bool
	stop         chan struct{} // closed by Close
	down         bool          // the connection is lost; reconnecting
	downSince    time.Time
	downReason   string
	up           chan struct{} // while down: closed once reconnected (or closed)
	reconnecting bool          // the reconnect loop runs
	callbackIDs  map[int]bool  // event callbacks registered on lv
	subs         map[*subscriber]bool
	localFiles   map[string]bool            // volume files written without libvirt (see UploadVolume)
	owned        map[string]domain.Metadata // gpuvm domains seen, by UUID (events of vanished ones)
	// localUploads (this package's tests) has UploadVolume on the test
	// driver write the bytes to the volume's path, and EnsurePool make the
	// pool's directory, rather than fail with ErrNoUpload.
	localUploads bool
	// testDiskDir (WithTestDiskDir, tests only) holds the files that stand
	// for the test driver's disk overlays in the disk snapshots.
	testDiskDir string

	// testHook, when set (tests only, or WithCallHook), runs inside every
	// libvirt call, before it; an error it returns stands for the call's.
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

// WithTestDiskDir makes the disk snapshots (snapshots.go), on libvirt's
// test driver only, work on the file dir/NAME for a domain's overlay NAME:
// the test driver's volumes are no files qemu-img could snapshot. The
// end-to-end tests (test/e2e) make that file with qemu-img, so that a
// snapshot or restore of a stopped VM runs the real qemu-img without a
// guest. Any other driver ignores it.
func WithTestDiskDir(dir string) Option { return func(c *Conn) { c.testDiskDir = dir } }

// WithDomainType skips the accelerator check and uses t.
func WithDomainType(t domain.Type) Option { return func(c *Conn) { c.forcedType = t } }

// WithReconnectBackoff bounds the wait between two attempts to reconnect
// after the connection is lost: it starts at first and doubles up to limit
// (defaults DefaultReconnectMin, DefaultReconnectMax).
func WithReconnectBackoff(first, limit time.Duration) Option {
	return func(c *Conn) {
		if first > 0 {
			c.backoffMin = first
		}
		if limit >= c.backoffMin {
			c.backoffMax = limit
		}
	}
}

// WithCallHook is for fault-injection tests only: hook runs before every
// libvirt call the Conn makes, with the call's name ("define domain",
// "start domain", "create volume", ...), in the goroutine that makes the
// call; an error it returns stands for the call's. A test can stop
// libvirtd from the hook to see what a step does when the daemon goes away.
func WithCallHook(hook func(op string) error) Option { return func(c *Conn) { c.testHook = hook } }

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

// LocalSystem reports whether the connection is to this machine's system
// libvirtd (qemu:///system): only then are its run directories and
// processes this machine's to look at.
func (c *Conn) LocalSystem() bool {
	u, err := url.Parse(c.uri)
	return err == nil && u.Scheme == "qemu" && u.Host == "" && u.Path == "/system"
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
		backoffMin:   DefaultReconnectMin,
		backoffMax:   DefaultReconnectMax,
		dial:         libvirt.NewConnect,
		stop:         make(chan struct{}),
		callbackIDs:  map[int]bool{},
		subs:         map[*subscriber]bool{},
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
		return c.dial(uri)
	}, func(lv *libvirt.Connect) { _, _ = lv.Close() })
	if err != nil {
		return nil, fmt.Errorf("libvirt %s: connect: %w", uri, err)
	}
	c.lv = lv
	if err := c.do(ctx, "keepalive", func() error { return lv.SetKeepAlive(keepAliveInterval, keepAliveCount) }); err != nil {
		// Local drivers (test:///) have no RPC to keep alive.
		c.log.Debug("libvirt keepalive not set", "err", err)
	}
	if err := c.do(ctx, "close callback", func() error { return c.watchClose(lv, 0) }); err != nil {
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
	ok, err := call(ctx, c, "is alive", 0, func() (bool, error) { return c.lv.IsAlive() }, nil)
	return err == nil && ok
}

// ErrClosed says the connection was closed.
var ErrClosed = errors.New("libvirt connection closed")

// Close deregisters event callbacks and closes the connection, once every
// libvirt call still running has returned, and stops reconnecting. When
// some call is still blocked after the call timeout, Close returns and the
// connection is closed in the background as soon as it can be. Close is
// idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed || c.lv == nil {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	if c.down {
		close(c.up) // wakes WaitConnected
	}
	c.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		// After a reconnect in progress has swapped connections or given up.
		c.regMu.Lock()
		defer c.regMu.Unlock()
		c.inflight.Lock()
		defer c.inflight.Unlock()
		c.mu.Lock()
		ids := make([]int, 0, len(c.callbackIDs))
		for id := range c.callbackIDs {
			ids = append(ids, id)
		}
		c.callbackIDs = map[int]bool{}
		c.mu.Unlock()
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
// then succeeds, release (when not nil) frees what it returned. While the
// connection is lost, call fails at once with ErrDisconnected; a call that
// fails because the connection went away meanwhile says so too.
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
	down, since, reason := c.down && op != "connect", c.downSince, c.downReason
	c.mu.Unlock()
	if closed {
		return zero, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if down {
		return zero, fmt.Errorf("%s: %w", op, &DisconnectedError{URI: c.uri, Since: since, Reason: reason})
	}
	hook := c.testHook
	// abandoned is set by the caller when it stops waiting; then the
	// worker frees what f returned, still holding inflight.
	var handoff sync.Mutex
	abandoned := false
	go func() {
		c.inflight.RLock()
		defer c.inflight.RUnlock()
		var r result
		if hook != nil {
			r.err = hook(op)
		}
		if r.err == nil {
			lv, gen := c.lv, c.gen
			r.v, r.err = f()
			if r.err != nil && op != "connect" && lv != nil {
				if lost, dead := connectionLost(lv, r.err); lost {
					de := &DisconnectedError{URI: c.uri, Err: clean(r.err)}
					if dead {
						c.markDisconnected(gen, "a call failed: "+de.Err.Error())
						c.mu.Lock()
						de.Since, de.Reason = c.downSince, c.downReason
						c.mu.Unlock()
					}
					r.err = de
				}
			}
		}
		handoff.Lock()
		defer handoff.Unlock()
		if abandoned {
			if r.err == nil && release != nil {
				release(r.v)
			}
			return
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		handoff.Lock()
		defer handoff.Unlock()
		select {
		case r := <-ch: // it came as the deadline passed
			return r.v, r.err
		default:
			abandoned = true
		}
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

// Versions are the versions libvirt reports on a connection, in libvirt's
// encoding (major*1,000,000 + minor*1,000 + release).
type Versions struct {
	// Driver is the hypervisor driver ("QEMU", "Test").
	Driver string
	// Library is libvirt's own version (virConnectGetLibVersion: the
	// daemon's, for a remote connection).
	Library uint32
	// Hypervisor is the hypervisor's version (virConnectGetVersion): QEMU's
	// for the QEMU driver; the test driver reports its own (0.0.2), not
	// any QEMU's.
	Hypervisor uint32
}

// Versions reads libvirt's and the hypervisor's versions.
func (c *Conn) Versions(ctx context.Context) (Versions, error) {
	lib, err := call(ctx, c, "libvirt version", 0, func() (uint32, error) { return c.lv.GetLibVersion() }, nil)
	if err != nil {
		return Versions{}, err
	}
	hv, err := call(ctx, c, "hypervisor version", 0, func() (uint32, error) { return c.lv.GetVersion() }, nil)
	if err != nil {
		return Versions{}, err
	}
	return Versions{Driver: c.driver, Library: lib, Hypervisor: hv}, nil
}
