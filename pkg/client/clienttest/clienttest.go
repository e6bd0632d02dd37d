// Package clienttest runs a real gpuvmd API (pkg/server) for the tests of
// API clients: a real store (SQLite in the test's temporary directory) with
// an admin and a user and their tokens, a fake GPU backend, profiles parsed
// from HCL, a fake orchestrator worker that moves VMs through their states
// without any hypervisor, and fake guests (their addresses and displays).
//
// It imports the server and the store (cgo, SQLite): tests only.
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Profiles is the default configuration: "seat" (no GPU, 2h default, 8h
// max), "mig-seat" (a MIG slice) and "broken" (the worker fails its VMs).
const Profiles = `
profile "seat" {
  description = "a test seat"
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  lease {
    default = "2h"
    max     = "8h"
  }
}
profile "mig-seat" {
  vcpus  = 2
  memory = "2GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
}
profile "broken" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`

// TaskProfiles is Profiles and "job", a profile tasks can run in (a cloud-init
// template, so the runner can be seeded).
const TaskProfiles = Profiles + `
template "plain" {
  content = "#cloud-config\n"
}
profile "job" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "plain" }
}
`

// FailProfile is the profile whose VMs the fake worker fails.
const FailProfile = "broken"

// Env is one running API.
type Env struct {
	URL        string
	AdminToken string // user "admin", an admin
	UserToken  string // user "ann"
	Store      *store.Store
	Worker     *Worker
	Guests     *Guests
	Config     *Config
}

// Options change an Env.
type Options struct {
	// Profiles replaces the default configuration.
	Profiles string
	// Step is how long the worker waits between two steps of a VM
	// (default 20ms).
	Step time.Duration
	// Orphans answers the orphan routes (nil: they answer 503).
	Orphans server.Orphans
	// Images answers the image routes (nil: they answer 503).
	Images server.Images
	// SignIn checks passwords for POST /v1/login (nil: not configured);
	// OIDC is the OpenID provider's sign-ins (nil: not configured).
	SignIn server.PasswordSignIn
	OIDC   server.OIDCSignIn
	// Bookings makes the API's booker from the Env's store and
	// configuration (nil: the reservation routes answer 503).
	Bookings func(st *store.Store, cfg *config.Config) server.Booker
	// Host names the node the server is (default ""): its GPU drains are
	// of that host.
	Host string
	// Availability says why a profile cannot be made on this server now
	// (nil: nothing is checked).
	Availability server.ProfileAvailability
	// Admission applies a sharing policy to the VMs asked for (nil: none,
	// as a server without one).
	Admission server.Admitter
	// Capabilities are the host's facts GET /v1/vms/{id} judges VMs'
	// capabilities on (nil: not known).
	Capabilities *capability.Host
	// Volumes keeps data disks in the store only, ready at once
	// (StoreVolumes); false: creating one answers 503.
	Volumes bool
	// HomeUsage is the homes' usage GET /v1/volumes shows (nil: none).
	HomeUsage server.HomeUsage
	// TaskLogs is the directory of the tasks' output GET
	// /v1/tasks/{id}/logs reads (task.LogPath); "": no output. No task
	// supervisor runs: a test moves its tasks through the store.
	TaskLogs string
}

// New starts an Env; it stops with the test.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	if o.Profiles == "" {
		o.Profiles = Profiles
	}
	if o.Step <= 0 {
		o.Step = 20 * time.Millisecond
	}
	cfg, diags := config.Parse(config.Source{Name: "test.hcl", Data: []byte(o.Profiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Config{DSN: filepath.Join(t.TempDir(), "gpuvm.db"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Store: st, Config: &Config{cfg: cfg}}
	for _, u := range []store.User{{Name: "admin", Admin: true}, {Name: "ann"}} {
		if err := st.CreateUser(ctx, &u); err != nil {
			t.Fatal(err)
		}
	}
	if e.AdminToken, _, err = st.CreateToken(ctx, "admin", "test", nil); err != nil {
		t.Fatal(err)
	}
	if e.UserToken, _, err = st.CreateToken(ctx, "ann", "test", nil); err != nil {
		t.Fatal(err)
	}
	mock := &backend.Mock{
		InventoryF: func(context.Context) (backend.Inventory, error) {
			return backend.Inventory{Backend: "mig", Host: "test host", Simulated: true,
				GPUs: []backend.GPU{{Address: "0000:41:00.0", Model: "H100", Memory: 80 << 30}}}, nil
		},
		HealthF: func(context.Context) (backend.Health, error) { return backend.Health{OK: true}, nil },
	}
	wctx, cancel := context.WithCancel(ctx)
	e.Guests = &Guests{st: st, addrs: map[string]netip.Addr{}}
	e.Worker = &Worker{st: st, step: o.Step, wake: make(chan struct{}, 1), guests: e.Guests}
	e.Worker.wg.Add(1)
	go e.Worker.run(wctx)
	var booker server.Booker
	if o.Bookings != nil {
		booker = o.Bookings(st, cfg)
	}
	var vols server.Volumes
	if o.Volumes {
		vols = StoreVolumes{st}
	}
	api := server.New(server.Deps{
		Auth: st, Backends: backends{"mig": mock}, Config: e.Config, Log: log, Store: st, Worker: e.Worker,
		Host: o.Host, Consoles: e.Guests, EventPoll: 10 * time.Millisecond, Orphans: o.Orphans, Images: o.Images, SignIn: o.SignIn, OIDC: o.OIDC, Bookings: booker,
		Availability: o.Availability,
		Admission:    o.Admission,
		Capabilities: o.Capabilities,
		HomeUsage:    o.HomeUsage,
		Volumes:      vols,
		TaskLogs:     o.TaskLogs,
	})
	srv := httptest.NewServer(api)
	e.URL = srv.URL
	t.Cleanup(func() {
		api.Close() // open event streams end
		srv.Close()
		cancel()
		e.Worker.wg.Wait()
		st.Close()
	})
	return e
}

type backends map[string]backend.Backend

func (b backends) Names() []string {
	var out []string
	for n := range b {
		out = append(out, n)
	}
	return out
}

func (b backends) Backend(n string) (backend.Backend, bool) { x, ok := b[n]; return x, ok }

// Config is the server's configuration; Broken makes Reload fail.
type Config struct {
	mu     sync.Mutex
	cfg    *config.Config
	Broken atomic.Bool
}

func (c *Config) Load() *config.Config { c.mu.Lock(); defer c.mu.Unlock(); return c.cfg }

func (c *Config) Reload() (string, error) {
	if c.Broken.Load() {
		return "test.hcl:3:1: Error: Unsupported block type; Blocks of type \"profle\" are not expected here.",
			errors.New("the configuration has errors; nothing was changed")
	}
	return "test.hcl:1:1: Warning: a warning", nil
}

// ReloadDiagnosed is Reload with its diagnostics one by one
// (server.DiagnosedConfig).
func (c *Config) ReloadDiagnosed() (string, []api.ConfigDiagnostic, error) {
	text, err := c.Reload()
	if err != nil {
		return text, []api.ConfigDiagnostic{{Severity: "error", Summary: "Unsupported block type",
			Detail: `Blocks of type "profle" are not expected here.`, File: "test.hcl", Line: 3, Column: 1}}, err
	}
	return text, []api.ConfigDiagnostic{{Severity: "warning", Summary: "a warning", File: "test.hcl", Line: 1, Column: 1}}, nil
}

// Worker is a fake orchestrator: every Step it moves each VM with an
// unfinished operation one state on. A create goes queued (with a reason)
// → allocating → creating → running (phase booting, the create done),
// and fails at allocating for FailProfile; one Step later the guest of a
// booting VM gets its address and the VM is ready. A delete goes deleting
// → deleted.
type Worker struct {
	st     *store.Store
	step   time.Duration
	wake   chan struct{}
	guests *Guests
	wg     sync.WaitGroup
	// Paused stops the worker from moving VMs while true; Pause also waits
	// for a round under way to end.
	Paused atomic.Bool
	// rounds is held while a round runs.
	rounds sync.Mutex
	// HoldBoot keeps booting VMs booting while true: their guests get no
	// address.
	HoldBoot atomic.Bool
	// Woken counts the wake-ups.
	Woken atomic.Int32
}

// Pause stops the worker from moving VMs, once the round under way (if
// any) has ended: after it returns, nothing moves until Paused is false.
func (w *Worker) Pause() {
	w.Paused.Store(true)
	w.rounds.Lock()
	w.rounds.Unlock()
}

// Wake implements server.Waker.
func (w *Worker) Wake() {
	w.Woken.Add(1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) run(ctx context.Context) {
	defer w.wg.Done()
	tick := time.NewTicker(w.step)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.wake:
		}
		w.rounds.Lock()
		if !w.Paused.Load() {
			if err := w.round(ctx); err != nil && ctx.Err() == nil {
				fmt.Println("clienttest worker:", err)
			}
		}
		w.rounds.Unlock()
	}
}

func (w *Worker) round(ctx context.Context) error {
	// The VMs that were booting when the round began are up: ready.
	if err := w.boot(ctx); err != nil {
		return err
	}
	ops, err := w.st.ListUnfinishedOperations(ctx)
	if err != nil {
		return err
	}
	for _, op := range ops {
		vm, err := w.st.GetVM(ctx, op.VMID)
		if err != nil {
			return err
		}
		var u store.VMUpdate
		var finish, fail bool
		switch {
		case op.Kind == store.OpCreate && vm.State == store.VMQueued && vm.StateReason == "":
			u = store.VMUpdate{State: store.VMQueued, Phase: "waiting for a GPU", StateReason: "no free capacity (test)"}
		case op.Kind == store.OpCreate && vm.State == store.VMQueued && vm.Profile == FailProfile:
			u = store.VMUpdate{State: store.VMFailed, StateReason: "the test worker fails this profile"}
			finish, fail = true, true
		case op.Kind == store.OpCreate && vm.State == store.VMQueued:
			host := "test-host"
			u = store.VMUpdate{State: store.VMAllocating, Phase: "allocating GPU", Host: &host}
		case op.Kind == store.OpCreate && vm.State == store.VMAllocating:
			u = store.VMUpdate{State: store.VMCreating, Phase: "preparing disk"}
		case op.Kind == store.OpCreate && vm.State == store.VMCreating:
			lease := w.st.Now().Add(time.Duration(max(vm.Hours, 1)) * time.Hour)
			u = store.VMUpdate{State: store.VMRunning, Phase: api.PhaseBooting, LeaseEnd: &lease}
			finish = true
		case op.Kind == store.OpDelete && vm.State != store.VMDeleting && vm.State != store.VMDeleted:
			u = store.VMUpdate{State: store.VMDeleting, Phase: "removing domain"}
		case op.Kind == store.OpDelete && vm.State == store.VMDeleting:
			u = store.VMUpdate{State: store.VMDeleted}
			finish = true
		case op.Kind == store.OpSnapshot:
			// Taken at once, as without a guest agent.
			if sn, err := w.st.SnapshotOfOperation(ctx, op.ID); err == nil {
				if err := w.st.SetSnapshotState(ctx, sn.ID, store.SnapReady, []string{store.SnapCreating},
					store.SnapshotUpdate{Consistency: store.SnapCrashConsists}); err != nil {
					return err
				}
			}
			if err := w.st.FinishOperation(ctx, op.ID, nil); err != nil {
				return err
			}
			continue
		case op.Kind == store.OpDisks:
			// A running VM's disks plugged in or out at once, as by a guest
			// that lets a disk go.
			vols, err := w.st.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
			if err != nil {
				return err
			}
			for _, v := range vols {
				if v.State == store.VolDetaching {
					if err := w.st.EndDetachVolume(ctx, v.ID); err != nil {
						return err
					}
				}
			}
			if err := w.st.FinishOperation(ctx, op.ID, nil); err != nil {
				return err
			}
			continue
		default:
			// A create overtaken by a delete, or an operation this worker
			// does not know: finish it.
			if err := w.st.FinishOperation(ctx, op.ID, nil); err != nil {
				return err
			}
			continue
		}
		if err := w.st.SetOperationStep(ctx, op.ID, u.Phase); err != nil {
			return err
		}
		if _, err := w.st.UpdateVMState(ctx, vm.ID, vm.Version, u); err != nil {
			return err
		}
		if finish {
			var opErr error
			if fail {
				opErr = errors.New(u.StateReason)
			}
			if err := w.st.FinishOperation(ctx, op.ID, opErr); err != nil {
				return err
			}
		}
	}
	return nil
}

// boot gives the guest of every booting VM its address and makes the VM
// ready.
func (w *Worker) boot(ctx context.Context) error {
	if w.HoldBoot.Load() {
		return nil
	}
	page, err := w.st.ListVMs(ctx, store.VMFilter{States: []string{store.VMRunning}, Limit: 1000})
	if err != nil {
		return err
	}
	for _, vm := range page.VMs {
		if vm.Phase != api.PhaseBooting {
			continue
		}
		w.guests.up(vm.ID)
		_, err := w.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady})
		if err != nil && !errors.Is(err, store.ErrConflict) { // changed meanwhile: the next round
			return err
		}
	}
	return nil
}

// Guests stands for the hypervisor of the worker's VMs (server.Consoles):
// the guest of a VM the worker has booted has an address in 192.0.2.0/24
// (the first gets 192.0.2.10, then .11…), from a DHCP lease on "vnet0";
// every running VM has a VNC display on 127.0.0.1:5900, where nothing
// listens.
type Guests struct {
	st    *store.Store
	mu    sync.Mutex
	addrs map[string]netip.Addr
}

// up gives a VM's guest its address, once.
func (g *Guests) up(vmID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.addrs[vmID]; !ok {
		g.addrs[vmID] = netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + len(g.addrs)%240)})
	}
}

// running reads a VM as the hypervisor would look its domain up.
func (g *Guests) running(ctx context.Context, uuid string) (bool, error) {
	vm, err := g.st.GetVM(ctx, uuid)
	if errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("domain %s: %w", uuid, hypervisor.ErrNotFound)
	}
	if err != nil {
		return false, err
	}
	return vm.State == store.VMRunning, nil
}

// Addresses implements server.Consoles: a running VM's guest's address
// once it has one.
func (g *Guests) Addresses(ctx context.Context, uuid string) ([]hypervisor.Address, error) {
	if run, err := g.running(ctx, uuid); !run || err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ip, ok := g.addrs[uuid]
	if !ok {
		return nil, nil
	}
	return []hypervisor.Address{{Interface: "vnet0", MAC: "52:54:00:00:00:01", IP: ip, Prefix: 24, Source: hypervisor.SourceLease}}, nil
}

// Console implements server.Consoles: a running VM's VNC display.
func (g *Guests) Console(ctx context.Context, uuid string) (domain.Console, error) {
	if run, err := g.running(ctx, uuid); err != nil {
		return domain.Console{}, err
	} else if !run {
		return domain.Console{}, fmt.Errorf("domain %s is not running: %w", uuid, domain.ErrNoConsole)
	}
	return domain.Console{Protocol: domain.GraphicsVNC, Host: "127.0.0.1", Port: 5900}, nil
}

// StoreVolumes keeps data disks in the store only, made ready at once on
// host test-host (the worker's VMs' host).
type StoreVolumes struct{ St *store.Store }

// CreateVolume implements server.Volumes.
func (f StoreVolumes) CreateVolume(ctx context.Context, v *store.Volume, quota store.DiskQuota) error {
	v.Host, v.Pool = "test-host", "gpuvm"
	if err := f.St.CreateVolume(ctx, v, quota); err != nil {
		return err
	}
	v.State = store.VolReady
	return f.St.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolCreating}, "")
}

// DeleteVolume implements server.Volumes.
func (f StoreVolumes) DeleteVolume(ctx context.Context, id string) error {
	if _, err := f.St.BeginDeleteVolume(ctx, id); err != nil {
		return err
	}
	return f.St.RemoveVolume(ctx, id)
}

// ResizeVolume implements server.Volumes.
func (f StoreVolumes) ResizeVolume(ctx context.Context, id string, size int64, quota store.DiskQuota) (*store.Volume, error) {
	return f.St.ResizeVolume(ctx, id, size, quota)
}
