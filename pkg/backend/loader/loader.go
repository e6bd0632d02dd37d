// Package loader starts gpuvmd's backends: it finds their binaries in the
// plugin directory, runs each as a go-plugin process, checks its name,
// negotiates the API version, configures it, and restarts it whenever it
// exits, until Close.
package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// Config says which backends to start and how.
type Config struct {
	// Dir holds the backend binaries, named backend.BinaryPrefix+name.
	Dir string
	// Enabled names the backends to start; empty means every one of
	// backend.Names found in Dir.
	Enabled []string
	// Backend is what every backend's Configure gets; its APIVersion is
	// ignored and replaced by the version negotiated with that backend.
	Backend backend.Config
	// Logger receives the loader's logs and the plugins' (default
	// slog.Default()).
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait before restarting a plugin
	// that exited (default 250ms and 30s). The wait doubles with each
	// restart, and starts over once a plugin has run for MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// InventoryResync is how often a backend that pushes its inventory
	// (API v1.1, inventory.go) re-reads the host for changes it did not
	// make (default backend.DefaultResync), and InventorySettle how long
	// after a Create or Remove (default backend.DefaultSettle; negative:
	// at once): the loader applies those itself meanwhile. InventoryWait
	// bounds how long Inventories waits for a pushed inventory it needs
	// (the backend is restarting, or a Create or Remove failed) before it
	// asks the backend instead (default 5s).
	InventoryResync, InventorySettle, InventoryWait time.Duration
}

// Loader runs the backend plugins.
type Loader struct {
	cfg Config
	log *slog.Logger
	// stableAfter is how long a plugin must run for its backoff to start
	// over: MaxBackoff.
	stableAfter time.Duration

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per supervisor

	mu       sync.Mutex
	started  bool
	closed   bool
	handles  map[string]*handle
	failures map[string]error
}

// New returns a Loader for cfg; Start starts it.
func New(cfg Config) *Loader {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.InventoryResync <= 0 {
		cfg.InventoryResync = backend.DefaultResync
	}
	if cfg.InventoryWait <= 0 {
		cfg.InventoryWait = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Loader{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "backend-loader", "plugin_dir", cfg.Dir),
		stableAfter: cfg.MaxBackoff,
		ctx:         ctx,
		cancel:      cancel,
		handles:     map[string]*handle{},
		failures:    map[string]error{},
	}
}

// DefaultDir is the plugins directory next to the running executable if there
// is one, else /usr/lib/gpuvm/plugins.
func DefaultDir() string {
	exe, _ := os.Executable()
	return defaultDir(exe)
}

func defaultDir(exe string) string {
	if exe != "" {
		dir := filepath.Join(filepath.Dir(exe), "plugins")
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return "/usr/lib/gpuvm/plugins"
}

// Start starts every enabled backend found in Dir and supervises those that
// came up. ctx bounds the start; supervision lasts until Close. A binary that
// is missing or not executable is logged and skipped. The error lists every
// backend that failed to start (see Failures); the others keep running.
func (l *Loader) Start(ctx context.Context) error {
	l.mu.Lock()
	if l.closed || l.started {
		l.mu.Unlock()
		return errors.New("backend loader: already started or closed")
	}
	l.started = true
	l.wg.Add(1) // Close waits for the start to end
	l.mu.Unlock()
	defer l.wg.Done()

	bins, err := l.scan()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()

	var wg sync.WaitGroup
	for name, path := range bins {
		wg.Go(func() {
			inst, err := l.launch(ctx, name, path)
			if err != nil {
				l.log.Error("backend failed to start", "backend", name, "file", path, "error", err)
				l.mu.Lock()
				l.failures[name] = err
				l.mu.Unlock()
				return
			}
			l.log.Info("backend started", "backend", name, "pid", inst.pid, "version", inst.info.Version, "api_version", inst.apiVersion)
			l.adopt(name, path, inst)
		})
	}
	wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make([]error, 0, len(l.failures))
	for _, name := range slices.Sorted(maps.Keys(l.failures)) {
		errs = append(errs, l.failures[name])
	}
	return errors.Join(errs...)
}

// scan returns the path of each enabled backend's binary in Dir, by name.
func (l *Loader) scan() (map[string]string, error) {
	entries, err := os.ReadDir(l.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading backend plugin dir: %w", err)
	}
	found, skipped := map[string]string{}, map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), backend.BinaryPrefix)
		if !ok || name == "" {
			continue
		}
		path := filepath.Join(l.cfg.Dir, e.Name())
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			l.log.Warn("skipping unreadable file in plugin dir", "file", path, "error", err)
		case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
			l.log.Warn("skipping file in plugin dir that is not an executable", "file", path, "mode", fi.Mode())
		default:
			found[name] = path
			continue
		}
		skipped[name] = true
	}

	enabled := l.cfg.Enabled
	if len(enabled) == 0 {
		enabled = backend.Names
	}
	bins := map[string]string{}
	for _, name := range enabled {
		if path, ok := found[name]; ok {
			bins[name] = path
		} else if !skipped[name] {
			l.log.Warn("enabled backend has no binary in plugin dir", "backend", name, "file", backend.BinaryPrefix+name)
		}
	}
	for name, path := range found {
		if _, ok := bins[name]; !ok {
			l.log.Info("skipping backend that is not enabled", "backend", name, "file", path)
		}
	}
	return bins, nil
}

// instance is one running plugin process.
type instance struct {
	client     *plugin.Client
	impl       backend.Backend
	done       context.Context // ends when the process exits
	info       backend.Info
	apiVersion string
	pid        int
	// Of a backend that pushes its inventory (inventory.go), guarded by
	// the handle's mu: watched until the stream turns out to be
	// unsupported; inv is the latest pushed (nil: none yet, or the stream
	// broke), read after changes of its Create and Remove calls.
	watched bool
	inv     *backend.Inventory
	changes uint64
	// patches are the Creates and Removes that returned since, applied
	// to inv until a push covers them; mustSee is the change count of the
	// latest call that failed (which only a push can say the outcome
	// of), that inv must cover to be fresh.
	patches []patch
	mustSee uint64
}

// startTimeout bounds the bring-up of one plugin process.
const startTimeout = time.Minute

// launch starts the plugin at path and brings it up as backend name; on any
// failure the process is killed.
func (l *Loader) launch(ctx context.Context, name, path string) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	log := backend.NewHCLogger(l.cfg.Logger.With("backend", name))
	// What the plugin writes to os.Stdout and os.Stderr once serving comes
	// over gRPC; its log lines come on the process's stderr.
	stdio := log.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	p := &watchedPlugin{GRPCPlugin: backend.GRPCPlugin{Name: name}}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  backend.Handshake,
		Plugins:          map[string]plugin.Plugin{backend.PluginType: p},
		Cmd:              exec.Command(path),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     startTimeout,
		Logger:           log,
		SyncStdout:       stdio,
		SyncStderr:       stdio,
	})
	inst, err := l.bringUp(ctx, client, p, name)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return inst, nil
}

func (l *Loader) bringUp(ctx context.Context, client *plugin.Client, p *watchedPlugin, name string) (*instance, error) {
	rpc, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("starting plugin: %w", err)
	}
	raw, err := rpc.Dispense(backend.PluginType)
	if err != nil {
		return nil, fmt.Errorf("dispensing plugin: %w", err)
	}
	impl := raw.(backend.Backend)
	info, err := impl.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking plugin info: %w", err)
	}
	if info.Name != name {
		return nil, fmt.Errorf("plugin calls itself %q but its binary is named for %q", info.Name, name)
	}
	version, err := backend.NegotiateAPIVersion(backend.APIVersions, info.APIVersions)
	if err != nil {
		return nil, err
	}
	cfg := l.cfg.Backend
	cfg.APIVersion = version
	if err := impl.Configure(ctx, cfg); err != nil {
		return nil, fmt.Errorf("configuring plugin: %w", err)
	}
	inst := &instance{client: client, impl: impl, done: p.done, info: info, apiVersion: version}
	if _, ok := impl.(backend.InventoryWatcher); ok && backend.SupportsWatch(version) {
		inst.watched = true
	}
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	return inst, nil
}

// watchedPlugin keeps the plugin-lifetime ctx go-plugin hands to GRPCClient.
type watchedPlugin struct {
	backend.GRPCPlugin
	done context.Context
}

func (p *watchedPlugin) GRPCClient(ctx context.Context, b *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	p.done = ctx
	return p.GRPCPlugin.GRPCClient(ctx, b, c)
}

// adopt registers a started backend and supervises it, or kills it if the
// loader has been closed meanwhile.
func (l *Loader) adopt(name, path string, inst *instance) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		inst.client.Kill()
		return
	}
	h := &handle{name: name, inst: inst}
	l.handles[name] = h
	l.wg.Add(1)
	l.mu.Unlock()
	l.watch(h, inst)
	go l.supervise(h, path, inst)
}

// supervise restarts the backend whenever its process exits, waiting longer
// after each restart, until Close; then it kills the process.
func (l *Loader) supervise(h *handle, path string, inst *instance) {
	defer l.wg.Done()
	log := l.log.With("backend", h.name)
	backoff := l.cfg.MinBackoff
	for {
		up := time.Now()
		select {
		case <-l.ctx.Done():
			h.set(nil, "backend loader closed")
			inst.client.Kill()
			return
		case <-inst.done.Done():
		}
		h.set(nil, "plugin process exited; restarting")
		inst.client.Kill() // reap it and release its pipes
		uptime := time.Since(up)
		if uptime >= l.stableAfter {
			backoff = l.cfg.MinBackoff
		}
		log.Warn("backend plugin exited", "pid", inst.pid, "uptime", uptime.Round(time.Millisecond))

		for attempt := 1; ; attempt++ {
			log.Info("restarting backend plugin", "attempt", attempt, "backoff", backoff)
			select {
			case <-l.ctx.Done():
				h.set(nil, "backend loader closed")
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, l.cfg.MaxBackoff)
			next, err := l.launch(l.ctx, h.name, path)
			if err == nil {
				inst = next
				break
			}
			log.Error("restarting backend plugin failed", "attempt", attempt, "error", err)
		}
		log.Info("backend plugin restarted", "pid", inst.pid, "api_version", inst.apiVersion)
		h.set(inst, "")
		l.watch(h, inst)
	}
}

// Backend returns the handle of a running backend. The handle stays valid
// across restarts; while the plugin is down its methods fail with
// backend.CodeUnavailable.
func (l *Loader) Backend(name string) (backend.Backend, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.handles[name]
	return h, ok
}

// Names lists the backends that started and are supervised, sorted.
func (l *Loader) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.handles))
}

// Failures returns why each backend that failed to start did, by name.
func (l *Loader) Failures() map[string]error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.failures)
}

// Close kills every plugin and stops supervising them. It may be called more
// than once.
func (l *Loader) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	clear(l.handles)
	l.mu.Unlock()
}

// handle is the stable Backend for one backend name; it forwards to the
// current plugin instance.
type handle struct {
	name string
	mu   sync.RWMutex
	inst *instance // nil while the plugin is down
	why  string    // why inst is nil
	// Of the pushed inventories (inventory.go): gen counts them, at is
	// when the latest came, and wake is closed (and replaced) whenever
	// inst or its inventory changes.
	gen  uint64
	at   time.Time
	wake chan struct{}
}

var _ backend.Backend = (*handle)(nil)

func (h *handle) set(inst *instance, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inst, h.why = inst, why
	h.changed()
}

func (h *handle) current() (backend.Backend, error) {
	inst, err := h.currentInstance()
	if err != nil {
		return nil, err
	}
	return inst.impl, nil
}

func (h *handle) currentInstance() (*instance, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.inst == nil {
		return nil, &backend.Error{Code: backend.CodeUnavailable, Reason: fmt.Sprintf("backend %s: %s", h.name, h.why)}
	}
	return h.inst, nil
}

func (h *handle) Info(ctx context.Context) (backend.Info, error) {
	b, err := h.current()
	if err != nil {
		return backend.Info{}, err
	}
	return b.Info(ctx)
}

func (h *handle) Configure(ctx context.Context, cfg backend.Config) error {
	b, err := h.current()
	if err != nil {
		return err
	}
	return b.Configure(ctx, cfg)
}

func (h *handle) Inventory(ctx context.Context) (backend.Inventory, error) {
	b, err := h.current()
	if err != nil {
		return backend.Inventory{}, err
	}
	return b.Inventory(ctx)
}

func (h *handle) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	inst, err := h.currentInstance()
	if err != nil {
		return backend.Device{}, err
	}
	d, err := inst.impl.Create(ctx, req)
	h.applied(inst, patch{create: &d, intent: req.DeviceUUID}, err)
	return d, err
}

func (h *handle) Remove(ctx context.Context, req backend.RemoveRequest) error {
	inst, err := h.currentInstance()
	if err != nil {
		return err
	}
	err = inst.impl.Remove(ctx, req)
	h.applied(inst, patch{remove: req.ID}, err)
	return err
}

func (h *handle) Health(ctx context.Context) (backend.Health, error) {
	b, err := h.current()
	if err != nil {
		return backend.Health{}, err
	}
	return b.Health(ctx)
}
