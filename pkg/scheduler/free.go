package scheduler

import (
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Free is what one host could still take now, as placement sees it.
type Free struct {
	// IdleGPUs hold nothing and are in no mode yet.
	IdleGPUs int
	// VGPU is how many more time-sliced vGPUs of each type could be
	// placed, MIG how many more instances of each profile: each type and
	// profile counted on its own (one 3g.40gb more may leave no 1g.10gb).
	// Types and profiles of which none fits are left out; nil when none.
	VGPU map[string]int
	MIG  map[string]int
	// Split counts, by mode (mig, vgpu), the GPUs in MIG or vGPU mode that
	// could still take a device: not idle, yet far from full. Nil when none.
	Split map[gpu.Mode]int
}

// maxFree bounds the devices counted on one GPU (a board's largest vGPU
// count is 32).
const maxFree = 64

// Free reports what host could still take now: devices of one vGPU type or
// MIG profile at a time, placed one after the other on a scratch copy of
// each GPU by the kind's placer, as Place would place them. A GPU that
// is draining, on a draining host, or that no backend can use now gives
// nothing; ok is false for an unknown host.
func (inv *Inventory) Free(host string) (f Free, ok bool) {
	hi, ok := inv.byName[host]
	if !ok {
		return Free{}, false
	}
	h := &inv.hosts[hi]
	pc := inv.newCtx(PlaceOptions{Strategy: Pack})
	add := func(m *map[string]int, name string, n int) {
		if n == 0 {
			return
		}
		if *m == nil {
			*m = map[string]int{}
		}
		(*m)[name] += n
	}
	for gi := h.first; gi < h.first+h.n; gi++ {
		g := &inv.gpus[gi]
		if g.draining || h.draining || g.unavail != "" {
			continue
		}
		if g.n == 0 && g.owner == "" && g.cur == gpu.ModeIdle {
			f.IdleGPUs++
		}
		info := inv.models[g.model]
		room := false
		if info.mt != nil {
			for _, p := range info.mt.t.Profiles {
				n := inv.fitsMore(gi, Need{Kind: gpu.KindMIG, Profile: p.Name}, pc)
				add(&f.MIG, p.Name, n)
				room = room || n > 0
			}
		}
		for _, t := range info.list {
			n := inv.fitsMore(gi, Need{Kind: gpu.KindVGPU, Type: t.Name}, pc)
			add(&f.VGPU, t.Name, n)
			room = room || n > 0
		}
		if room && (g.cur == gpu.ModeMIG || g.cur == gpu.ModeVGPU) {
			if f.Split == nil {
				f.Split = map[gpu.Mode]int{}
			}
			f.Split[g.cur]++
		}
	}
	return f, true
}

// fitsMore is how many devices of need GPU gi could still take, one after
// the other.
func (inv *Inventory) fitsMore(gi int, need Need, pc *placeCtx) int {
	cs := inv.resolve(need)
	if len(cs) != 1 {
		return 0
	}
	c := &cs[0]
	g := inv.gpus[gi] // a scratch copy; take changes only its counters
	n := 0
	for ; n < maxFree; n++ {
		st, _ := inv.evalGPU(gi, &g, c, pc, &pc.cd)
		if st != stOK {
			break
		}
		g.kind = c.kind
		g.n++
		c.pl.take(&g, nil, 0, pc.cd, c)
	}
	return n
}
