package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// lifecycle is the VM lifecycle: the steps of a create, a delete, a stop,
// a start and a reboot, each recorded before it is done, and their
// rollback (create.go, delete.go, actions.go), and the watch of booting
// guests (boot.go). The dispatcher decides what runs when; lifecycle does
// it.
type lifecycle struct {
	// host and installation name this server and the gpuvm installation
	// in every domain made (Config.Host, Config.Installation).
	host, installation string
	st                 lifecycleStore
	log                *slog.Logger
	hv                 Hypervisor
	backends           backendSet
	// guests is where a started VM's guest is seen to be up; nil: guests
	// are not watched, and a VM is ready as soon as its domain runs.
	guests Guests
	names  domainNames
	// quota says why a stopped VM without a GPU may not start now (the
	// dispatcher, which admits).
	quota interface {
		startQuota(ctx context.Context, vm *store.VM) error
	}
	fleet *fleetDuties
	wake  func()
	// quotas applies a person's home quota when their home is made or
	// found (homequota.go; nil: none).
	quotas *HomeQuotas
	// testHook, for tests, is called at each Hook* point (WithHook).
	testHook func(vmID, point string) error
	settings func() lifecycleSettings
	// volMu serialises the data disks' work (volumes.go): an API call and
	// the resume at start never make the same volume twice.
	volMu sync.Mutex
	boots bootWatch // the booting VMs (boot.go)
	inits bootWatch // the ready VMs whose cloud-init has not reported yet (boot.go)
	// initsNext is when the watch of inits looks again (checkBoots' goroutine only).
	initsNext time.Time
	// avail checks that a profile's image, kernel and template are here
	// (Config.Availability; nil: not checked).
	avail *images.Availability
	// dial connects to a guest's port (Config.DialGuest; nil: a net.Dialer).
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// virtiofsd finds the virtiofs daemon; nil: homes.FindVirtiofsd.
	virtiofsd func() (string, error)
}

// lifecycleStore is what the lifecycle asks of the database.
type lifecycleStore interface {
	Now() time.Time
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
	GetVM(ctx context.Context, id string) (*store.VM, error)
	UpdateVMState(ctx context.Context, id string, version int64, u store.VMUpdate) (*store.VM, error)
	GetOperation(ctx context.Context, id string) (*store.Operation, error)
	SetOperationStep(ctx context.Context, id, step string) error
	FinishOperation(ctx context.Context, id string, opErr error) error
	ListAllocations(ctx context.Context, vmID string) ([]store.Allocation, error)
	MarkAllocationCreated(ctx context.Context, id int64, deviceID, hostdev string) error
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
	ListEventsSince(ctx context.Context, afterID int64, f store.EventFilter) ([]store.Event, error)
	GetVMCredential(ctx context.Context, vmID string) (*store.VMCredential, error)
	GetTask(ctx context.Context, id string) (*store.Task, error)
	UserUID(ctx context.Context, name string, min, max int64) (int64, error)
	// UserGroups: the owner's groups, for a share's access (shares.go).
	UserGroups(ctx context.Context, names []string) (map[string][]string, error)
	// RecordHomeHost: where a person's home lives (home.go).
	RecordHomeHost(ctx context.Context, user, host string) (string, error)
	AppendEvent(ctx context.Context, e *store.Event) error
}

// lifecycleSettings are the lifecycle's settings, read for each operation
// (Config, and the configuration in force).
type lifecycleSettings struct {
	DomainType          domain.Type
	DetachSimulatedGPUs bool
	ShutdownTimeout     time.Duration
	// BootTimeout, BootCheck: Config's; Rescan is how often the booting
	// VMs are looked for again (Config.ReconcileEvery).
	BootTimeout, BootCheck, Rescan time.Duration
	// InFleet: this orchestrator is one node of a fleet (Config.Fleet).
	InFleet bool
	// Of the configuration in force:
	Profiles map[string]*config.Profile
	Images   map[string]*config.Image
	// RenderCloudInit renders a profile's cloud-init user-data with its
	// template (config.Config.RenderCloudInit).
	RenderCloudInit func(p *config.Profile, in config.CloudInitInput) (string, error)
	Libvirt         config.Libvirt
	// Homes is the server's storage.homes (home.go).
	Homes config.Homes
	// Shares are the server's share blocks, by name; StateDir is
	// server.state_dir, which holds the read-only views (shares.go).
	Shares   map[string]*config.Share
	StateDir string
	Location *time.Location // the policy's timezone
	// Config is the configuration in force, whole (nil in tests that set
	// only the fields above).
	Config *config.Config
}

// hook calls the test hook at a hook point; its error stops the work there,
// as if gpuvmd had been killed.
func (lc *lifecycle) hook(vmID, point string) error {
	if lc.testHook == nil {
		return nil
	}
	if err := lc.testHook(vmID, point); err != nil {
		return fmt.Errorf("%w %q: %v", errAbandoned, point, err)
	}
	return nil
}

func (lc *lifecycle) finishOp(ctx context.Context, id string, opErr error) {
	// Its error is read by the VM's owner: paths cut (reason.go).
	if err := lc.st.FinishOperation(ctx, id, withoutPaths(opErr)); err != nil && !errors.Is(err, store.ErrConflict) {
		lc.log.Error("finish operation", "operation", id, "err", err)
	}
}

// profile is a VM's profile in the configuration in force; nil when it is
// gone.
func (lc *lifecycle) profile(name string) *config.Profile {
	return lc.settings().Profiles[name]
}

// cleanupVolumes removes the disk overlay and seed a create may have made
// before gpuvmd stopped and before the domain that lists them was defined:
// DeleteVM finds no domain then, and would leave them.
func (lc *lifecycle) cleanupVolumes(ctx context.Context, vmID string) error {
	return lc.hv.CleanupVM(ctx, vmID, lc.names.of(vmID), lc.settings().Libvirt.StoragePool)
}

// liveAllocations are a VM's allocations not yet released.
func liveAllocations(ctx context.Context, st interface {
	ListAllocations(ctx context.Context, vmID string) ([]store.Allocation, error)
}, vmID string) ([]store.Allocation, error) {
	all, err := st.ListAllocations(ctx, vmID)
	if err != nil {
		return nil, err
	}
	var live []store.Allocation
	for _, a := range all {
		if a.State != store.AllocReleased {
			live = append(live, a)
		}
	}
	return live, nil
}
