package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/gofrs/flock"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// SimSource reads the simulated GPU server (pkg/host/sim) as gpuvmd's
// backends see it, on the same code path as a real host wherever the
// simulator can follow:
//
//   - its NVML (NVMLSource over sim.Host.NVML): the GPUs bound to nvidia,
//     their utilisation (sim.Host.SetUtilization), memory and MIG GPU
//     instances;
//   - its sysfs: GPUs given whole to VMs (bound to vfio-pci, which NVML does
//     not see), vGPUs (mdevs, and VFs with a vGPU type) and the MIG instance
//     each VF's vGPU runs on;
//   - synthetic figures that tests and demos set in the simulator's state
//     directory (SetSimFigures): per GPU or per device (mdev UUID, VF).
//
// A simulated device nobody set figures for does nothing: its utilisation
// is 0. Figures the simulator has no notion of (temperature, power) are
// Unknown unless set.
type SimSource struct {
	host *sim.Host
	dir  string
	nvml *NVMLSource
}

// NewSimSource reads the simulated server h, whose state lives in dir
// (sim.StateDir).
func NewSimSource(h *sim.Host, dir string) *SimSource {
	return &SimSource{host: h, dir: dir, nvml: NewNVMLSource(h.NVML())}
}

// Describe implements Source.
func (s *SimSource) Describe() string { return s.host.Describe() }

// Read implements Source.
func (s *SimSource) Read(ctx context.Context) (Reading, error) {
	r, err := s.nvml.Read(ctx)
	if err != nil {
		return r, err
	}
	figs, err := ReadSimFigures(s.dir)
	if err != nil {
		return r, err
	}
	gpus, err := host.ListGPUs(s.host)
	if err != nil {
		r.Notes = append(r.Notes, "list the simulated GPUs: "+err.Error())
	}
	seen := map[string]bool{}
	for _, g := range r.GPUs {
		seen[g.Address] = true
	}
	parentGPU := map[string]string{} // GPU or VF address → GPU address
	for _, g := range gpus {
		parentGPU[g.Address] = g.Address
		for _, vf := range g.VFs {
			parentGPU[vf] = g.Address
		}
		if seen[g.Address] {
			continue
		}
		// Not bound to nvidia (given whole to a VM): NVML does not see it.
		x := NewGPUReading(g.Address)
		x.Model, x.MemTotal = "NVIDIA "+g.Model.Name, clampInt64(g.Model.Memory)
		x.Util, x.MemUtil = 0, 0
		r.GPUs = append(r.GPUs, x)
	}
	// vGPUs from sysfs, on GPUs whose NVML listed none.
	withVGPUs := map[string]bool{}
	for _, in := range r.Instances {
		if in.Kind == gpu.KindVGPU || in.ID != "" {
			withVGPUs[in.GPUAddress] = true
		}
	}
	ins, notes := s.sysfsVGPUs(gpus, parentGPU, withVGPUs)
	r.Notes = append(r.Notes, notes...)
	r.Instances = mergeMIGBacked(append(r.Instances, ins...))
	for i := range r.GPUs {
		g := &r.GPUs[i]
		if f, ok := figs[g.Address]; ok {
			f.applyGPU(g)
		}
	}
	for i := range r.Instances {
		in := &r.Instances[i]
		for _, p := range []*float64{&in.Util, &in.MemUtil, &in.EncUtil, &in.DecUtil} {
			if *p < 0 {
				*p = 0
			}
		}
		if f, ok := figs[in.ID]; ok && in.ID != "" {
			f.applyInstance(in)
		}
	}
	return r, nil
}

// sysfsVGPUs lists the simulated vGPUs of GPUs not in skip: mdevs (whose
// parent is the GPU or one of its VFs) and VFs that hold a vGPU type.
func (s *SimSource) sysfsVGPUs(gpus []host.GPU, parentGPU map[string]string, skip map[string]bool) ([]InstanceReading, []string) {
	var out []InstanceReading
	var notes []string
	mdevs, err := host.ListMdevs(s.host)
	if err != nil {
		notes = append(notes, "list the simulated mdevs: "+err.Error())
	}
	for _, m := range mdevs {
		g, ok := parentGPU[m.Parent]
		if !ok || skip[g] {
			continue
		}
		in := NewInstanceReading(g, gpu.KindVGPU)
		in.ID = m.UUID
		typeDir := path.Join("bus/mdev/devices", m.UUID, "mdev_type")
		if name, err := host.ReadString(s.host, path.Join(typeDir, "name")); err == nil {
			in.Type = canonicalVGPUType(name)
		}
		if desc, err := host.ReadString(s.host, path.Join(typeDir, "description")); err == nil {
			if fb, _, err := host.ParseMdevDescription(desc); err == nil {
				in.MemTotal = clampInt64(fb)
			}
		}
		out = append(out, in)
	}
	for _, g := range gpus {
		if skip[g.Address] {
			continue
		}
		for _, vf := range g.VFs {
			if !host.IsVendorVFIOVF(s.host, vf) {
				continue
			}
			cur, _, err := host.VFState(s.host, vf)
			if err != nil {
				notes = append(notes, err.Error())
				continue
			}
			if cur == 0 {
				continue
			}
			in := NewInstanceReading(g.Address, gpu.KindVGPU)
			in.ID = vf
			if gi, err := host.VFGPUInstanceID(s.host, vf); err == nil && gi >= 0 {
				in.GPUInstance = gi
			}
			out = append(out, in)
		}
	}
	return out, notes
}

// SimFigures are synthetic figures of a simulated GPU or device. Nil
// fields are left as the simulator reports them. Utilisations are in
// percent (0–100), as sim.Host.SetUtilization takes them.
type SimFigures struct {
	Util        *float64 `json:"utilization,omitempty"`
	MemUtil     *float64 `json:"memory_utilization,omitempty"`
	EncUtil     *float64 `json:"encoder_utilization,omitempty"`
	DecUtil     *float64 `json:"decoder_utilization,omitempty"`
	MemUsed     *int64   `json:"memory_used_bytes,omitempty"`
	Temperature *float64 `json:"temperature_celsius,omitempty"`
	PowerWatts  *float64 `json:"power_watts,omitempty"`
	// XIDErrors is how many XID errors the GPU reports each round while
	// set.
	XIDErrors int `json:"xid_errors_per_round,omitempty"`
	// License is a vGPU's licence state (LicenseLicensed, LicenseGrace,
	// LicenseUnlicensed), as its guest's driver would report it; unset, a
	// simulated vGPU's state is unknown (it has no guest driver).
	License string `json:"license,omitempty"`
}

func (f SimFigures) check() error {
	for _, p := range []struct {
		name string
		v    *float64
	}{{"utilization", f.Util}, {"memory_utilization", f.MemUtil}, {"encoder_utilization", f.EncUtil}, {"decoder_utilization", f.DecUtil}} {
		if p.v != nil && (*p.v < 0 || *p.v > 100) {
			return fmt.Errorf("%s %g%% is not within 0-100", p.name, *p.v)
		}
	}
	switch {
	case f.MemUsed != nil && *f.MemUsed < 0:
		return fmt.Errorf("memory_used_bytes %d is negative", *f.MemUsed)
	case f.PowerWatts != nil && *f.PowerWatts < 0:
		return fmt.Errorf("power_watts %g is negative", *f.PowerWatts)
	case f.Temperature != nil && (*f.Temperature < -50 || *f.Temperature > 200):
		return fmt.Errorf("temperature_celsius %g is not within -50-200", *f.Temperature)
	case f.XIDErrors < 0:
		return fmt.Errorf("xid_errors_per_round %d is negative", f.XIDErrors)
	case f.License != "" && f.License != LicenseLicensed && f.License != LicenseGrace && f.License != LicenseUnlicensed:
		return fmt.Errorf("license %q is none of %s, %s, %s", f.License, LicenseLicensed, LicenseGrace, LicenseUnlicensed)
	}
	return nil
}

func (f SimFigures) applyGPU(g *GPUReading) {
	setRatio(&g.Util, f.Util)
	setRatio(&g.MemUtil, f.MemUtil)
	setRatio(&g.EncUtil, f.EncUtil)
	setRatio(&g.DecUtil, f.DecUtil)
	if f.MemUsed != nil {
		g.MemUsed = *f.MemUsed
	}
	if f.Temperature != nil {
		g.Temperature = *f.Temperature
	}
	if f.PowerWatts != nil {
		g.PowerWatts = *f.PowerWatts
	}
	g.XIDErrors += f.XIDErrors
}

func (f SimFigures) applyInstance(in *InstanceReading) {
	setRatio(&in.Util, f.Util)
	setRatio(&in.MemUtil, f.MemUtil)
	setRatio(&in.EncUtil, f.EncUtil)
	setRatio(&in.DecUtil, f.DecUtil)
	if f.MemUsed != nil {
		in.MemUsed = *f.MemUsed
	}
	if f.License != "" {
		in.License = f.License
	}
}

func setRatio(dst *float64, pct *float64) {
	if pct != nil {
		*dst = *pct / 100
	}
}

// simFiguresFile holds the synthetic figures in the simulator's state
// directory: {"figures": {"<GPU address or device ID>": SimFigures}}.
const simFiguresFile = "monitor-figures.json"

type simFiguresDoc struct {
	Figures map[string]SimFigures `json:"figures"`
}

// ReadSimFigures reads the synthetic figures of the simulated server whose
// state is in dir, keyed by GPU address or device ID; none when the file
// does not exist.
func ReadSimFigures(dir string) (map[string]SimFigures, error) {
	b, err := os.ReadFile(filepath.Join(dir, simFiguresFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the simulator's synthetic figures: %w", err)
	}
	var doc simFiguresDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("read the simulator's synthetic figures %s: %w", filepath.Join(dir, simFiguresFile), err)
	}
	return doc.Figures, nil
}

// SetSimFigures sets the synthetic figures of a simulated GPU (by PCI
// address) or device (mdev UUID, VF address) in the simulator's state
// directory dir, for every process that reads that simulator; zero
// figures (SimFigures{}) remove them. Writers take a file lock, and
// readers see the file whole or not at all.
func SetSimFigures(dir, id string, f SimFigures) error {
	id = strings.TrimSpace(id)
	if id == "" {
		return errors.New("set synthetic figures: no GPU or device named")
	}
	if a, err := host.ValidateAddress(id); err == nil {
		id = a
	} else {
		id = strings.ToLower(id)
	}
	if err := f.check(); err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	lock := flock.New(filepath.Join(dir, simFiguresFile+".lock"))
	if err := lock.Lock(); err != nil {
		return fmt.Errorf("set synthetic figures of %s: lock: %w", id, err)
	}
	defer func() { _ = lock.Unlock() }()
	figs, err := ReadSimFigures(dir)
	if err != nil {
		return err
	}
	if figs == nil {
		figs = map[string]SimFigures{}
	}
	if f == (SimFigures{}) {
		delete(figs, id)
	} else {
		figs[id] = f
	}
	b, err := json.MarshalIndent(simFiguresDoc{Figures: figs}, "", "  ")
	if err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	tmp, err := os.CreateTemp(dir, simFiguresFile+".*")
	if err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, simFiguresFile)); err != nil {
		return fmt.Errorf("set synthetic figures of %s: %w", id, err)
	}
	return nil
}

// Figure is a helper for SimFigures: a pointer to v.
func Figure(v float64) *float64 { return &v }
