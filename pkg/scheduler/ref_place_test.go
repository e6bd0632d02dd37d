package scheduler

// The placement search as it was before the GPU index (issue #26), kept as
// the reference the index must agree with: same host, same devices, same
// Reason (TestPlaceMatchesReference). It looks at every GPU.

import (
	"fmt"
	"slices"
)

// placeOn is place restricted to host only (≥ 0).
func (inv *Inventory) refPlaceOn(need Need, o PlaceOptions, only int) (Placement, *Hold, Reason) {
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
		p, r := inv.refPlaceConcrete(c, pc)
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

// placeConcrete places c.count devices of one concrete kind on one host.
func (inv *Inventory) refPlaceConcrete(c *concrete, pc *placeCtx) (Placement, Reason) {
	var (
		capable, drainingSeen, unavailSeen bool
		heldCode                           Code
		heldSeen                           bool
	)
	note := func(st status, code Code) {
		switch st {
		case stIncapable:
			return
		case stUnavailable:
			unavailSeen = true
		case stDraining:
			drainingSeen = true
		case stHeld:
			heldSeen = true
			if heldCode == "" || rank(code) < rank(heldCode) {
				heldCode = code
			}
		}
		capable = true
	}
	if c.count == 1 {
		best := cand{gi: -1}
		cd := &pc.cd
		try := func(gi int) {
			st, code := inv.refEvalGPU(gi, &inv.gpus[gi], c, pc, cd)
			note(st, code)
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
		if best.gi >= 0 {
			g := &inv.gpus[best.gi]
			return Placement{Host: inv.hosts[g.host].name, Devices: []Device{inv.device(best, c, g)}}, Reason{}
		}
	} else {
		var bestP Placement
		var bestS score
		found := false
		for hi := range inv.hosts {
			if pc.only >= 0 && hi != pc.only {
				continue
			}
			p, s, ok := inv.refPlaceOnHost(hi, c, pc, note)
			if ok && (!found || s.less(bestS)) {
				bestP, bestS, found = p, s, true
			}
		}
		if found {
			return bestP, Reason{}
		}
	}
	if !capable || !inv.couldEverFit(c) {
		return Placement{}, Reason{CodeNever, ""}
	}
	what := c.describe()
	switch {
	case heldSeen && heldCode == CodeReservation:
		return Placement{}, Reason{CodeReservation, fmt.Sprintf("the room for %s is booked by others for part of the lease", what)}
	case heldSeen:
		return Placement{}, Reason{CodeHeld, fmt.Sprintf("the room for %s is held for a request ahead in the queue", what)}
	case drainingSeen:
		return Placement{}, Reason{CodeDraining, fmt.Sprintf("only draining GPUs have room for %s", what)}
	case unavailSeen && !inv.fitsAvailable(c):
		return Placement{}, Reason{CodeUnavailable, fmt.Sprintf("the GPUs that could give %s cannot be used now: %s", what, inv.unavailableWhy(c))}
	}
	return Placement{}, Reason{CodeNoCapacity, fmt.Sprintf("no GPU has room for %s now", what)}
}

// placeOnHost puts c.count devices on host hi, one at a time on a scratch
// copy of its GPUs.
func (inv *Inventory) refPlaceOnHost(hi int, c *concrete, pc *placeCtx, note func(status, Code)) (Placement, score, bool) {
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
		st, code := inv.refEvalGPU(gi, &inv.gpus[gi], c, pc, cd)
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
		return inv.refWholeOnHost(h, c, whole, pc)
	}
	scratch := make([]gpuState, h.n)
	copy(scratch, inv.gpus[h.first:h.first+h.n])
	p := Placement{Host: h.name}
	var total score
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
			return Placement{}, score{}, false
		}
		g := &scratch[best.gi-h.first]
		p.Devices = append(p.Devices, inv.device(best, c, g))
		applyScratch(g, scratch, h.first, best, c)
		total = total.add(best.score)
	}
	return p, total, true
}

// evalGPU finds the best way to put one device of c on g (which may be a
// scratch copy: gi is its index in the inventory); it writes it to *out
// when the status is stOK.
func (inv *Inventory) refEvalGPU(gi int, g *gpuState, c *concrete, pc *placeCtx, out *cand) (status, Code) {
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

// wholeOnHost puts c.count whole GPUs on host h: the best GPUs by score,
// none of them in the IOMMU group of another (placing a whole GPU changes
// no other GPU's score).
func (inv *Inventory) refWholeOnHost(h *hostState, c *concrete, cands []cand, pc *placeCtx) (Placement, score, bool) {
	slices.SortFunc(cands, func(a, b cand) int {
		if a.score.less(b.score) {
			return -1
		}
		if b.score.less(a.score) {
			return 1
		}
		return 0
	})
	taken := pc.taken[:0]
	defer func() { pc.taken = taken[:0] }()
	n := 0
	for _, cd := range cands {
		if n == c.count {
			break
		}
		if !slices.Contains(taken, cd.gi) {
			taken = append(append(taken, cd.gi), inv.gpus[cd.gi].group...)
			n++
		}
	}
	if n < c.count {
		return Placement{}, score{}, false
	}
	taken = taken[:0]
	p := Placement{Host: h.name, Devices: make([]Device, 0, c.count)}
	var total score
	for _, cd := range cands {
		if len(p.Devices) == c.count {
			break
		}
		if slices.Contains(taken, cd.gi) {
			continue
		}
		g := &inv.gpus[cd.gi]
		taken = append(append(taken, cd.gi), g.group...)
		p.Devices = append(p.Devices, inv.device(cd, c, g))
		total = total.add(cd.score)
	}
	return p, total, len(p.Devices) == c.count
}
