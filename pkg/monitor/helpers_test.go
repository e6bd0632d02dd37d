package monitor

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const testHost = "gpu01"

// newFakeClock is the clock shared by a test's store and monitor.
func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
}

// testLog logs to the test's output and into a buffer the test may read.
func testLog(testing.TB) (*slog.Logger, *logtest.Buffer) { return logtest.New() }

// newStore opens a SQLite database in the test's directory on clock.
func newStore(t testing.TB, clock *clocktest.Clock) *store.Store {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := storetest.New(t, storetest.WithClock(clock.Now), storetest.WithLogger(log))
	return st
}

// runningVM makes a running VM of owner on testHost holding claim, its
// device made as deviceID.
func runningVM(t testing.TB, st *store.Store, owner, name string, claim store.SlotClaim, deviceID string) *store.VM {
	t.Helper()
	return storetest.RunningVM(t, st, testHost, owner, name, claim, deviceID)
}

// fixedSource is a Source whose reading the test sets.
type fixedSource struct {
	mu  sync.Mutex
	r   Reading
	err error
}

func (f *fixedSource) Read(context.Context) (Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.r
	r.GPUs = append([]GPUReading(nil), f.r.GPUs...)
	r.Instances = append([]InstanceReading(nil), f.r.Instances...)
	return r, f.err
}

func (f *fixedSource) Describe() string { return "test source" }

func (f *fixedSource) set(fn func(r *Reading)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.r)
}

// gpuAt is a GPU at addr with every figure known.
func gpuAt(addr string) GPUReading {
	g := NewGPUReading(addr)
	g.Util, g.Temperature, g.PowerWatts, g.MemUsed, g.MemTotal = 0.1, 50, 100, 1<<30, 40<<30
	return g
}
