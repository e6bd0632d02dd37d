package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/gofrs/flock"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

const stateVersion = 1

// state is the whole simulated host, persisted as state.json.
type state struct {
	Version int         `json:"version"`
	Preset  string      `json:"preset"`
	GPUs    []*gpuState `json:"gpus"`
	Extra   []*pciFunc  `json:"extra,omitempty"` // non-GPU functions (HDMI audio)
	// InUse marks devices (mdev UUIDs, VF or GPU addresses) that a running VM
	// holds open, so that removing them fails as on a real host.
	InUse map[string]bool `json:"in_use,omitempty"`
	// Utilization holds synthetic GPU utilisation (percent) by GPU address,
	// for monitoring tests and demos.
	Utilization map[string]int `json:"utilization,omitempty"`
}

type pciFunc struct {
	Address        string `json:"address"`
	Vendor         uint16 `json:"vendor"`
	Device         uint16 `json:"device"`
	Class          uint32 `json:"class"`
	NUMA           int    `json:"numa"`
	Group          int    `json:"iommu_group"`
	Driver         string `json:"driver,omitempty"`
	DriverOverride string `json:"driver_override,omitempty"`
}

type gpuState struct {
	pciFunc
	TotalVFs  int        `json:"total_vfs"`
	VFs       []*vfState `json:"vfs,omitempty"`
	MIGMode   bool       `json:"mig_mode"`
	MixedSize bool       `json:"mixed_size"`
	Mdevs     []*mdev    `json:"mdevs,omitempty"`
	GIs       []*giState `json:"gpu_instances,omitempty"`
}

type vfState struct {
	pciFunc
	VGPUType int `json:"vgpu_type,omitempty"` // vendor VFIO current_vgpu_type
	GI       int `json:"gpu_instance,omitempty"`
}

type mdev struct {
	UUID   string `json:"uuid"`
	Parent string `json:"parent"`
	TypeID string `json:"type"`
	GI     int    `json:"gpu_instance,omitempty"`
}

type giState struct {
	ID        int        `json:"id"`
	ProfileID int        `json:"profile"`
	Start     int        `json:"start"`
	CIs       []*ciState `json:"compute_instances,omitempty"`
}

type ciState struct {
	ID      int `json:"id"`
	Profile int `json:"profile"` // NVML compute-instance profile index
}

func (g *gpuState) model() gpu.Model {
	if m, ok := gpu.ModelByID(g.Device); ok {
		return m
	}
	return gpu.UnknownModel(g.Device)
}

func (s *state) gpu(addr string) *gpuState {
	for _, g := range s.GPUs {
		if g.Address == addr {
			return g
		}
	}
	return nil
}

// function finds any PCI function by address, with the GPU it belongs to.
func (s *state) function(addr string) (*pciFunc, *gpuState) {
	for _, g := range s.GPUs {
		if g.Address == addr {
			return &g.pciFunc, g
		}
		for _, vf := range g.VFs {
			if vf.Address == addr {
				return &vf.pciFunc, g
			}
		}
	}
	for _, e := range s.Extra {
		if e.Address == addr {
			return e, nil
		}
	}
	return nil, nil
}

func (g *gpuState) vf(addr string) *vfState {
	for _, vf := range g.VFs {
		if vf.Address == addr {
			return vf
		}
	}
	return nil
}

func (s *state) mdev(uuid string) (*mdev, *gpuState) {
	for _, g := range s.GPUs {
		for _, m := range g.Mdevs {
			if m.UUID == uuid {
				return m, g
			}
		}
	}
	return nil, nil
}

func (g *gpuState) gi(id int) *giState {
	for _, gi := range g.GIs {
		if gi.ID == id {
			return gi
		}
	}
	return nil
}

// store is the on-disk state with its lock, and a cache of the last state
// read, keyed by the file's identity so that other processes' writes are seen.
type store struct {
	dir  string
	lock *flock.Flock

	mu      sync.Mutex
	stamp   fileStamp
	current *state
	view    *tree
}

type fileStamp struct {
	size  int64
	mtime int64
	ino   uint64
}

func (st *store) path() string { return filepath.Join(st.dir, "state.json") }

func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi)}
}

// read returns the current state and its sysfs view, re-reading the file only
// when another writer changed it. The returned values must not be modified.
func (st *store) read() (*state, *tree, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fi, err := os.Stat(st.path())
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host: %w", err)
	}
	if st.current != nil && stampOf(fi) == st.stamp {
		return st.current, st.view, nil
	}
	if err := st.lock.RLock(); err != nil {
		return nil, nil, fmt.Errorf("simulated host: lock state: %w", err)
	}
	defer st.lock.Unlock()
	return st.loadLocked()
}

func (st *store) loadLocked() (*state, *tree, error) {
	fi, err := os.Stat(st.path())
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host: %w", err)
	}
	if st.current != nil && stampOf(fi) == st.stamp {
		return st.current, st.view, nil
	}
	b, err := os.ReadFile(st.path())
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host: read state: %w", err)
	}
	s := new(state)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, nil, fmt.Errorf("simulated host: state %s is corrupt: %w", st.path(), err)
	}
	if s.Version != stateVersion {
		return nil, nil, fmt.Errorf("simulated host: state %s has version %d, this binary reads %d", st.path(), s.Version, stateVersion)
	}
	st.current, st.view, st.stamp = s, buildTree(s), stampOf(fi)
	return st.current, st.view, nil
}

// update applies fn to a fresh copy of the state under the exclusive lock and
// saves it if fn succeeds. A failed fn leaves the host exactly as it was.
func (st *store) update(fn func(s *state, t *tree) error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.lock.Lock(); err != nil {
		return fmt.Errorf("simulated host: lock state: %w", err)
	}
	defer st.lock.Unlock()
	cur, view, err := st.loadLocked()
	if err != nil {
		return err
	}
	s, err := clone(cur)
	if err != nil {
		return err
	}
	if err := fn(s, view); err != nil {
		return err
	}
	return st.saveLocked(s)
}

func (st *store) saveLocked(s *state) error {
	b, err := encode(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(st.dir, ".state-*.json")
	if err != nil {
		return fmt.Errorf("simulated host: save state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("simulated host: save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("simulated host: save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), st.path()); err != nil {
		return fmt.Errorf("simulated host: save state: %w", err)
	}
	fi, err := os.Stat(st.path())
	if err != nil {
		return fmt.Errorf("simulated host: %w", err)
	}
	st.current, st.view, st.stamp = s, buildTree(s), stampOf(fi)
	return nil
}

func encode(s *state) ([]byte, error) {
	normalize(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("simulated host: encode state: %w", err)
	}
	return buf.Bytes(), nil
}

// normalize orders every list so that equal hosts encode to equal bytes.
func normalize(s *state) {
	for _, g := range s.GPUs {
		sort.Slice(g.Mdevs, func(i, j int) bool { return g.Mdevs[i].UUID < g.Mdevs[j].UUID })
		sort.Slice(g.GIs, func(i, j int) bool { return g.GIs[i].ID < g.GIs[j].ID })
		for _, gi := range g.GIs {
			sort.Slice(gi.CIs, func(i, j int) bool { return gi.CIs[i].ID < gi.CIs[j].ID })
		}
	}
	if len(s.InUse) == 0 {
		s.InUse = nil
	}
	if len(s.Utilization) == 0 {
		s.Utilization = nil
	}
}

func clone(s *state) (*state, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("simulated host: copy state: %w", err)
	}
	out := new(state)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("simulated host: copy state: %w", err)
	}
	return out, nil
}

// openStore opens the state in dir, creating it from preset when the
// directory holds none. A directory holding another preset is refused.
func openStore(dir, presetName string) (*store, error) {
	p, err := lookupPreset(presetName)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("simulated host: create state directory: %w", err)
	}
	st := &store{dir: dir, lock: flock.New(filepath.Join(dir, "state.lock"))}
	if err := st.lock.Lock(); err != nil {
		return nil, fmt.Errorf("simulated host: lock state: %w", err)
	}
	defer st.lock.Unlock()
	_, err = os.Stat(st.path())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := st.saveLocked(newState(p)); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("simulated host: %w", err)
	}
	s, _, err := st.loadLocked()
	if err != nil {
		return nil, err
	}
	if s.Preset != presetName {
		return nil, fmt.Errorf("simulated host: state directory %s holds preset %q, not %q (use another directory)", dir, s.Preset, presetName)
	}
	return st, nil
}
