package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// HostSpec is one GPU server as the orchestrator knows it: filled from the
// backends' inventories and the configuration.
type HostSpec struct {
	Name string `json:"name"`
	// Draining hosts keep what runs on them and take nothing new.
	Draining bool      `json:"draining,omitempty"`
	GPUs     []GPUSpec `json:"gpus"`
}

// GPUSpec is one physical GPU.
type GPUSpec struct {
	Address string `json:"address"` // PCI address, "0000:41:00.0"
	// Model names the board as pkg/gpu knows it ("H100 PCIe 80GB", "L40S")
	// or by PCI ID ("10de:2331"); DeviceID, when set, wins.
	Model    string `json:"model"`
	DeviceID uint16 `json:"device_id,omitempty"`
	// Memory is the framebuffer of a board pkg/gpu does not know.
	Memory uint64 `json:"memory,omitempty"`
	// Mode is what the GPU is used for now, as the backends report it
	// ("" is idle). Allow is what the configuration lets it be: auto
	// (default: anything while empty), vgpu, mig or passthrough.
	Mode  gpu.Mode `json:"mode,omitempty"`
	Allow gpu.Mode `json:"allow,omitempty"`
	// MixedSize: vGPUs of different sizes may share the GPU.
	MixedSize bool `json:"mixed_size,omitempty"`
	// MIGLayout pins the GPU's MIG instances (configuration mig_layout):
	// only these are ever created, at the places a first-fit carve of the
	// layout, largest first, gives them.
	MIGLayout []string `json:"mig_layout,omitempty"`
	// IOMMUGroup: GPUs of one host in the same group go to a VM together.
	IOMMUGroup string `json:"iommu_group,omitempty"`
	// Draining GPUs keep what runs on them and take nothing new.
	Draining bool `json:"draining,omitempty"`
	// Unavailable says why no backend can create on the GPU ("" if one can).
	Unavailable string `json:"unavailable,omitempty"`
}

// Allocation is a device that exists or is being made: one live row of
// pkg/store's allocations.
type Allocation struct {
	ID   string   `json:"id"` // the VM
	Host string   `json:"host"`
	GPU  string   `json:"gpu"`
	Kind gpu.Kind `json:"kind"`
	// Type is the vGPU type; Profile and Start the MIG instance.
	Type    string `json:"type,omitempty"`
	Profile string `json:"profile,omitempty"`
	Start   int    `json:"start"`
	// End is when the VM's lease ends (zero: not known, never).
	End time.Time `json:"end,omitzero"`
}

// Inventory is the model of every GPU and what it holds. Its methods are
// not safe for concurrent use; Clone gives an independent copy.
type Inventory struct {
	hosts   []hostState
	gpus    []gpuState
	byName  map[string]int   // host name → host index
	byAddr  map[string]int   // host + "/" + address → GPU index
	models  []*modelInfo     // distinct boards, by index
	byModel [][]int          // GPU indices of each board, ascending
	allocs  map[string][]int // VM → GPUs it holds (each once)
	ends    map[string]time.Time
	// resolved caches Need → []concrete; shared by clones (same boards).
	resolved *resolveCache
	// idx keeps plain GPUs in buckets of one placement state (index.go);
	// nil on small inventories.
	idx *gpuIndex
}

type hostState struct {
	name     string
	draining bool
	first, n int // GPU index range
	empty    int // GPUs holding nothing
	load     int // devices on its GPUs
}

type modelInfo struct {
	m  gpu.Model
	mt *migTable
	// types are the board's time-sliced vGPU types by canonical name.
	types map[string]gpu.VGPUTypeInfo
	list  []gpu.VGPUTypeInfo
}

type gpuState struct {
	host     int
	addr     string
	model    int // index into Inventory.models
	cur      gpu.Mode
	allow    gpu.Mode
	mixed    bool
	draining bool
	unavail  string
	group    []int          // the other GPUs of its IOMMU group
	layout   []gpu.Instance // pinned MIG layout, nil if free

	kind gpu.Kind // of what it holds; "" when empty
	n    int      // devices on it (a passthrough group member counts 1)
	// MIG
	node int32
	inst []migInst
	// vGPU
	vtype string
	vmax  int
	vmem  uint64
	nv    int // vGPUs on it (len(vgpus), kept apart for scratch copies)
	vgpus []vgpuInst
	// passthrough
	owner     string
	companion bool // held only as another GPU's IOMMU-group companion
	// busy is when everything on it has ended (zero when empty); never
	// when an end is unknown.
	busy time.Time
	ends []time.Time // one per device, for busy
}

type migInst struct {
	id    string
	prof  int
	start int
	end   time.Time
}

type vgpuInst struct {
	id  string
	typ string
	mem uint64
	end time.Time
}

// never stands for an unknown end.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// NewInventory builds the model from hosts and the allocations that exist.
// It checks everything: unknown boards or GPUs, two allocations on the same
// slots, a vGPU type the board does not offer, a passthrough GPU that also
// holds slices. All problems are reported together; no Inventory is returned
// with them.
func NewInventory(hosts []HostSpec, allocs []Allocation) (*Inventory, error) {
	inv := &Inventory{byName: map[string]int{}, byAddr: map[string]int{}, allocs: map[string][]int{}, ends: map[string]time.Time{}, resolved: &resolveCache{}}
	var errs []error
	modelIdx := map[string]int{}
	for hi, h := range hosts {
		if h.Name == "" {
			errs = append(errs, fmt.Errorf("host %d has no name", hi+1))
			continue
		}
		if _, dup := inv.byName[h.Name]; dup {
			errs = append(errs, fmt.Errorf("host %q is listed twice", h.Name))
			continue
		}
		inv.byName[h.Name] = len(inv.hosts)
		hs := hostState{name: h.Name, draining: h.Draining, first: len(inv.gpus)}
		groups := map[string][]int{}
		for _, spec := range h.GPUs {
			g, err := inv.newGPU(len(inv.hosts), spec, modelIdx)
			if err != nil {
				errs = append(errs, fmt.Errorf("host %s: %w", h.Name, err))
				continue
			}
			key := h.Name + "/" + spec.Address
			if _, dup := inv.byAddr[key]; dup {
				errs = append(errs, fmt.Errorf("host %s: GPU %s is listed twice", h.Name, spec.Address))
				continue
			}
			inv.byAddr[key] = len(inv.gpus)
			if spec.IOMMUGroup != "" {
				groups[spec.IOMMUGroup] = append(groups[spec.IOMMUGroup], len(inv.gpus))
			}
			inv.gpus = append(inv.gpus, g)
		}
		for _, members := range groups {
			for _, a := range members {
				for _, b := range members {
					if a != b {
						inv.gpus[a].group = append(inv.gpus[a].group, b)
					}
				}
			}
		}
		hs.n = len(inv.gpus) - hs.first
		hs.empty = hs.n
		inv.hosts = append(inv.hosts, hs)
	}
	inv.byModel = make([][]int, len(inv.models))
	for gi := range inv.gpus {
		m := inv.gpus[gi].model
		inv.byModel[m] = append(inv.byModel[m], gi)
	}
	inv.buildIndex()
	// Allocations, grouped by VM so that one VM's devices go in together, in
	// a stable order.
	sorted := append([]Allocation(nil), allocs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].ID == sorted[i].ID {
			j++
		}
		if err := inv.addExisting(sorted[i:j]); err != nil {
			errs = append(errs, err)
		}
		i = j
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return inv, nil
}

func (inv *Inventory) newGPU(host int, s GPUSpec, modelIdx map[string]int) (gpuState, error) {
	if s.Address == "" {
		return gpuState{}, fmt.Errorf("a GPU has no address")
	}
	var m gpu.Model
	switch {
	case s.DeviceID != 0:
		var ok bool
		if m, ok = gpu.ModelByID(s.DeviceID); !ok {
			m = gpu.UnknownModel(s.DeviceID)
		}
	case s.Model != "":
		mm, err := lookupModel(s.Model)
		if err != nil {
			return gpuState{}, fmt.Errorf("GPU %s: %w", s.Address, err)
		}
		m = mm
	default:
		return gpuState{}, fmt.Errorf("GPU %s: no model", s.Address)
	}
	if m.Memory == 0 {
		m.Memory = s.Memory
	}
	key := fmt.Sprintf("%04x/%s/%d", m.DeviceID, m.Name, m.Memory)
	mi, ok := modelIdx[key]
	if !ok {
		info := &modelInfo{m: m, types: map[string]gpu.VGPUTypeInfo{}}
		if m.MIG != nil {
			info.mt = tableFor(m.MIG)
		}
		for _, t := range m.VGPUTypes() {
			if !t.MIGBacked() {
				info.types[t.Name] = t
				info.list = append(info.list, t)
			}
		}
		mi = len(inv.models)
		modelIdx[key] = mi
		inv.models = append(inv.models, info)
	}
	g := gpuState{host: host, addr: s.Address, model: mi, cur: s.Mode, allow: s.Allow, mixed: s.MixedSize,
		draining: s.Draining, unavail: s.Unavailable}
	if g.cur == "" {
		g.cur = gpu.ModeIdle
	}
	if g.allow == "" {
		g.allow = gpu.ModeAuto
	}
	switch g.allow {
	case gpu.ModeAuto, gpu.ModeVGPU, gpu.ModeMIG, gpu.ModePassthrough:
	default:
		return gpuState{}, fmt.Errorf("GPU %s: mode %q is not auto, vgpu, mig or passthrough", s.Address, g.allow)
	}
	switch g.cur {
	case gpu.ModeIdle, gpu.ModeVGPU, gpu.ModeMIG, gpu.ModePassthrough:
	default:
		return gpuState{}, fmt.Errorf("GPU %s: current mode %q is not idle, vgpu, mig or passthrough", s.Address, g.cur)
	}
	info := inv.models[mi]
	if g.allow == gpu.ModeMIG && info.mt == nil {
		return gpuState{}, fmt.Errorf("GPU %s: %s has no MIG", s.Address, m.Name)
	}
	if g.allow == gpu.ModeVGPU && !m.VGPU {
		return gpuState{}, fmt.Errorf("GPU %s: %s has no vGPU support", s.Address, m.Name)
	}
	if info.mt != nil {
		g.node = info.mt.empty
	}
	if len(s.MIGLayout) > 0 {
		if info.mt == nil {
			return gpuState{}, fmt.Errorf("GPU %s: a MIG layout on %s, which has no MIG", s.Address, m.Name)
		}
		lay, err := carveLayout(m.MIG, s.MIGLayout)
		if err != nil {
			return gpuState{}, fmt.Errorf("GPU %s: %w", s.Address, err)
		}
		g.layout = lay
	}
	return g, nil
}

// lookupModel finds a board by name or PCI ID ("10de:2331", "0x2331").
func lookupModel(name string) (gpu.Model, error) {
	n := strings.TrimSpace(name)
	if id, ok := strings.CutPrefix(strings.ToLower(n), "10de:"); ok {
		n = "0x" + id
	}
	if strings.HasPrefix(strings.ToLower(n), "0x") {
		id, err := gpu.ParseDeviceID(n)
		if err != nil {
			return gpu.Model{}, err
		}
		if m, ok := gpu.ModelByID(id); ok {
			return m, nil
		}
		return gpu.UnknownModel(id), nil
	}
	for _, m := range gpu.Models() {
		if strings.EqualFold(m.Name, n) || (m.Board != "" && strings.EqualFold(m.Board, n)) {
			return m, nil
		}
	}
	var hits []gpu.Model
	for _, m := range gpu.Models() {
		if m.MatchesName(n) {
			hits = append(hits, m)
		}
	}
	if len(hits) == 1 {
		return hits[0], nil
	}
	if len(hits) > 1 {
		names := make([]string, len(hits))
		for i, h := range hits {
			names[i] = h.Name
		}
		return gpu.Model{}, fmt.Errorf("model %q could be %s: name the board exactly", name, strings.Join(names, ", "))
	}
	return gpu.Model{}, fmt.Errorf("model %q is not a GPU gpuvm knows", name)
}

// carveLayout places a layout's instances largest first, each at its lowest
// free start that lets the rest fit (the first-fit carve, backtracking where
// it would strand an instance: 3g.40gb, 2g.20gb and two 1g.10gb fit an H100
// only with the 3g at slot 4, as the configuration's check finds).
func carveLayout(t *gpu.MIGTable, names []string) ([]gpu.Instance, error) {
	var ps []gpu.MIGProfile
	for _, n := range names {
		p, ok := t.Profile(n)
		if !ok {
			return nil, fmt.Errorf("MIG layout: no profile %q (profiles: %s)", n, strings.Join(t.ProfileNames(), ", "))
		}
		ps = append(ps, p)
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Size != ps[j].Size {
			return ps[i].Size > ps[j].Size
		}
		return ps[i].Compute > ps[j].Compute
	})
	var out []gpu.Instance
	stuck := ""
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(ps) {
			return true
		}
		fs := t.FreeStarts(out, ps[i])
		if len(fs) == 0 && stuck == "" {
			stuck = ps[i].Name
		}
		for _, s := range fs {
			out = append(out, gpu.Instance{Profile: ps[i], Start: s})
			if place(i + 1) {
				return true
			}
			out = out[:len(out)-1]
		}
		return false
	}
	if !place(0) {
		return nil, fmt.Errorf("MIG layout %s does not fit: no room for %s", strings.Join(names, ", "), stuck)
	}
	return out, nil
}

func (inv *Inventory) addExisting(as []Allocation) error {
	id := as[0].ID
	if id == "" {
		return fmt.Errorf("an allocation on %s/%s has no VM ID", as[0].Host, as[0].GPU)
	}
	if _, ok := inv.byName[as[0].Host]; !ok {
		return fmt.Errorf("VM %s: unknown host %q", id, as[0].Host)
	}
	p := Placement{Host: as[0].Host}
	end := as[0].End
	for _, a := range as {
		if a.Host != as[0].Host {
			return fmt.Errorf("VM %s: devices on two hosts (%s, %s)", id, as[0].Host, a.Host)
		}
		if a.End.After(end) {
			end = a.End
		}
		d := Device{GPU: a.GPU, Kind: a.Kind, Type: a.Type, Profile: a.Profile, Start: a.Start}
		p.Devices = append(p.Devices, d)
	}
	if err := inv.Allocate(id, p, end); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	return nil
}

// Clone returns an independent copy.
func (inv *Inventory) Clone() *Inventory { return inv.CloneInto(nil) }

// CloneInto is Clone made in c, an inventory nothing uses any more (one
// made by Clone or CloneInto, not inv), whose memory it reuses; nil: a new
// one. A scheduling cycle, and an estimate's replay of hundreds of them,
// try placements on copies they then drop (issue #26).
func (inv *Inventory) CloneInto(c *Inventory) *Inventory {
	if c == nil {
		c = &Inventory{}
	}
	c.hosts = append(c.hosts[:0], inv.hosts...)
	c.gpus = slices.Grow(c.gpus[:0], len(inv.gpus))[:len(inv.gpus)]
	for i := range inv.gpus {
		g := &c.gpus[i]
		inst, vgpus, ends := g.inst[:0], g.vgpus[:0], g.ends[:0]
		*g = inv.gpus[i]
		g.inst = append(inst, g.inst...)
		g.vgpus = append(vgpus, g.vgpus...)
		g.ends = append(ends, g.ends...)
	}
	c.byName, c.byAddr = inv.byName, inv.byAddr // never written after NewInventory
	c.models, c.byModel, c.resolved = inv.models, inv.byModel, inv.resolved
	c.allocs = copyMap(c.allocs, inv.allocs) // the slices are never changed in place
	c.ends = copyMap(c.ends, inv.ends)
	c.idx = inv.idx.cloneInto(c.idx)
	return c
}

// copyMap is src copied into dst, emptied first (nil: a new map).
func copyMap[K comparable, V any](dst, src map[K]V) map[K]V {
	if dst == nil || src == nil {
		return maps.Clone(src)
	}
	clear(dst)
	maps.Copy(dst, src)
	return dst
}

// trials keep the inventories of the placements a cycle tries and drops.
var trials sync.Pool

// trial is a copy of inv to try placements on; drop gives it back.
func (inv *Inventory) trial() *Inventory {
	t, _ := trials.Get().(*Inventory)
	return inv.CloneInto(t)
}

// drop gives back a copy of trial: nothing may use it after.
func (inv *Inventory) drop() { trials.Put(inv) }

func (inv *Inventory) gpuIndex(host, addr string) (int, bool) {
	i, ok := inv.byAddr[host+"/"+addr]
	return i, ok
}

// allows reports whether the configuration and the board let the GPU serve
// kind at all (what it holds now aside), and no backend says it cannot now.
func (inv *Inventory) allows(g *gpuState, k gpu.Kind) bool {
	return g.unavail == "" && inv.configured(g, k)
}

// configured is allows without the backends' word: whether the GPU could
// ever serve kind.
func (inv *Inventory) configured(g *gpuState, k gpu.Kind) bool {
	info := inv.models[g.model]
	switch k {
	case gpu.KindMIG:
		return info.mt != nil && (g.allow == gpu.ModeAuto || g.allow == gpu.ModeMIG)
	case gpu.KindVGPU:
		return info.m.VGPU && len(info.list) > 0 && (g.allow == gpu.ModeAuto || g.allow == gpu.ModeVGPU)
	case gpu.KindPassthrough:
		return g.allow == gpu.ModeAuto || g.allow == gpu.ModePassthrough
	}
	return false
}

// Allocate records a placement for VM id, ending at end (zero: unknown). It
// checks every device against the rules and either records all of them or
// none.
func (inv *Inventory) Allocate(id string, p Placement, end time.Time) error {
	if id == "" {
		return fmt.Errorf("no VM ID")
	}
	if _, dup := inv.allocs[id]; dup {
		return fmt.Errorf("VM %s already holds devices", id)
	}
	if len(p.Devices) == 0 {
		return fmt.Errorf("a placement with no device")
	}
	if _, ok := inv.byName[p.Host]; !ok {
		return fmt.Errorf("unknown host %q", p.Host)
	}
	var touched []int
	for _, d := range p.Devices {
		gi, ok := inv.gpuIndex(p.Host, d.GPU)
		if !ok {
			inv.undo(id, touched)
			return fmt.Errorf("host %s has no GPU %s", p.Host, d.GPU)
		}
		extra, err := inv.apply(gi, d, id, end)
		if err != nil {
			inv.undo(id, touched)
			return fmt.Errorf("%s on %s/%s: %w", d.Kind, p.Host, d.GPU, err)
		}
		touched = appendUnique(touched, gi)
		for _, x := range extra {
			touched = appendUnique(touched, x)
		}
	}
	inv.allocs[id] = touched
	inv.ends[id] = end
	return nil
}

func appendUnique(xs []int, x int) []int {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	return append(xs, x)
}

// undo takes a half-made allocation back off the GPUs it touched.
func (inv *Inventory) undo(id string, touched []int) {
	for _, gi := range touched {
		inv.removeFrom(gi, id)
	}
}

// apply puts one device on GPU gi; extra lists the IOMMU-group companions it
// also took.
func (inv *Inventory) apply(gi int, d Device, id string, end time.Time) (extra []int, err error) {
	g := &inv.gpus[gi]
	info := inv.models[g.model]
	if end.IsZero() {
		end = never
	}
	if g.owner != "" {
		return nil, fmt.Errorf("the GPU is given whole to %s", g.owner)
	}
	if g.kind != "" && g.kind != d.Kind {
		return nil, fmt.Errorf("the GPU holds %s devices; it changes mode only when empty", g.kind)
	}
	if !inv.configured(g, d.Kind) {
		return nil, fmt.Errorf("the GPU cannot give %s (mode %s, %s)", d.Kind, g.allow, info.m.Name)
	}
	switch d.Kind {
	case gpu.KindMIG:
		pi := info.mt.profileIndex(strings.ToLower(d.Profile))
		if pi < 0 {
			return nil, fmt.Errorf("%s has no MIG profile %q", info.m.Name, d.Profile)
		}
		if g.layout != nil && !inLayout(g.layout, info.mt.t.Profiles[pi], d.Start) {
			return nil, fmt.Errorf("%s@%d is not in the GPU's MIG layout", d.Profile, d.Start)
		}
		next := int32(-1)
		for _, o := range info.mt.nodes[g.node].opts[pi] {
			if o.start == d.Start {
				next = o.next
			}
		}
		if next < 0 {
			return nil, fmt.Errorf("%s cannot be created at slot %d now: %v", d.Profile, d.Start,
				info.mt.t.CanPlace(inv.instances(g), info.mt.t.Profiles[pi], d.Start))
		}
		g.node = next
		g.inst = append(g.inst, migInst{id: id, prof: pi, start: d.Start, end: end})
	case gpu.KindVGPU:
		t, ok := info.types[strings.ToUpper(d.Type)]
		if !ok {
			return nil, fmt.Errorf("%s offers no time-sliced vGPU type %q", info.m.Name, d.Type)
		}
		if err := vgpuFits(g, info, t); err != nil {
			return nil, err
		}
		if !g.mixed {
			g.vtype, g.vmax = t.Name, t.MaxInstances
		}
		g.vmem += t.Memory
		g.nv++
		g.vgpus = append(g.vgpus, vgpuInst{id: id, typ: t.Name, mem: t.Memory, end: end})
	case gpu.KindPassthrough:
		if g.n > 0 {
			return nil, fmt.Errorf("the GPU is not empty")
		}
		for _, o := range g.group {
			og := &inv.gpus[o]
			if og.n > 0 || og.owner != "" {
				return nil, fmt.Errorf("GPU %s of its IOMMU group is in use", og.addr)
			}
			if !inv.configured(og, gpu.KindPassthrough) {
				return nil, fmt.Errorf("GPU %s of its IOMMU group cannot be passed through", og.addr)
			}
		}
		g.owner = id
		for _, o := range g.group {
			og := &inv.gpus[o]
			og.owner, og.kind, og.n, og.companion = id, gpu.KindPassthrough, 1, true
			og.ends = append(og.ends, end)
			og.busy = end
			inv.hosts[og.host].empty--
			inv.hosts[og.host].load++
			extra = append(extra, o)
		}
	default:
		return nil, fmt.Errorf("unknown kind %q", d.Kind)
	}
	if g.n == 0 {
		inv.hosts[g.host].empty--
	}
	inv.hosts[g.host].load++
	g.kind = d.Kind
	g.n++
	g.ends = append(g.ends, end)
	if end.After(g.busy) {
		g.busy = end
	}
	inv.reindex(gi)
	for _, o := range extra {
		inv.reindex(o)
	}
	return extra, nil
}

// vgpuRoom is vgpuFits without the message, for the placement loop.
func vgpuRoom(g *gpuState, info *modelInfo, t *gpu.VGPUTypeInfo) bool {
	if g.mixed {
		return t.Series != gpu.SeriesC && g.vmem+t.Memory <= info.m.Memory && g.nv < info.m.MaxVGPUs
	}
	return (g.vtype == "" || g.vtype == t.Name) && g.nv < t.MaxInstances
}

// vgpuFits says why one more vGPU of type t does not fit on g (nil: it does).
func vgpuFits(g *gpuState, info *modelInfo, t gpu.VGPUTypeInfo) error {
	if vgpuRoom(g, info, &t) {
		return nil
	}
	if g.mixed {
		if t.Series == gpu.SeriesC {
			return fmt.Errorf("mixed-size mode offers only Q, B and A types, not %s", t.Name)
		}
		if g.vmem+t.Memory > info.m.Memory {
			return fmt.Errorf("%s needs %s of framebuffer; %s is free", t.Name, formatBytes(t.Memory), formatBytes(info.m.Memory-g.vmem))
		}
		if g.nv >= info.m.MaxVGPUs {
			return fmt.Errorf("the GPU holds its maximum of %d vGPUs", info.m.MaxVGPUs)
		}
		return nil
	}
	if g.vtype != "" && g.vtype != t.Name {
		return fmt.Errorf("the GPU holds %s vGPUs and is in equal-size mode", g.vtype)
	}
	if g.nv >= t.MaxInstances {
		return fmt.Errorf("the GPU holds the maximum of %d %s vGPUs", t.MaxInstances, t.Name)
	}
	return nil
}

func inLayout(lay []gpu.Instance, p gpu.MIGProfile, start int) bool {
	for _, in := range lay {
		if in.Profile.ID == p.ID && in.Start == start {
			return true
		}
	}
	return false
}

func (inv *Inventory) instances(g *gpuState) []gpu.Instance {
	mt := inv.models[g.model].mt
	out := make([]gpu.Instance, len(g.inst))
	for i, in := range g.inst {
		out[i] = gpu.Instance{Profile: mt.t.Profiles[in.prof], Start: in.start}
	}
	return out
}

// Release frees every device of VM id. It reports whether the VM held any.
func (inv *Inventory) Release(id string) bool {
	gis, ok := inv.allocs[id]
	if !ok {
		return false
	}
	for _, gi := range gis {
		inv.removeFrom(gi, id)
	}
	delete(inv.allocs, id)
	delete(inv.ends, id)
	return true
}

// removeFrom takes every device of id off GPU gi.
func (inv *Inventory) removeFrom(gi int, id string) {
	g := &inv.gpus[gi]
	removed := 0
	if g.owner == id {
		g.owner, g.companion = "", false
		removed = 1
	}
	if len(g.inst) > 0 {
		kept := g.inst[:0:0]
		for _, in := range g.inst {
			if in.id != id {
				kept = append(kept, in)
			}
		}
		if n := len(g.inst) - len(kept); n > 0 {
			removed += n
			g.inst = kept
			mt := inv.models[g.model].mt
			node, ok := mt.stateOf(inv.instances(g))
			if !ok { // cannot happen: a subset of a valid set is valid
				panic("scheduler: MIG state lost on release")
			}
			g.node = node
		}
	}
	if len(g.vgpus) > 0 {
		kept := g.vgpus[:0:0]
		for _, v := range g.vgpus {
			if v.id != id {
				kept = append(kept, v)
			} else {
				g.vmem -= v.mem
			}
		}
		if n := len(g.vgpus) - len(kept); n > 0 {
			removed += n
			g.vgpus = kept
			g.nv = len(kept)
		}
	}
	if removed == 0 {
		return
	}
	inv.hosts[g.host].load -= removed
	g.n -= removed
	g.ends = g.ends[:0:0]
	g.busy = time.Time{}
	for _, in := range g.inst {
		g.ends = append(g.ends, in.end)
	}
	for _, v := range g.vgpus {
		g.ends = append(g.ends, v.end)
	}
	if g.owner != "" {
		g.ends = append(g.ends, inv.ends[g.owner])
	}
	for _, e := range g.ends {
		if e.After(g.busy) {
			g.busy = e
		}
	}
	if g.n == 0 {
		g.kind, g.vtype, g.vmax, g.vmem = "", "", 0, 0
		g.cur = gpu.ModeIdle
		inv.hosts[g.host].empty++
		g.busy = time.Time{}
	} else {
		g.cur = gpu.ModeOf(g.kind)
	}
	inv.reindex(gi)
}

// Allocations lists what the inventory holds, sorted by VM, host, GPU and
// start slot: the rows the orchestrator stores.
func (inv *Inventory) Allocations() []Allocation {
	var out []Allocation
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		host := inv.hosts[g.host].name
		info := inv.models[g.model]
		end := func(e time.Time) time.Time {
			if e.Equal(never) {
				return time.Time{}
			}
			return e
		}
		for _, in := range g.inst {
			out = append(out, Allocation{ID: in.id, Host: host, GPU: g.addr, Kind: gpu.KindMIG, Profile: info.mt.t.Profiles[in.prof].Name, Start: in.start, End: end(in.end)})
		}
		for _, v := range g.vgpus {
			out = append(out, Allocation{ID: v.id, Host: host, GPU: g.addr, Kind: gpu.KindVGPU, Type: v.typ, End: end(v.end)})
		}
		if g.owner != "" && !g.companion {
			out = append(out, Allocation{ID: g.owner, Host: host, GPU: g.addr, Kind: gpu.KindPassthrough, End: end(inv.ends[g.owner])})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		return a.Start < b.Start
	})
	return out
}

// Holds reports whether VM id holds devices.
func (inv *Inventory) Holds(id string) bool {
	_, ok := inv.allocs[id]
	return ok
}

// GPUCount is the number of GPUs.
func (inv *Inventory) GPUCount() int { return len(inv.gpus) }

// HostNames lists the hosts in order.
func (inv *Inventory) HostNames() []string {
	out := make([]string, len(inv.hosts))
	for i, h := range inv.hosts {
		out[i] = h.name
	}
	return out
}
