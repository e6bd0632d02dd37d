package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fleetDuties is what this orchestrator does as one node of a fleet
// (fleet.go): it says which VMs are its own to run and whether it places,
// wakes the other nodes, reads the hosts a round places on, and queues
// again the VMs of nodes that went down. With no fleet it is one server
// that always leads.
type fleetDuties struct {
	host     string // this node (Config.Host)
	st       fleetStore
	log      *slog.Logger
	fleet    Fleet // nil: one server
	backends backendSet
	// spec is this host's GPUs as the scheduler sees them
	// (Orchestrator.hostSpec).
	spec     func(cfg *config.Config, hi gpu.HostInventory) (scheduler.HostSpec, []scheduler.Allocation)
	wake     func()
	settings func() fleetSettings
	// remote is the fleet's other nodes as last read (fleet.go).
	remote remoteHosts
}

// fleetStore is what the fleet duties ask of the database.
type fleetStore interface {
	Now() time.Time
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
	ListHosts(ctx context.Context) ([]store.Host, error)
	GetVMs(ctx context.Context, ids []string) (map[string]*store.VM, error)
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
}

// fleetSettings are the fleet duties' settings.
type fleetSettings struct {
	// HostTimeout: Config's (0: config.DefaultHeartbeatTimeout).
	HostTimeout time.Duration
}
