package orchestrator

import (
	"context"
	"github.com/gpuvm/gpuvm/pkg/api"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// rulesLoop applies the timed rules of sharing (leases.go: leases and idle
// stop; windows.go; preempt.go) and keeps the bookings of reservations
// (reservations.go): it starts stops and deletes as operations, which the
// dispatcher hands to the lifecycle.
type rulesLoop struct {
	st       rulesStore
	log      *slog.Logger
	backends backendSet
	idle     monitor.IdleDetector
	notifier Notifier
	leader   Leader
	// placement is what the rules read the placement from (the
	// dispatcher's state of a round).
	placement interface {
		placementState(ctx context.Context, cfg *config.Config, now time.Time, kinds []string) (*state, error)
	}
	bookings *bookingState // shared with the dispatcher
	wake     func()
	settings func() rulesSettings
	rules    rules // the notices given (leases.go)
}

// rulesStore is what the rules of sharing and the bookings ask of the
// database.
type rulesStore interface {
	Now() time.Time
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
	GetVM(ctx context.Context, id string) (*store.VM, error)
	ListUnfinishedOperations(ctx context.Context) ([]store.Operation, error)
	ListAllocations(ctx context.Context, vmID string) ([]store.Allocation, error)
	ListLiveAllocations(ctx context.Context, host string) ([]store.Allocation, error)
	WarnLease(ctx context.Context, id string, leaseEnd time.Time, e *store.Event) (bool, error)
	AppendEvent(ctx context.Context, e *store.Event) error
	ListEventsSince(ctx context.Context, afterID int64, f store.EventFilter) ([]store.Event, error)
	GetUser(ctx context.Context, name string) (*store.User, error)
	ListReservations(ctx context.Context, f store.ReservationFilter) ([]store.Reservation, error)
	BookReservation(ctx context.Context, r *store.Reservation, check func(tx *store.Store) error) error
	BookingStamp(ctx context.Context) (store.BookingStamp, error)
	DriverChanges(ctx context.Context) ([]api.DriverChange, error)
}

// rulesSettings are the rules' settings, read at each round.
type rulesSettings struct {
	// Notice is the scheduler's preemption notice (Config.Scheduler).
	Notice time.Duration
	// Config is the configuration in force: profiles (leases), policy.
	Config *config.Config
}
