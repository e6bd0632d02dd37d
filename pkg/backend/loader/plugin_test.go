package loader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// The test binary doubles as every backend plugin (the self-exec pattern of
// Nomad's helper/pluginutils/loader): the wrapper scripts the tests install
// in a plugin dir run it with these variables set, and TestMain serves a fake
// backend instead of running the tests.
const (
	envName  = "GPUVM_TEST_PLUGIN" // the backend name to serve as
	envMode  = "GPUVM_TEST_MODE"   // how the fake behaves: see fakeBackend
	envState = "GPUVM_TEST_STATE"  // where it leaves its pid file and markers
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envName); name != "" {
		servePlugin(name, os.Getenv(envMode), os.Getenv(envState))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func servePlugin(name, mode, state string) {
	touch(state, fmt.Sprintf("%s.%d", name, os.Getpid()))
	if mode == "exit-at-start" {
		os.Exit(2)
	}
	backend.Serve(&fakeBackend{name: name, mode: mode, state: state})
}

func touch(dir, name string) {
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		panic(err)
	}
}

// fakeBackend behaves according to its mode:
//
//	normal             serves every call, speaking API v1 only (polled)
//	watch              serves every call, speaking v1 and v1.1 (pushes its inventory)
//	wrong-name         calls itself "impostor" in Info
//	no-common-api      speaks only API versions v0 and v9
//	exit-at-start      exits before serving
//	crash-on-create    exits in Create
//	slow-create        leaves a create.<pid> marker and blocks in Create until ctx ends
//	exit-after-config  exits 10ms after Configure
//	exit-after-300ms   exits 300ms after Configure
type fakeBackend struct {
	name, mode, state string

	mu      sync.Mutex
	cfg     *backend.Config
	devices []backend.Device // made by Create, listed by Inventory
}

func (f *fakeBackend) Info(context.Context) (backend.Info, error) {
	info := backend.Info{Name: f.name, Version: "1.2.3", APIVersions: []string{"v1"}, Description: "fake"}
	switch f.mode {
	case "wrong-name":
		info.Name = "impostor"
	case "no-common-api":
		info.APIVersions = []string{"v0", "v9"}
	case "watch":
		info.APIVersions = []string{"v1", backend.APIVersionWatch}
	}
	return info, nil
}

func (f *fakeBackend) Configure(_ context.Context, cfg backend.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg = &cfg
	slog.Warn("fake backend configured", "api_version", cfg.APIVersion)
	fmt.Fprintln(os.Stderr, "[ERROR] fake backend wrote to stderr")
	exitAfter := map[string]time.Duration{"exit-after-config": 10 * time.Millisecond, "exit-after-300ms": 300 * time.Millisecond}
	if d, ok := exitAfter[f.mode]; ok {
		time.AfterFunc(d, func() { os.Exit(4) })
	}
	return nil
}

func (f *fakeBackend) config() (backend.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg == nil {
		return backend.Config{}, backend.Errorf(backend.CodeInternal, "", "not configured")
	}
	return *f.cfg, nil
}

// Inventory reports the Config it got: Host is the SysFSRoot, and Notes the
// API version and pid; and the devices Create made.
func (f *fakeBackend) Inventory(context.Context) (backend.Inventory, error) {
	cfg, err := f.config()
	if err != nil {
		return backend.Inventory{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return backend.Inventory{
		Backend: f.name,
		Host:    cfg.SysFSRoot,
		Notes:   []string{"api " + cfg.APIVersion, fmt.Sprint("pid ", os.Getpid())},
		Devices: slices.Clone(f.devices),
	}, nil
}

func (f *fakeBackend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	if _, err := f.config(); err != nil {
		return backend.Device{}, err
	}
	switch f.mode {
	case "crash-on-create":
		os.Exit(3)
	case "slow-create":
		touch(f.state, fmt.Sprint("create.", os.Getpid()))
		select {
		case <-ctx.Done():
			return backend.Device{}, ctx.Err()
		case <-time.After(time.Minute):
		}
	}
	d := backend.Device{ID: "dev-1", Kind: gpu.KindVGPU, GPU: req.GPU, VMUUID: req.VMUUID}
	if req.DeviceUUID != "" {
		d.ID = req.DeviceUUID
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = append(f.devices, d)
	return d, nil
}

func (f *fakeBackend) Remove(_ context.Context, req backend.RemoveRequest) error {
	if _, err := f.config(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = slices.DeleteFunc(f.devices, func(d backend.Device) bool { return d.ID == req.ID })
	return nil
}

func (f *fakeBackend) Health(context.Context) (backend.Health, error) {
	return backend.Health{OK: true, Detail: fmt.Sprint("pid ", os.Getpid())}, nil
}
