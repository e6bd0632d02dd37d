package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Strategy is how placement chooses among GPUs that fit.
type Strategy string

// Placement strategies.
const (
	// Pack (the default) keeps large profiles and whole GPUs placeable:
	// least damage to larger MIG profiles, GPUs already in the right mode,
	// least extension of a GPU's busy horizon, fullest GPU and host.
	Pack Strategy = "pack"
	// Spread puts each device on the least loaded host and GPU.
	Spread Strategy = "spread"
	// FirstFit is NVML's own order, for comparison: the first GPU (in
	// inventory order) that fits, at its lowest free start slot.
	FirstFit Strategy = "first-fit"
)

// ParseStrategy parses a strategy name; "" is Pack.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case "", Pack:
		return Pack, nil
	case Spread, FirstFit:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("placement %q is not pack, spread or first-fit", s)
}

// Hold is capacity set aside from From to To: a booking's pinned devices,
// or the devices the head of the queue will start on (EASY backfill).
type Hold struct {
	ID string `json:"id"`
	// Code is CodeReservation for a booking, CodeHeld for a request ahead
	// in the queue: what a request kept off it is told.
	Code    Code      `json:"code"`
	Host    string    `json:"host"`
	Devices []Device  `json:"devices"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
}

// PlaceOptions are the circumstances of one placement.
type PlaceOptions struct {
	Strategy Strategy
	// Now and End are when the VM would start and end (End zero: unknown).
	Now, End time.Time
	// Holds is capacity the request must leave alone; those that do not
	// overlap [Now, End) do not apply.
	Holds []Hold
	// Own is booked capacity of the requester: a device of it that is the
	// need exactly is taken first.
	Own []Hold
	// Prefer, when set, is the host tried first (after Own): a preference,
	// not a rule; when it cannot give the need, any host may (Placement.
	// Host tells which was chosen). An unknown host is no preference.
	Prefer string
}

// Place chooses where a request's devices go, without changing the
// inventory (Allocate records the choice). It returns a Reason when nothing
// fits: CodeNever if no GPU could ever give the need, else why not now.
func (inv *Inventory) Place(need Need, o PlaceOptions) (Placement, Reason) {
	p, _, r := inv.place(need, o)
	return p, r
}

// place also returns the booking hold the placement used (nil if none).
// A preferred host is tried first; what it cannot give is placed as
// without one, so whether a need fits (and why not) is the same with a
// preference or without.
func (inv *Inventory) place(need Need, o PlaceOptions) (Placement, *Hold, Reason) {
	if hi, ok := inv.byName[o.Prefer]; ok && o.Prefer != "" {
		if p, h, why := inv.placeOn(need, o, hi); why.OK() {
			return p, h, why
		}
	}
	return inv.placeOn(need, o, -1)
}

// placeOn is place restricted to host only (≥ 0).
func (inv *Inventory) placeOn(need Need, o PlaceOptions, only int) (Placement, *Hold, Reason) {
	if err := need.Validate(); err != nil {
		return Placement{}, nil, Reason{CodeInvalid, err.Error()}
	}
	if o.Strategy == "" {
		o.Strategy = Pack
	}
	cs := inv.resolve(need)
	if len(cs) == 0 {
		return Placement{}, nil, Reason{CodeNever, inv.neverDetail(need)}
	}
	pc := inv.newCtx(o)
	defer pc.done()
	pc.only = only
	// Booked capacity first.
	for i := range o.Own {
		h := &o.Own[i]
		if !h.overlaps(o.Now, pc.end) {
			continue
		}
		for ci := range cs {
			if p, ok := inv.placeOnHold(&cs[ci], h, pc); ok {
				return p, h, Reason{}
			}
		}
	}
	best := Reason{}
	never := true
	for ci := range cs {
		c := &cs[ci]
		p, r := inv.placeConcrete(c, pc)
		if r.OK() {
			return p, nil, r
		}
		if r.Code != CodeNever {
			never = false
			if best.Code == "" || rank(r.Code) < rank(best.Code) {
				best = r
			}
		}
	}
	if never {
		return Placement{}, nil, Reason{CodeNever, inv.neverDetail(need)}
	}
	if len(cs) > 1 && best.Code == CodeNoCapacity {
		best.Detail = fmt.Sprintf("no GPU has room for %s now", need)
	}
	return Placement{}, nil, best
}

// rank orders blocking reasons: the most telling first.
func rank(c Code) int {
	switch c {
	case CodeReservation:
		return 0
	case CodeHeld:
		return 1
	case CodeDraining:
		return 2
	case CodeUnavailable:
		return 3
	case CodeNoCapacity:
		return 4
	}
	return 5
}

func (h *Hold) overlaps(from, to time.Time) bool {
	return h.From.Before(to) && h.To.After(from)
}

// placer is the placement mechanism of one device kind, one file each
// (place_mig.go, place_vgpu.go, place_passthrough.go). The generic code
// (this file) looks a kind's placer up once, when it resolves a need, and
// keeps it in the concrete need.
type placer interface {
	// whole is true when one device takes its GPU and the GPU's IOMMU group.
	whole() bool
	// exact is the concrete device an exact need of this kind names (its
	// name: a MIG profile or vGPU type; the least memory of a whole GPU).
	exact(n Need) (name string, memory uint64, ok bool)
	// abstract appends to out the devices of this kind a board has that
	// meet an abstract need.
	abstract(n Need, info *modelInfo, out []option) []option
	// match reports whether board mi (info) has c, and records c's
	// per-board fields.
	match(c *concrete, mi int, info *modelInfo) bool
	// eval is evalGPU for a GPU that may give this kind: stFull when it has
	// no room; stOK with the best candidate in *out; stHeld with a hold's
	// code. (It runs for every GPU of every placement: a cand is too large
	// to come back in registers, so it is written where the caller keeps it.)
	eval(inv *Inventory, gi int, g *gpuState, c *concrete, pc *placeCtx, draining bool, out *cand) (status, Code)
	// onHold is the candidate for booked device d on g, if g can give it.
	onHold(inv *Inventory, gi int, g *gpuState, scratch []gpuState, first int, c *concrete, d Device, pc *placeCtx) (cand, bool)
	// take records candidate cd on the scratch copy g (and its companions).
	take(g *gpuState, scratch []gpuState, first int, cd cand, c *concrete)
	// device is d, candidate cd's Device, with the kind's fields filled in
	// (by value: a pointer would make every Device escape).
	device(inv *Inventory, d Device, cd cand, c *concrete, g *gpuState) Device
	// capacity is how many of c an empty g could give.
	capacity(g *gpuState, info *modelInfo, c *concrete) int
	// held is the code of a hold of holds (g's, at least one) that device
	// a, already on g, would break; "" when none.
	held(inv *Inventory, g *gpuState, a Allocation, holds []holdDev) Code
	// noun names one device of c for people ("MIG 3g.40gb").
	noun(c *concrete) string
	// varies marks the places of eval's score under strategy s that may
	// differ between plain GPUs of one signature (index.go): those made of
	// the busy horizon, the host and the GPU's index, all ≥ 0; host is the
	// place of the host's hostKey (-1: none), gpu the place that is at
	// least the GPU's index. Between empty GPUs of one signature the score
	// must order as (hostKey, GPU index). The marked places other than host
	// and gpu are the lease's extension of the GPU's busy horizon; each
	// marked place is the GPU's own part (Inventory.own: hostKey, the
	// index times unit, the extension) plus a part that depends on the
	// GPU's signature alone, so that devices taken one after the other on a
	// GPU leave its own part as it was (index_hosts.go relies on it).
	varies(s Strategy) (m scoreMask, host, gpu int)
	// unit is what the GPU's index is multiplied by at varies' gpu place.
	unit() int64
}

// placerOf is the placer of kind k; nil for no device kind (KindAny, "").
func placerOf(k gpu.Kind) placer {
	switch k {
	case gpu.KindMIG:
		return migPlacer{}
	case gpu.KindVGPU:
		return vgpuPlacer{}
	case gpu.KindPassthrough:
		return passthroughPlacer{}
	}
	return nil
}

// option is a device a board offers for an abstract need: its name, the
// board restriction, the share of a GPU it takes and its memory.
type option struct {
	name, model string
	share       float64
	mem         uint64
}

// concrete is one exact device a need may be met with.
type concrete struct {
	kind   gpu.Kind
	pl     placer // of kind
	name   string // MIG profile (lower case) or vGPU type (canonical)
	model  string // board restriction ("" none)
	memory uint64 // least board memory for passthrough
	count  int
	// Per model (Inventory.models index): whether it matches, the MIG
	// profile index, the vGPU type.
	match []bool
	prof  []int
	vt    []gpu.VGPUTypeInfo
	share float64 // for ordering abstract options
	mem   uint64
	// evals is what the index's buckets give it (index_evals.go).
	evals *evalCache
}

// resolve turns a need into the concrete devices that meet it, cheapest
// first; empty when no board of the inventory has it. The answer depends
// only on the need and the boards, and is kept (callers do not change it).
func (inv *Inventory) resolve(n Need) []concrete {
	return inv.resolved.get(n, inv.resolveNew)
}

// resolveCache keeps Need → []concrete for an inventory and its clones (the
// same boards), which may be used at once from several goroutines.
type resolveCache struct {
	mu sync.RWMutex
	m  map[NeedKey][]concrete
}

// get is n's concrete needs, made by resolve the first time.
func (rc *resolveCache) get(n Need, resolve func(Need) []concrete) []concrete {
	k := n.MapKey()
	rc.mu.RLock()
	cs, ok := rc.m[k]
	rc.mu.RUnlock()
	if ok {
		return cs
	}
	cs = resolve(n)
	rc.mu.Lock()
	if rc.m == nil {
		rc.m = map[NeedKey][]concrete{}
	}
	rc.m[k] = cs
	rc.mu.Unlock()
	return cs
}

func (inv *Inventory) resolveNew(n Need) []concrete {
	count := n.count()
	mk := func(k gpu.Kind, name, model string) concrete {
		c := concrete{kind: k, pl: placerOf(k), name: name, model: model, count: count,
			match: make([]bool, len(inv.models)), prof: make([]int, len(inv.models)), vt: make([]gpu.VGPUTypeInfo, len(inv.models)),
			evals: &evalCache{}}
		return c
	}
	fill := func(c *concrete) bool {
		any := false
		for mi, info := range inv.models {
			c.prof[mi] = -1
			if c.model != "" && !info.m.MatchesName(c.model) && !strings.EqualFold(info.m.Name, c.model) {
				continue
			}
			c.match[mi] = c.pl.match(c, mi, info)
			any = any || c.match[mi]
		}
		return any
	}
	if pl := placerOf(n.Kind); pl != nil {
		name, memory, ok := pl.exact(n)
		if !ok {
			return nil
		}
		c := mk(n.Kind, name, n.Model)
		c.memory = memory
		if fill(&c) {
			return []concrete{c}
		}
		return nil
	}
	// Abstract: every slice of an allowed kind with enough memory, on every
	// board of the inventory, cheapest (smallest share of a GPU) first.
	var out []concrete
	seen := map[string]bool{}
	kindOrder := map[gpu.Kind]int{}
	for i, k := range n.kinds() {
		kindOrder[k] = i
	}
	add := func(c concrete, share float64, mem uint64) {
		key := string(c.kind) + "/" + c.name + "/" + c.model
		if seen[key] {
			return
		}
		seen[key] = true
		if fill(&c) {
			c.share, c.mem = share, mem
			out = append(out, c)
		}
	}
	var opts []option
	for _, info := range inv.models {
		m := info.m
		if n.Model != "" && !m.MatchesName(n.Model) && !strings.EqualFold(m.Name, n.Model) {
			continue
		}
		for _, k := range n.kinds() {
			if pl := placerOf(k); pl != nil {
				opts = pl.abstract(n, info, opts[:0])
				for _, o := range opts {
					add(mk(k, o.name, o.model), o.share, o.mem)
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.share != b.share {
			return a.share < b.share
		}
		if a.mem != b.mem {
			return a.mem < b.mem
		}
		if kindOrder[a.kind] != kindOrder[b.kind] {
			return kindOrder[a.kind] < kindOrder[b.kind]
		}
		if sa, sb := seriesRank(a), seriesRank(b); sa != sb {
			return sa < sb
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return a.model < b.model
	})
	return out
}

func (inv *Inventory) neverDetail(n Need) string {
	var boards []string
	seen := map[string]bool{}
	for _, info := range inv.models {
		if !seen[info.m.Name] {
			seen[info.m.Name] = true
			boards = append(boards, info.m.Name)
		}
	}
	sort.Strings(boards)
	return fmt.Sprintf("no GPU here can ever give %s (boards: %s; check their modes and models)", n, strings.Join(boards, ", "))
}

type holdDev struct {
	d    Device
	code Code
	id   string
	prof int // MIG profile index on the GPU's table
}

type placeCtx struct {
	o     PlaceOptions
	end   time.Time // never when unknown
	holds map[int][]holdDev
	// only, when ≥ 0, restricts the search to one host.
	only int
	// buf and taken are reused between hosts.
	buf   []cand
	taken []int
	// cd is where the placement loops have evalGPU write a candidate (a
	// local would escape to the heap: the placers' eval takes its address).
	cd cand
}

// ctxs keeps placement contexts, and their buffers, between placements: a
// scheduling cycle places thousands of times, an estimate's replay of a
// long queue hundreds of thousands (issue #26).
var ctxs = sync.Pool{New: func() any { return new(placeCtx) }}

func (inv *Inventory) newCtx(o PlaceOptions) *placeCtx {
	pc := ctxs.Get().(*placeCtx)
	holds := pc.holds
	clear(holds)
	*pc = placeCtx{o: o, end: o.End, only: -1, holds: holds, buf: pc.buf[:0], taken: pc.taken[:0]}
	if pc.end.IsZero() {
		pc.end = never
	}
	for _, h := range o.Holds {
		if !h.overlaps(o.Now, pc.end) {
			continue
		}
		for _, d := range h.Devices {
			gi, ok := inv.gpuIndex(h.Host, d.GPU)
			if !ok {
				continue
			}
			hd := holdDev{d: d, code: h.Code, id: h.ID, prof: -1}
			if d.Kind == gpu.KindMIG {
				if mt := inv.models[inv.gpus[gi].model].mt; mt != nil {
					hd.prof = mt.profileIndex(strings.ToLower(d.Profile))
				}
			}
			if pc.holds == nil {
				pc.holds = map[int][]holdDev{}
			}
			pc.holds[gi] = append(pc.holds[gi], hd)
			for _, o := range inv.gpus[gi].group { // a whole GPU takes its group
				if d.Kind == gpu.KindPassthrough {
					pc.holds[o] = append(pc.holds[o], holdDev{d: Device{GPU: inv.gpus[o].addr, Kind: gpu.KindPassthrough}, code: h.Code, id: h.ID, prof: -1})
				}
			}
		}
	}
	return pc
}

// done gives pc back for another placement: nothing may use it after.
func (pc *placeCtx) done() {
	pc.o = PlaceOptions{} // let go of the caller's holds
	ctxs.Put(pc)
}

type score [6]int64

func (a score) less(b score) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func (a score) add(b score) score {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// cand is one way to put one device on one GPU.
type cand struct {
	gi    int
	start int
	next  int32 // MIG state after
	score score
}

// status of a GPU for one concrete device.
type status int

const (
	stIncapable   status = iota // the GPU can never give it
	stFull                      // no room now
	stDraining                  // room, but draining
	stUnavailable               // no backend can create on it now
	stHeld                      // room, but held
	stOK
)

// evalGPU finds the best way to put one device of c on g (which may be a
// scratch copy: gi is its index in the inventory); it writes it to *out
// when the status is stOK.
func (inv *Inventory) evalGPU(gi int, g *gpuState, c *concrete, pc *placeCtx, out *cand) (status, Code) {
	if !c.match[g.model] || !inv.configured(g, c.kind) {
		return stIncapable, ""
	}
	if g.unavail != "" {
		return stUnavailable, ""
	}
	if g.owner != "" || (g.kind != "" && g.kind != c.kind) {
		return stFull, ""
	}
	draining := g.draining || inv.hosts[g.host].draining
	st, code := c.pl.eval(inv, gi, g, c, pc, draining, out)
	if draining && st != stFull {
		return stDraining, ""
	}
	return st, code
}

func switchCost(g *gpuState, k gpu.Kind) int64 {
	if g.n == 0 && g.cur != gpu.ModeOf(k) {
		return 1
	}
	return 0
}

// ext is how many minutes the VM would extend the GPU's busy horizon: the
// time until everything on it has ended.
func (pc *placeCtx) ext(g *gpuState) int64 {
	if pc.o.End.IsZero() {
		return 0
	}
	busy := g.busy
	if busy.Before(pc.o.Now) {
		busy = pc.o.Now
	}
	if !pc.end.After(busy) {
		return 0
	}
	return int64(pc.end.Sub(busy) / time.Minute)
}

// notes gathers what the GPUs that could not take a device said, for the
// Reason when none could.
type notes struct {
	capable, draining, unavail, held bool
	heldCode                         Code
}

func (n *notes) add(st status, code Code) {
	switch st {
	case stIncapable:
		return
	case stUnavailable:
		n.unavail = true
	case stDraining:
		n.draining = true
	case stHeld:
		n.held = true
		if n.heldCode == "" || rank(code) < rank(n.heldCode) {
			n.heldCode = code
		}
	}
	n.capable = true
}

// placeConcrete places c.count devices of one concrete kind on one host.
func (inv *Inventory) placeConcrete(c *concrete, pc *placeCtx) (Placement, Reason) {
	var n notes
	scan := pc.only >= 0 || inv.idx == nil
	if c.count == 1 {
		best := cand{gi: -1}
		if scan {
			cd := &pc.cd
			try := func(gi int) {
				st, code := inv.evalGPU(gi, &inv.gpus[gi], c, pc, cd)
				n.add(st, code)
				if st == stOK && (best.gi < 0 || cd.score.less(best.score)) {
					best = *cd
				}
			}
			if pc.only >= 0 {
				h := &inv.hosts[pc.only]
				for gi := h.first; gi < h.first+h.n; gi++ {
					try(gi)
				}
			} else {
				for mi, gis := range inv.byModel {
					if c.match[mi] {
						for _, gi := range gis {
							try(gi)
						}
					}
				}
			}
		} else {
			best = inv.bestOne(c, pc, &n)
		}
		if best.gi >= 0 {
			g := &inv.gpus[best.gi]
			return Placement{Host: inv.hosts[g.host].name, Devices: []Device{inv.device(best, c, g)}}, Reason{}
		}
	} else {
		var p Placement
		found := false
		if scan {
			var best score
			for hi := range inv.hosts {
				if pc.only >= 0 && hi != pc.only {
					continue
				}
				hp, s, ok := inv.placeOnHost(hi, c, pc, n.add)
				if ok && (!found || s.less(best)) {
					p, best, found = hp, s, true
				}
			}
		} else {
			p, found = inv.bestOnHosts(c, pc, &n)
		}
		if found {
			return p, Reason{}
		}
	}
	if !n.capable || !inv.couldEverFit(c) {
		return Placement{}, Reason{CodeNever, ""}
	}
	what := c.describe()
	switch {
	case n.held && n.heldCode == CodeReservation:
		return Placement{}, Reason{CodeReservation, fmt.Sprintf("the room for %s is booked by others for part of the lease", what)}
	case n.held:
		return Placement{}, Reason{CodeHeld, fmt.Sprintf("the room for %s is held for a request ahead in the queue", what)}
	case n.draining:
		return Placement{}, Reason{CodeDraining, fmt.Sprintf("only draining GPUs have room for %s", what)}
	case n.unavail && !inv.fitsAvailable(c):
		return Placement{}, Reason{CodeUnavailable, fmt.Sprintf("the GPUs that could give %s cannot be used now: %s", what, inv.unavailableWhy(c))}
	}
	return Placement{}, Reason{CodeNoCapacity, fmt.Sprintf("no GPU has room for %s now", what)}
}

func (c *concrete) describe() string {
	s := c.pl.noun(c)
	if c.count > 1 {
		s = fmt.Sprintf("%d× %s on one host", c.count, s)
	}
	return s
}

// placeOnHost puts c.count devices on host hi, one at a time on a scratch
// copy of its GPUs.
func (inv *Inventory) placeOnHost(hi int, c *concrete, pc *placeCtx, note func(status, Code)) (Placement, score, bool) {
	h := &inv.hosts[hi]
	if h.n == 0 {
		return Placement{}, score{}, false
	}
	// Before copying anything: enough GPUs here that could take one device
	// now? (A MIG or vGPU GPU may take several; a whole GPU one.)
	ok, slots := 0, 0
	whole := pc.buf[:0]
	defer func() { pc.buf = whole[:0] }()
	cd := &pc.cd
	for gi := h.first; gi < h.first+h.n; gi++ {
		st, code := inv.evalGPU(gi, &inv.gpus[gi], c, pc, cd)
		note(st, code)
		if st == stOK {
			ok++
			if c.pl.whole() {
				whole = append(whole, *cd)
				slots++
			} else {
				slots += c.count
			}
		}
	}
	if ok == 0 || slots < c.count {
		return Placement{}, score{}, false
	}
	if c.pl.whole() {
		return inv.wholeOnHost(h, c, whole, pc)
	}
	scratch := make([]gpuState, h.n)
	copy(scratch, inv.gpus[h.first:h.first+h.n])
	p := Placement{Host: h.name}
	total, fits := inv.sharedOnScratch(h, scratch, c, pc, &p.Devices, nil)
	if !fits {
		return Placement{}, score{}, false
	}
	return p, total, true
}

// sharedOnScratch takes c.count devices of c (MIG instances or vGPUs) on
// host h's GPUs as scratch holds them, one at a time, each on the GPU where
// it scores least: what placeOnHost gives a request. It appends each
// device to *devs and its candidate to *picked (either nil: not kept), and
// returns their total score; ok is false when they do not fit (scratch then
// holds those that did).
func (inv *Inventory) sharedOnScratch(h *hostState, scratch []gpuState, c *concrete, pc *placeCtx, devs *[]Device, picked *[]cand) (total score, ok bool) {
	cd := &pc.cd
	for k := 0; k < c.count; k++ {
		best := cand{gi: -1}
		for j := range scratch {
			gi := h.first + j
			st, _ := inv.evalScratch(gi, &scratch[j], scratch, h.first, c, pc, cd)
			if st == stOK && (best.gi < 0 || cd.score.less(best.score)) {
				best = *cd
			}
		}
		if best.gi < 0 {
			return score{}, false
		}
		g := &scratch[best.gi-h.first]
		if devs != nil {
			*devs = append(*devs, inv.device(best, c, g))
		}
		if picked != nil {
			*picked = append(*picked, best)
		}
		applyScratch(g, scratch, h.first, best, c)
		total = total.add(best.score)
	}
	return total, true
}

// evalScratch is evalGPU where group companions are read from scratch.
func (inv *Inventory) evalScratch(gi int, g *gpuState, scratch []gpuState, first int, c *concrete, pc *placeCtx, out *cand) (status, Code) {
	if c.pl.whole() {
		for _, o := range g.group {
			if og := &scratch[o-first]; og.owner != "" || og.n > 0 {
				return stFull, ""
			}
		}
	}
	return inv.evalGPU(gi, g, c, pc, out)
}

func applyScratch(g *gpuState, scratch []gpuState, first int, cd cand, c *concrete) {
	g.kind = c.kind
	g.n++
	c.pl.take(g, scratch, first, cd, c)
}

// device describes a candidate as a Device.
func (inv *Inventory) device(cd cand, c *concrete, g *gpuState) Device {
	d := Device{GPU: g.addr, Kind: c.kind, SwitchMode: switchCost(g, c.kind) == 1}
	return c.pl.device(inv, d, cd, c, g)
}

// fitsAvailable reports whether c could fit on usable GPUs alone if they
// were empty: when not, the unusable ones are why it waits.
func (inv *Inventory) fitsAvailable(c *concrete) bool { return inv.fits(c, false) }

// unavailableWhy lists the backends' reasons for the GPUs that could give c.
func (inv *Inventory) unavailableWhy(c *concrete) string {
	var out []string
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		if g.unavail != "" && c.match[g.model] && inv.configured(g, c.kind) && !slices.Contains(out, g.unavail) {
			out = append(out, g.unavail)
		}
	}
	return strings.Join(out, "; ")
}

// couldEverFit reports whether some host, emptied of everything (draining
// and all, and with every backend working), could give c.
func (inv *Inventory) couldEverFit(c *concrete) bool { return inv.fits(c, true) }

func (inv *Inventory) fits(c *concrete, unusable bool) bool {
	for hi := range inv.hosts {
		h := &inv.hosts[hi]
		n := 0
		for gi := h.first; gi < h.first+h.n; gi++ {
			g := &inv.gpus[gi]
			if !c.match[g.model] || !inv.configured(g, c.kind) || (!unusable && g.unavail != "") {
				continue
			}
			n += c.pl.capacity(g, inv.models[g.model], c)
		}
		if n >= c.count {
			return true
		}
	}
	return false
}

// placeOnHold puts the need on booked devices of h that are exactly it.
func (inv *Inventory) placeOnHold(c *concrete, h *Hold, pc *placeCtx) (Placement, bool) {
	hi, ok := inv.byName[h.Host]
	if !ok {
		return Placement{}, false
	}
	host := &inv.hosts[hi]
	scratch := make([]gpuState, host.n)
	copy(scratch, inv.gpus[host.first:host.first+host.n])
	p := Placement{Host: h.Host}
	used := make([]bool, len(h.Devices))
	for k := 0; k < c.count; k++ {
		placed := false
		for di, d := range h.Devices {
			if used[di] || d.Kind != c.kind {
				continue
			}
			gi, ok := inv.gpuIndex(h.Host, d.GPU)
			if !ok {
				continue
			}
			g := &scratch[gi-host.first]
			if !c.match[g.model] || !inv.allows(g, c.kind) || g.owner != "" || (g.kind != "" && g.kind != c.kind) {
				continue
			}
			cd, ok := c.pl.onHold(inv, gi, g, scratch, host.first, c, d, pc)
			if !ok {
				continue
			}
			p.Devices = append(p.Devices, inv.device(cd, c, g))
			applyScratch(g, scratch, host.first, cd, c)
			used[di], placed = true, true
			break
		}
		if !placed {
			return Placement{}, false
		}
	}
	return p, true
}

// Keep reports whether VM id may keep the devices it holds over
// [o.Now, o.End): whether any hold of o.Holds that overlaps that time covers
// them (a lease extension into booked capacity). A zero Reason is yes.
func (inv *Inventory) Keep(id string, o PlaceOptions) Reason {
	var devs []Allocation
	for _, a := range inv.Allocations() {
		if a.ID == id {
			devs = append(devs, a)
		}
	}
	if len(devs) == 0 {
		return Reason{CodeInvalid, fmt.Sprintf("VM %s holds no device", id)}
	}
	c := inv.Clone()
	c.Release(id)
	pc := c.newCtx(o)
	for _, a := range devs {
		gi, _ := c.gpuIndex(a.Host, a.GPU)
		g := &c.gpus[gi]
		pl := placerOf(a.Kind)
		code := Code("")
		if holds := pc.holds[gi]; len(holds) > 0 {
			code = holds[0].code
			if pl != nil {
				code = pl.held(c, g, a, holds)
			}
		}
		if pl != nil && pl.whole() {
			for _, o := range g.group {
				if hs := pc.holds[o]; len(hs) > 0 {
					code = hs[0].code
				}
			}
		}
		if code != "" {
			return Reason{code, fmt.Sprintf("%s/%s is held for someone else during that time", a.Host, a.GPU)}
		}
		if _, err := c.apply(gi, Device{GPU: a.GPU, Kind: a.Kind, Type: a.Type, Profile: a.Profile, Start: a.Start}, id, o.End); err != nil {
			return Reason{CodeNoCapacity, err.Error()}
		}
	}
	return Reason{}
}
