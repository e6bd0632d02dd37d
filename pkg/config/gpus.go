package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// simGPU is one GPU of a simulated server preset.
type simGPU struct {
	address  string
	deviceID uint16
}

// simPresets mirrors the presets of the simulated GPU server (pkg/host/sim,
// presets.go): the PCI address and board of every GPU. It is repeated here
// because pkg/config stays pure and free of cgo; TestSimPresetsMatch keeps
// the names in step.
var simPresets = map[string][]simGPU{
	"a100x4": {{"0000:17:00.0", 0x20f1}, {"0000:31:00.0", 0x20f1}, {"0000:b1:00.0", 0x20f1}, {"0000:ca:00.0", 0x20f1}},
	"a40x2":  {{"0000:41:00.0", 0x2235}, {"0000:c1:00.0", 0x2235}},
	"l40sx4": {{"0000:01:00.0", 0x26b9}, {"0000:21:00.0", 0x26b9}, {"0000:81:00.0", 0x26b9}, {"0000:a1:00.0", 0x26b9}},
	"h100x8": {
		{"0000:18:00.0", 0x2331}, {"0000:2a:00.0", 0x2331}, {"0000:3a:00.0", 0x2331}, {"0000:5d:00.0", 0x2331},
		{"0000:9a:00.0", 0x2331}, {"0000:ab:00.0", 0x2331}, {"0000:ba:00.0", 0x2331}, {"0000:db:00.0", 0x2331},
	},
	"mixed": {{"0000:17:00.0", 0x20f1}, {"0000:41:00.0", 0x2235}, {"0000:81:00.0", 0x26b9}, {"0000:9a:00.0", 0x2331}, {"0000:c1:00.0", 0x2684}},
}

// SimulatorPresets lists the simulated server presets a host block may name.
func SimulatorPresets() []string { return sortedKeys(simPresets) }

func simGPUAt(preset, addr string) (simGPU, bool) {
	for _, g := range simPresets[preset] {
		if g.address == addr {
			return g, true
		}
	}
	return simGPU{}, false
}

func simAddresses(preset string) []string {
	var out []string
	for _, g := range simPresets[preset] {
		out = append(out, g.address)
	}
	return out
}

// modelsMatching returns every board that answers to name ("H100" is a
// family of three).
func modelsMatching(name string) []gpu.Model {
	var out []gpu.Model
	for _, m := range gpu.Models() {
		if m.MatchesName(name) || m.MatchesName("GeForce "+name) {
			out = append(out, m)
		}
	}
	return out
}

func modelNames() []string {
	var out []string
	for _, m := range gpu.Models() {
		out = append(out, m.Name)
		if m.Board != "" {
			out = append(out, m.Board)
		}
	}
	return out
}

// exactModel finds one board by name: its full name, its vGPU board name, or
// a family name that only one board answers to.
func exactModel(name string) (gpu.Model, error) {
	ms := modelsMatching(name)
	for _, m := range ms {
		if strings.EqualFold(m.Name, name) || strings.EqualFold(m.Board, name) {
			if len(ms) == 1 || strings.EqualFold(m.Name, name) {
				return m, nil
			}
		}
	}
	switch len(ms) {
	case 0:
		return gpu.Model{}, fmt.Errorf("%q is not a GPU model gpuvm knows.%s", name, suggestion(name, modelNames()))
	case 1:
		return ms[0], nil
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return gpu.Model{}, fmt.Errorf("%q could be %s: name the board exactly", name, quoteList(names))
}

func migTables() []*gpu.MIGTable {
	seen := map[*gpu.MIGTable]bool{}
	var out []*gpu.MIGTable
	for _, m := range gpu.Models() {
		if m.MIG != nil && !seen[m.MIG] {
			seen[m.MIG] = true
			out = append(out, m.MIG)
		}
	}
	return out
}

func migProfileExists(name string) bool {
	for _, t := range migTables() {
		if _, ok := t.Profile(name); ok {
			return true
		}
	}
	return false
}

func allMIGProfileNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range migTables() {
		for _, n := range t.ProfileNames() {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

func sortProfilesBySize(ps []gpu.MIGProfile) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Size != ps[j].Size {
			return ps[i].Size > ps[j].Size
		}
		return ps[i].Compute > ps[j].Compute
	})
}

// boardModels returns the boards whose vGPU types start with board ("L40S").
func boardModels(board string) []gpu.Model {
	var out []gpu.Model
	for _, m := range gpu.Models() {
		if m.Board != "" && strings.EqualFold(m.Board, board) {
			out = append(out, m)
		}
	}
	return out
}

func vgpuBoards() []string {
	var out []string
	for _, m := range gpu.Models() {
		if m.VGPU && m.Board != "" {
			out = append(out, m.Board)
		}
	}
	return out
}

// --- the GPUs this server can have ---

// gpuSlot is a GPU, or a kind of GPU, of this server as the configuration
// describes it.
type gpuSlot struct {
	address  string     // "" when not known
	model    *gpu.Model // nil when not known
	settings GPUSettings
}

func (s gpuSlot) describe() string {
	name := "a GPU of unknown model"
	if s.model != nil {
		name = s.model.Name
	}
	return fmt.Sprintf("%s in mode %q", name, s.settings.Mode)
}

// gpuWorld is every GPU the configuration tells of. On a simulated server the
// list is complete; on real hardware unnamed GPUs are "of unknown model" and
// can be anything.
type gpuWorld struct {
	complete bool
	where    string // "the simulated h100x8 server", "this server"
	slots    []gpuSlot
	plugins  Plugins
}

// Settings returns the settings that apply to the GPU at address with model m:
// a block for its address, else for its model, else for "all", else mode auto.
func (h *Host) Settings(address string, m gpu.Model) GPUSettings {
	var byModel, all *GPUSettings
	for _, s := range h.GPUs {
		switch s.Match {
		case MatchAddress:
			if s.Selector == address {
				return *s
			}
		case MatchModel:
			if byModel == nil && m.MatchesName(s.Selector) {
				byModel = s
			}
		case MatchAll:
			all = s
		}
	}
	switch {
	case byModel != nil:
		return *byModel
	case all != nil:
		return *all
	}
	return GPUSettings{Selector: MatchAll, Match: MatchAll, Mode: gpu.ModeAuto}
}

func (r *resolver) newGPUWorld() *gpuWorld {
	h := &r.cfg.Server.Host
	w := &gpuWorld{where: "this server", plugins: r.cfg.Server.Plugins}
	if h.Simulate != "" {
		w.complete = true
		w.where = fmt.Sprintf("the simulated %s server", h.Simulate)
		for _, g := range simPresets[h.Simulate] {
			m, _ := gpu.ModelByID(g.deviceID)
			mm := m
			w.slots = append(w.slots, gpuSlot{address: g.address, model: &mm, settings: h.Settings(g.address, m)})
		}
		return w
	}
	var allModel *gpu.Model
	allSettings := GPUSettings{Selector: MatchAll, Match: MatchAll, Mode: gpu.ModeAuto}
	for _, s := range h.GPUs {
		if s.Match == MatchAll {
			allSettings = *s
			if s.Model != "" {
				if m, err := exactModel(s.Model); err == nil {
					allModel = &m
				}
			}
		}
	}
	for _, s := range h.GPUs {
		switch s.Match {
		case MatchAddress:
			slot := gpuSlot{address: s.Selector, settings: *s, model: allModel}
			if s.Model != "" {
				if m, err := exactModel(s.Model); err == nil {
					slot.model = &m
				}
			}
			w.slots = append(w.slots, slot)
		case MatchModel:
			for _, m := range modelsMatching(s.Selector) {
				mm := m
				w.slots = append(w.slots, gpuSlot{model: &mm, settings: *s})
			}
		}
	}
	// The GPUs no block names.
	w.slots = append(w.slots, gpuSlot{model: allModel, settings: allSettings})
	return w
}

// backendFor is the backend that serves a kind of need.
func backendFor(kind gpu.Kind) string {
	switch kind {
	case gpu.KindVGPU:
		return "vgpu"
	case gpu.KindMIG:
		return "mig"
	}
	return "passthrough"
}

// whyNot says why slot cannot give one device of need, or "" if it can.
func whyNot(s gpuSlot, need *GPUNeed, kind gpu.Kind) string {
	mode := s.settings.Mode
	if need.Model != "" && s.model != nil && !s.model.MatchesName(need.Model) {
		return fmt.Sprintf("the profile wants a %s", need.Model)
	}
	switch kind {
	case gpu.KindVGPU:
		if mode != gpu.ModeVGPU && mode != gpu.ModeAuto {
			return "vGPUs need mode \"vgpu\" or \"auto\""
		}
		if s.model == nil {
			return ""
		}
		if !s.model.VGPU {
			return "the board has no vGPU support"
		}
		if need.Kind == gpu.KindAny {
			for _, t := range s.model.VGPUTypes() {
				if !t.MIGBacked() && t.Memory >= need.Memory && (need.Series == "" || string(t.Series) == need.Series) &&
					(!s.settings.MixedSize || t.Series != gpu.SeriesC) {
					return ""
				}
			}
			return fmt.Sprintf("no vGPU type of %s has %s or more", s.model.Name, FormatSize(need.Memory))
		}
		t, err := s.model.VGPUType(need.Type)
		if err != nil {
			return err.Error()
		}
		if s.settings.MixedSize && t.Series == gpu.SeriesC {
			return "mixed-size mode offers only Q, B and A types"
		}
		return ""
	case gpu.KindMIG:
		if mode != gpu.ModeMIG && mode != gpu.ModeAuto {
			return "MIG instances need mode \"mig\" or \"auto\""
		}
		if s.model == nil {
			return ""
		}
		if s.model.MIG == nil {
			return "the board has no MIG"
		}
		layout := s.settings.MIGLayout
		fits := func(p gpu.MIGProfile) bool {
			if need.Kind == gpu.KindAny {
				return uint64(p.MemoryGB)*gpu.GiB >= need.Memory
			}
			return p.Name == strings.ToLower(need.Profile)
		}
		if len(layout) > 0 {
			for _, n := range layout {
				if p, ok := s.model.MIG.Profile(n); ok && fits(p) {
					return ""
				}
			}
			return fmt.Sprintf("its mig_layout (%s) has no such instance", strings.Join(layout, ", "))
		}
		for _, p := range s.model.MIG.Profiles {
			if fits(p) {
				return ""
			}
		}
		if need.Kind == gpu.KindAny {
			return fmt.Sprintf("no MIG profile of %s has %s or more", s.model.Name, FormatSize(need.Memory))
		}
		return fmt.Sprintf("%s has no MIG profile %s (its profiles: %s)", s.model.Name, need.Profile, strings.Join(s.model.MIG.ProfileNames(), ", "))
	default:
		if mode != gpu.ModePassthrough && mode != gpu.ModeAuto {
			return "whole GPUs need mode \"passthrough\" or \"auto\""
		}
		if s.model != nil && need.Kind == gpu.KindAny && s.model.Memory < need.Memory {
			return fmt.Sprintf("%s has less than %s", s.model.Name, FormatSize(need.Memory))
		}
		return ""
	}
}

// checkSatisfiable warns when no GPU of this server can ever give the need.
func (r *resolver) checkSatisfiable(p *profileBlock, need *GPUNeed) {
	w := r.gpus
	kinds := []gpu.Kind{need.Kind}
	if need.Kind == gpu.KindAny {
		kinds = need.Kinds
	}
	var reasons []string
	seen := map[string]int{}
	serving := 0
	for _, kind := range kinds {
		if !w.plugins.Enabled(backendFor(kind)) {
			reasons = append(reasons, fmt.Sprintf("the %s backend is not enabled (server { plugins { backends } })", backendFor(kind)))
			continue
		}
		for _, s := range w.slots {
			why := whyNot(s, need, kind)
			if why == "" {
				serving++
				continue
			}
			line := fmt.Sprintf("%s: %s", s.describe(), why)
			if _, ok := seen[line]; !ok {
				reasons = append(reasons, line)
			}
			seen[line]++
		}
	}
	rng := p.GPU.DefRange
	if serving == 0 {
		for i, line := range reasons {
			if n := seen[line]; n > 1 {
				reasons[i] = fmt.Sprintf("%d× %s", n, line)
			}
		}
		r.warnf(rng, "No GPU can give this profile", "Profile %q wants %s, which no GPU of %s can ever give:\n- %s",
			p.Name, describeNeed(need), w.where, strings.Join(reasons, "\n- "))
		return
	}
	if w.complete && need.Kind == gpu.KindPassthrough && need.Count > serving {
		r.warnf(valueRange(p.GPU.Body, "count", rng), "Not enough GPUs", "Profile %q wants %d whole GPUs; %s has %d that can be given whole.", p.Name, need.Count, w.where, serving)
	}
}

func describeNeed(n *GPUNeed) string {
	var s string
	switch n.Kind {
	case gpu.KindVGPU:
		s = "vGPU " + n.Type
	case gpu.KindMIG:
		s = "MIG instance " + n.Profile
		if n.Model != "" {
			s += " on a " + n.Model
		}
	case gpu.KindPassthrough:
		s = "a whole GPU"
		if n.Model != "" {
			s = "a whole " + n.Model
		}
	default:
		s = fmt.Sprintf("%s of GPU memory as %s", FormatSize(n.Memory), strings.Join(gpu.KindNames(n.Kinds), " or "))
	}
	if n.Count > 1 {
		s = fmt.Sprintf("%d× %s", n.Count, s)
	}
	return s
}

var (
	needKinds  = []string{string(gpu.KindVGPU), string(gpu.KindMIG), string(gpu.KindPassthrough)}
	seriesList = []string{"Q", "B", "A", "C"}
)

// resolveGPUNeed checks a profile's gpu block against pkg/gpu's facts.
func (r *resolver) resolveGPUNeed(p *profileBlock) *GPUNeed {
	g := p.GPU
	body, def := g.Body, g.DefRange
	need := &GPUNeed{Count: 1}
	bad := false
	if g.Count != nil {
		need.Count = *g.Count
		if need.Count < 1 || need.Count > 16 {
			r.errf(valueRange(body, "count", def), "Invalid count", "count is from 1 to 16, not %d.", need.Count)
			bad = true
		}
	}
	if g.Model != nil {
		need.Model = *g.Model
		if len(modelsMatching(need.Model)) == 0 {
			r.errf(valueRange(body, "model", def), "Unknown GPU model", "%q is not a GPU model gpuvm knows.%s", need.Model, suggestion(need.Model, modelNames()))
			need.Model = ""
			bad = true
		}
	}
	notFor := func(attr string, kind gpu.Kind) bool {
		if has(body, attr) {
			r.errf(attrRange(body, attr, def), attr+" does not apply", "%s is not used by a gpu block of kind %q.", attr, kind)
			return true
		}
		return false
	}
	if g.Kind == nil {
		need = r.resolveAbstractNeed(p, need)
		if bad {
			return nil
		}
		return need
	}
	need.Kind = gpu.Kind(*g.Kind)
	if !r.oneOf(body, "kind", string(need.Kind), needKinds, def) {
		return nil
	}
	for _, a := range []string{"memory", "kinds", "series"} {
		if has(body, a) {
			r.errf(attrRange(body, a, def), a+" is for abstract needs", "%s describes a need the scheduler meets with any fitting slice; a gpu block with kind = %q names its slice exactly. Leave out kind to write an abstract need.", a, need.Kind)
			bad = true
		}
	}
	switch need.Kind {
	case gpu.KindVGPU:
		bad = notFor("profile", need.Kind) || bad
		if g.Type == nil && has(body, "type") {
			return nil
		}
		if g.Type == nil {
			r.errf(def, "Missing vGPU type", "A gpu block of kind \"vgpu\" needs type, a vGPU type such as \"L40S-12Q\" or \"A100-4C\".")
			return nil
		}
		rng := valueRange(body, "type", def)
		t, err := gpu.ParseVGPUType(*g.Type)
		if err != nil {
			r.errf(rng, "Invalid vGPU type", "%v.", err)
			return nil
		}
		boards := boardModels(t.Board)
		if len(boards) == 0 {
			r.errf(rng, "Unknown vGPU board", "%s: no board gpuvm knows makes vGPU types named %s-…; the boards are %s.%s", t.Name, t.Board, strings.Join(vgpuBoards(), ", "), suggestion(t.Board, vgpuBoards()))
			return nil
		}
		info, err := boards[0].VGPUType(t.Name)
		if err != nil {
			r.errf(rng, "Unknown vGPU type", "%v%s.", err, typeHint(boards[0], t))
			return nil
		}
		if info.MIGBacked() {
			r.errf(rng, "MIG-backed vGPU type", "%s runs on a MIG instance: write gpu { kind = \"mig\" profile = %q model = %q }; gpuvm gives MIG instances to VMs as MIG-backed vGPUs.", info.Name, info.MIGProfile, boards[0].Board)
			return nil
		}
		if need.Model != "" && !boards[0].MatchesName(need.Model) {
			r.errf(valueRange(body, "model", def), "Model does not match the type", "%s is a type of the %s, not of a %s.", info.Name, boards[0].Name, need.Model)
			return nil
		}
		need.Type, need.Memory = info.Name, info.Memory
		if need.Model == "" {
			need.Model = boards[0].Board
		}
	case gpu.KindMIG:
		bad = notFor("type", need.Kind) || bad
		if g.Profile == nil && has(body, "profile") {
			return nil
		}
		if g.Profile == nil {
			r.errf(def, "Missing MIG profile", "A gpu block of kind \"mig\" needs profile, a MIG profile such as \"3g.40gb\" or \"1g.10gb\".")
			return nil
		}
		rng := valueRange(body, "profile", def)
		name := strings.ToLower(strings.TrimSpace(*g.Profile))
		var mem uint64
		var onModels []string
		for _, m := range gpu.Models() {
			if m.MIG == nil || (need.Model != "" && !m.MatchesName(need.Model)) {
				continue
			}
			if pr, ok := m.MIG.Profile(name); ok {
				mem = uint64(pr.MemoryGB) * gpu.GiB
				onModels = append(onModels, m.Name)
			}
		}
		if len(onModels) == 0 {
			if need.Model != "" && migProfileExists(name) {
				m := modelsMatching(need.Model)[0]
				hint := "it has no MIG"
				if m.MIG != nil {
					hint = "its profiles: " + strings.Join(m.MIG.ProfileNames(), ", ")
				}
				r.errf(rng, "Unknown MIG profile", "%s has no MIG profile %q (%s).", need.Model, *g.Profile, hint)
			} else {
				r.errf(rng, "Unknown MIG profile", "%q is not a MIG profile of any board; they are named <compute slices>g.<memory>gb, e.g. 1g.10gb, 3g.40gb, 7g.80gb.%s", *g.Profile, suggestion(name, allMIGProfileNames()))
			}
			return nil
		}
		need.Profile, need.Memory = name, mem
	case gpu.KindPassthrough:
		bad = notFor("type", need.Kind) || bad
		bad = notFor("profile", need.Kind) || bad
		for _, m := range gpu.Models() {
			if need.Model == "" || m.MatchesName(need.Model) {
				if need.Memory == 0 || m.Memory < need.Memory {
					need.Memory = m.Memory
				}
			}
		}
	}
	if bad {
		return nil
	}
	return need
}

// typeHint lists a few types of the board for an unknown type.
func typeHint(m gpu.Model, t gpu.VGPUType) string {
	var names []string
	for _, x := range m.VGPUTypes() {
		if x.Series == t.Series && !x.MIGBacked() {
			names = append(names, x.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (its %c types: %s)", t.Series, strings.Join(names, ", "))
}

func (r *resolver) resolveAbstractNeed(p *profileBlock, need *GPUNeed) *GPUNeed {
	g := p.GPU
	body, def := g.Body, g.DefRange
	need.Kind = gpu.KindAny
	for _, a := range []string{"type", "profile"} {
		if has(body, a) {
			r.errf(attrRange(body, a, def), "Missing kind", "%s names a slice exactly: add kind = %q. Without kind, a gpu block is an abstract need: memory = \"20GiB\" and kinds = [\"mig\", \"vgpu\"].", a, map[string]gpu.Kind{"type": gpu.KindVGPU, "profile": gpu.KindMIG}[a])
			return nil
		}
	}
	if g.Memory == nil && has(body, "memory") {
		return nil
	}
	if g.Memory == nil {
		r.errf(def, "Missing GPU need", "Write kind (\"vgpu\" with type, \"mig\" with profile, or \"passthrough\"), or an abstract need with memory = \"20GiB\" (and kinds).")
		return nil
	}
	mem, ok := r.size(body, "memory", g.Memory, 0, def)
	if !ok {
		return nil
	}
	if mem == 0 {
		r.errf(valueRange(body, "memory", def), "Invalid memory", "An abstract GPU need asks for more than 0 bytes.")
		return nil
	}
	need.Memory = mem
	need.Kinds = []gpu.Kind{gpu.KindMIG, gpu.KindVGPU, gpu.KindPassthrough}
	if has(body, "kinds") {
		need.Kinds = nil
		for i, k := range g.Kinds {
			if !contains(needKinds, k) {
				r.errf(listItemRange(body, "kinds", i, def), "Invalid kinds", "%q is not one of %s.%s", k, quoteList(needKinds), suggestion(k, needKinds))
				return nil
			}
			need.Kinds = append(need.Kinds, gpu.Kind(k))
		}
		r.checkDuplicates(body, "kinds", g.Kinds, def)
		if len(need.Kinds) == 0 {
			r.errf(valueRange(body, "kinds", def), "Invalid kinds", "kinds may not be empty.")
			return nil
		}
	}
	if g.Series != nil {
		need.Series = strings.ToUpper(*g.Series)
		if !r.oneOf(body, "series", need.Series, seriesList, def) {
			return nil
		}
		if !slices.Contains(need.Kinds, gpu.KindVGPU) {
			r.errf(attrRange(body, "series", def), "series needs vgpu", "series limits the vGPU types the scheduler may choose; kinds does not include \"vgpu\".")
			return nil
		}
	}
	return need
}
