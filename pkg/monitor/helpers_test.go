package monitor

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const testHost = "gpu01"

// newFakeClock is the clock shared by a test's store and monitor.
func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLog logs to the test's output and into a buffer the test may read.
func testLog(t testing.TB) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

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
	ctx := context.Background()
	if _, err := st.GetUser(ctx, owner); err != nil {
		if err := st.CreateUser(ctx, &store.User{Name: owner}); err != nil {
			t.Fatal(err)
		}
	}
	vm := &store.VM{Name: name, Owner: owner, Profile: "p", Hours: 8}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
		t.Fatal(err)
	}
	claim.Host = testHost
	if claim.Backend == "" {
		claim.Backend = string(claim.Kind)
	}
	allocs, err := st.ClaimAllocation(ctx, vm.ID, []store.SlotClaim{claim})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkAllocationCreated(ctx, allocs[0].ID, deviceID, "{}"); err != nil {
		t.Fatal(err)
	}
	host := testHost
	vm, err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	return vm
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
