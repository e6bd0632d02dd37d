// Package kit is what the three backend binaries share: opening the host they
// serve (real, captured or simulated), the ledger of devices they created, and
// the host-wide lock that serialises changes across backend processes.
package kit

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// Env is the host a backend works on, opened from its Config.
type Env struct {
	Name      string // backend name
	SysFS     host.SysFS
	NVML      nvml.Interface // nil when unavailable
	NVMLNote  string         // why NVML is unavailable, one line
	Simulated bool
	Sim       *sim.Host // the simulator, when Simulated
	Ledger    *Ledger
	// Types remembers vendor-VFIO type IDs and names.
	Types *TypeNames
	// Installation is the gpuvm installation served (Config.Installation):
	// written into every device made, and checked before one is removed.
	Installation string
	lockPath     string
	genPath      string // the host generation (HostGeneration)
}

// Open opens the host described by cfg for backend name.
func Open(name string, cfg backend.Config) (*Env, error) {
	if cfg.StateDir == "" {
		return nil, backend.Errorf(backend.CodeInvalid, "", "backend %s: no state directory configured", name)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, backend.Errorf(backend.CodeInternal, "", "backend %s: create state directory: %v", name, err)
	}
	e := &Env{Name: name, Installation: cfg.Installation, lockPath: filepath.Join(cfg.StateDir, "host.lock"),
		genPath: filepath.Join(cfg.StateDir, "host.generation")}
	switch {
	case cfg.Simulate != "":
		h, err := sim.Open(sim.StateDir(cfg.StateDir, cfg.Simulate), cfg.Simulate)
		if err != nil {
			return nil, backend.Errorf(backend.CodeInvalid, "", "backend %s: %v", name, err)
		}
		e.SysFS, e.Sim, e.Simulated = h, h, true
		if cfg.NVML != backend.NVMLNone {
			e.NVML = h.NVML()
		} else {
			e.NVMLNote = "NVML disabled by configuration (--nvml none)"
		}
	default:
		root := cfg.SysFSRoot
		if root == "" {
			root = "/sys"
		}
		if _, err := os.Stat(root); err != nil {
			return nil, backend.Errorf(backend.CodeInvalid, "", "backend %s: sysfs root: %v", name, err)
		}
		e.SysFS = host.NewDir(root)
		switch {
		case cfg.NVML == backend.NVMLNone:
			e.NVMLNote = "NVML disabled by configuration (--nvml none)"
		case root != "/sys":
			e.NVMLNote = "NVML not used with a captured sysfs tree (" + root + ")"
		default:
			e.NVML, e.NVMLNote = host.OpenNVML(host.NewNVML())
		}
	}
	l, err := OpenLedger(filepath.Join(cfg.StateDir, "backends", name+".json"))
	if err != nil {
		return nil, backend.Errorf(backend.CodeInternal, "", "backend %s: %v", name, err)
	}
	e.Ledger = l
	e.Types = openTypeNames(filepath.Join(cfg.StateDir, "backends", name+typeNamesSuffix))
	return e, nil
}

// Lock takes the host-wide lock that every backend holds while it reads
// capacity and changes the host, so that two backends never hand out the same
// VF or memory slice. The unlock counts a change of the host first
// (HostGeneration).
func (e *Env) Lock(ctx context.Context) (func(), error) {
	unlock, err := host.Lock(ctx, e.lockPath)
	if err != nil {
		return nil, backend.Errorf(backend.CodeUnavailable, "", "take the host lock %s: %v", e.lockPath, err)
	}
	return func() {
		e.bumpGeneration()
		unlock()
	}, nil
}

// bumpGeneration counts a change of the host, under the host lock. It is
// best effort: a count lost is made up by the backends' periodic re-read.
func (e *Env) bumpGeneration() {
	n := 0
	if b, err := os.ReadFile(e.genPath); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if err := os.WriteFile(e.genPath, []byte(strconv.Itoa(n+1)+"\n"), 0o644); err != nil {
		slog.Warn("count a change of the host", "file", e.genPath, "error", err)
	}
}

// HostGeneration implements backend.HostGenerations: the count of changes
// the backends made to the host (taking its lock), shared by all of them
// through the state directory.
func (e *Env) HostGeneration() string {
	b, _ := os.ReadFile(e.genPath)
	return string(b)
}

// HostGeneration is the Env's HostGeneration, "" before Configure.
func (s *State) HostGeneration() string {
	e, err := s.Get()
	if err != nil {
		return ""
	}
	return e.HostGeneration()
}

// Owns refuses (CodeConflict, touching nothing) to remove a ledger entry
// that another gpuvm installation made: two installations that share a
// state directory, or a ledger copied from elsewhere, never remove each
// other's devices. An entry recorded before installations existed, or a
// backend configured without one, is not refused. confirmed, when set, is
// the installation an admin confirmed the device belongs to (an orphan they
// chose to delete): the entry must name exactly that one.
func (e *Env) Owns(entry Entry, confirmed string) error {
	made := entry.Device.Installation
	if confirmed != "" {
		if made != confirmed {
			return backend.Errorf(backend.CodeConflict, entry.Device.GPU, "device %s was made by gpuvm installation %q, not %q as confirmed: left alone", entry.Device.ID, made, confirmed)
		}
		return nil
	}
	if made == "" || e.Installation == "" || made == e.Installation {
		return nil
	}
	return backend.Errorf(backend.CodeConflict, entry.Device.GPU, "device %s was made by gpuvm installation %s, not this one (%s): left alone", entry.Device.ID, made, e.Installation)
}

// Inventory starts an inventory that says what host it describes.
func (e *Env) Inventory() backend.Inventory {
	inv := backend.Inventory{Backend: e.Name, Host: e.SysFS.Describe(), Simulated: e.Simulated}
	if e.NVMLNote != "" {
		inv.Notes = append(inv.Notes, e.NVMLNote)
	}
	inv.Driver = ReadDriver(e.NVML)
	return inv
}

// State holds a backend's Env once Configure has run; methods called before
// get a clear error rather than a nil dereference.
type State struct {
	mu  sync.RWMutex
	env *Env
}

// Set installs the Env.
func (s *State) Set(e *Env) {
	s.mu.Lock()
	s.env = e
	s.mu.Unlock()
}

// Get returns the Env, or an error if Configure has not run.
func (s *State) Get() (*Env, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.env == nil {
		return nil, backend.Errorf(backend.CodeUnavailable, "", "backend is not configured yet (Configure was not called)")
	}
	return s.env, nil
}

// LostReason is Device.Absent of a ledger device the host no longer has:
// mdevs, VF vGPUs and MIG instances do not survive a host reboot.
const LostReason = "not on the host: lost in a host reboot or a driver reload (gpuvmd makes it again for a VM that should run)"

// VGPUExists reports whether a vGPU with this ID (mdev UUID, or VF address
// for vendor VFIO) is on the host.
func VGPUExists(fsys host.SysFS, id string) bool {
	if _, err := host.ValidateAddress(id); err == nil {
		cur, _, err := host.VFState(fsys, id)
		return err == nil && cur != 0
	}
	return fsys.Exists("bus/mdev/devices/" + id)
}

// Recreated finds the ledger entry a CreateRequest.Recreate names. ok is
// false when the request recreates nothing. An entry of another VM, or a
// missing one, is refused: a recreate only ever makes again what was.
func (e *Env) Recreated(req backend.CreateRequest) (entry Entry, ok bool, err error) {
	if req.Recreate == "" {
		return Entry{}, false, nil
	}
	entry, found, err := e.Ledger.Get(req.Recreate)
	switch {
	case err != nil:
		return Entry{}, false, backend.Errorf(backend.CodeInternal, req.GPU, "%v", err)
	case !found:
		return Entry{}, false, backend.Errorf(backend.CodeNotFound, req.GPU, "recreate device %s: not in the %s backend's ledger", req.Recreate, e.Name)
	case entry.Device.VMUUID != req.VMUUID || entry.Device.GPU != req.GPU:
		return Entry{}, false, backend.Errorf(backend.CodeInvalid, req.GPU, "recreate device %s: it was made for VM %s on GPU %s, not VM %s on %s",
			req.Recreate, entry.Device.VMUUID, entry.Device.GPU, req.VMUUID, req.GPU)
	}
	if err := e.Owns(entry, ""); err != nil {
		return Entry{}, false, err
	}
	return entry, true, nil
}

// PreferParent moves parent to the front of the offer's parents, so that
// CreateVGPU makes the vGPU there (a recreate on the VF it had); false when
// the offer cannot take one there now.
func PreferParent(o *Offer, parent string) bool {
	for i, p := range o.Parents {
		if p == parent {
			o.Parents[0], o.Parents[i] = o.Parents[i], o.Parents[0]
			return true
		}
	}
	return false
}

// ReadDriver reads the host driver's version and, for the vGPU manager,
// the vGPU versions it supports, through NVML; nil without NVML or when
// NVML does not say its version.
func ReadDriver(lib nvml.Interface) *backend.Driver {
	if lib == nil {
		return nil
	}
	v, ret := getDriverVersion(lib)
	if ret != nvml.SUCCESS {
		return nil
	}
	d := &backend.Driver{Version: strings.TrimRight(v, "\x00")}
	if supported, _, ret := getVgpuVersion(lib); ret == nvml.SUCCESS && supported.MaxVersion != 0 {
		d.VGPUMin, d.VGPUMax = VGPUVersion(supported.MinVersion), VGPUVersion(supported.MaxVersion)
	}
	return d
}

// getDriverVersion calls nvmlSystemGetDriverVersion; a mock without it
// panics, which reads as NOT_SUPPORTED.
func getDriverVersion(lib nvml.Interface) (v string, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return lib.SystemGetDriverVersion()
}

// getVgpuVersion calls NVML's nvmlGetVgpuVersion, which a library or mock
// that lacks it answers with a panic (go-nvml's mocks do): NOT_SUPPORTED then.
func getVgpuVersion(lib nvml.Interface) (supported, current nvml.VgpuVersion, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return lib.GetVgpuVersion()
}

// VGPUVersion writes a vGPU version as NVML encodes it (the major release
// in the high 16 bits, the minor in the low: 0x110003 is 17.3).
func VGPUVersion(v uint32) string {
	return strconv.Itoa(int(v>>16)) + "." + strconv.Itoa(int(v&0xffff))
}

// SkipLedgerParents drops from an offer the VFs that a device of the ledger
// names: one the host lost (a reboot) keeps its VF until gpuvmd has made it
// again there or forgotten it, and a new device must not take it (the
// ledger is keyed by the VF). mdev parents are left: an mdev is keyed by its
// UUID.
func SkipLedgerParents(o *Offer, ledger []Entry) {
	held := map[string]bool{}
	for _, e := range ledger {
		held[e.Device.ID] = true
	}
	keep := o.Parents[:0]
	for _, p := range o.Parents {
		if !held[p] {
			keep = append(keep, p)
		}
	}
	if n := len(o.Parents) - len(keep); n > 0 {
		o.FreeCount = max(o.FreeCount-n, 0)
	}
	o.Parents = keep
}
