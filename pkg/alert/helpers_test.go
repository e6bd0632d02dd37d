package alert

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const testHost = "gpu01"

// newFakeClock is the clock shared by a test's store, monitor and rules.
func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
}

// testLog logs into a buffer the test may read.
func testLog(testing.TB) (*slog.Logger, *logtest.Buffer) { return logtest.New() }

// newStore opens a SQLite database in the test's directory on clock.
func newStore(t testing.TB, clock *clocktest.Clock) *store.Store {
	t.Helper()
	return storetest.New(t, storetest.WithClock(clock.Now), storetest.WithLogger(storetest.Logger(t)))
}

// fixedSource is a monitor.Source whose reading the test sets.
type fixedSource struct {
	mu  sync.Mutex
	r   monitor.Reading
	err error
}

func (f *fixedSource) Read(context.Context) (monitor.Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.r
	r.GPUs = append([]monitor.GPUReading(nil), f.r.GPUs...)
	r.Instances = append([]monitor.InstanceReading(nil), f.r.Instances...)
	return r, f.err
}

func (f *fixedSource) Describe() string { return "test source" }

func (f *fixedSource) set(fn func(r *monitor.Reading)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.r)
}
