package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// The loader keeps the inventory of every backend that pushes it (API
// v1.1, backend.InventoryWatcher): one stream per running plugin process,
// whose every message replaces the inventory held for it. A new process
// (a restart) starts with none and sends its full inventory first; until
// then, and while a stream is broken, that backend's inventory is stale.
//
// A Create or Remove through the handle returns the number of changes the
// backend process has finished, that one included (the call's trailer),
// and the backend pushes an inventory read after it. Until that push has
// come, the loader applies the call's result to the inventory it holds
// itself (patch), so that the read after a Create or Remove returned
// reflects it at once, without waiting for the backend: a Create lists
// the device made and takes what it holds (as much as or more than the
// backend will then report: never is capacity shown free that the device
// holds); a Remove unlists the device and gives back what it held (one
// more of its vGPU type, a GPU it passed through), no more: what else
// the GPU may offer once empty (other vGPU types, MIG starts) comes with
// the push. A Create or Remove that failed may have changed the host in
// a way only the backend knows: after one, the held inventory is stale
// until a push covers it, and Inventories waits for that push (bounded by
// Config.InventoryWait), or asks the backend.

// The loader is the backends' inventory cache of gpuvmd: the create path,
// the dispatch rounds, GET /v1/gpus and the heartbeat read it
// (backend.CurrentInventories).
var _ backend.InventoryCache = (*Loader)(nil)

// InventoryStatus is what the loader holds of one backend's pushed
// inventory.
type InventoryStatus struct {
	// Pushed: the backend pushes its inventory (false: it is polled, or
	// is down or was never started).
	Pushed bool
	// Fresh: the inventory held reflects every Create and Remove the
	// running process finished; Inventories returns it without a call.
	Fresh bool
	// Generation counts the inventories the backend pushed, across
	// restarts; At is when the latest came.
	Generation uint64
	At         time.Time
}

// InventoryStatus reports what the loader holds of backend name's
// inventory.
func (l *Loader) InventoryStatus(name string) InventoryStatus {
	l.mu.Lock()
	h := l.handles[name]
	l.mu.Unlock()
	if h == nil {
		return InventoryStatus{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := InventoryStatus{Generation: h.gen, At: h.at}
	if inst := h.inst; inst != nil && inst.watched {
		st.Pushed = true
		_, st.Fresh = h.fresh()
	}
	return st
}

// Inventories returns the inventories of the named backends that are
// supervised (the others are left out): the one each pushed when it is
// fresh, with no call to the backend; else, once it is fresh or
// Config.InventoryWait has passed, the pushed one or the backend's answer
// to Inventory. A backend that does not push (API v1) is asked every time.
// A backend that fails or is down is reported and left out.
func (l *Loader) Inventories(ctx context.Context, names []string) (map[string]backend.Inventory, []error) {
	wait, cancel := context.WithTimeout(ctx, l.cfg.InventoryWait)
	defer cancel()
	out := map[string]backend.Inventory{}
	var errs []error
	for _, name := range slices.Sorted(slices.Values(names)) {
		l.mu.Lock()
		h := l.handles[name]
		l.mu.Unlock()
		if h == nil {
			continue
		}
		inv, err := h.inventory(ctx, wait)
		if err != nil {
			errs = append(errs, fmt.Errorf("inventory of %s: %w", name, err))
			continue
		}
		out[name] = inv
	}
	return out, errs
}

// inventory is the pushed inventory once fresh, waiting while wait lasts;
// else the backend's answer.
func (h *handle) inventory(ctx, wait context.Context) (backend.Inventory, error) {
	for {
		h.mu.Lock()
		if inst := h.inst; inst != nil && !inst.watched {
			h.mu.Unlock()
			return h.Inventory(ctx) // polled
		}
		if inv, ok := h.fresh(); ok {
			h.mu.Unlock()
			return inv.Clone(), nil
		}
		if h.wake == nil {
			h.wake = make(chan struct{})
		}
		wake := h.wake
		h.mu.Unlock()
		select {
		case <-wake:
		case <-wait.Done():
			if err := ctx.Err(); err != nil {
				return backend.Inventory{}, fmt.Errorf("waiting for backend %s's inventory: %w", h.name, err)
			}
			// Still stale: the backend itself answers (or, down, fails
			// with CodeUnavailable at once).
			return h.Inventory(ctx)
		}
	}
}

// fresh returns the pushed inventory with the patches it does not cover
// yet applied, if it reflects every finished Create and Remove of the
// running process. h.mu is held.
func (h *handle) fresh() (*backend.Inventory, bool) {
	inst := h.inst
	if inst == nil || !inst.watched || inst.inv == nil || inst.changes < inst.mustSee {
		return nil, false
	}
	if len(inst.patches) == 0 {
		return inst.inv, true
	}
	inv := inst.inv.Clone()
	for _, p := range inst.patches {
		p.apply(&inv)
	}
	return &inv, true
}

// applied records the outcome of a Create or Remove that inst made: a
// patch of its held inventory until a push covers it, or, when it failed,
// a change the next fresh inventory must have been read after.
func (h *handle) applied(inst *instance, p patch, err error) {
	w, ok := inst.impl.(backend.InventoryWatcher)
	if !ok {
		return
	}
	p.n = w.InventoryChanges()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !inst.watched || p.n <= inst.changes:
		// Polled, or already covered by a push.
	case err != nil:
		inst.mustSee = max(inst.mustSee, p.n)
	default:
		inst.patches = append(inst.patches, p)
	}
}

// changed wakes those waiting for the handle's inventory. h.mu is held.
func (h *handle) changed() {
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
}

// push keeps an inventory inst pushed, read after changes Creates and
// Removes; one of a process already replaced is dropped.
func (h *handle) push(inst *instance, inv backend.Inventory, changes uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inst != inst {
		return
	}
	inst.inv, inst.changes = &inv, changes
	inst.patches = slices.DeleteFunc(inst.patches, func(p patch) bool { return p.n <= changes })
	h.gen++
	h.at = time.Now()
	h.changed()
}

// lost marks inst's inventory stale (its stream broke), or, when unsupported,
// makes inst a polled backend for good.
func (h *handle) lost(inst *instance, unsupported bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	inst.inv = nil
	if unsupported {
		inst.watched = false
	}
	h.changed()
}

// watch subscribes to inst's inventory, if it pushes one, until inst exits
// or the loader closes; a broken stream is subscribed again after a backoff.
// The caller holds a count of l.wg (it is the supervisor, or adopt before
// it starts one).
func (l *Loader) watch(h *handle, inst *instance) {
	if !inst.watched {
		return
	}
	w := inst.impl.(backend.InventoryWatcher)
	log := l.log.With("backend", h.name, "pid", inst.pid)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithCancel(l.ctx)
		defer cancel()
		defer context.AfterFunc(inst.done, cancel)()
		backoff := l.cfg.MinBackoff
		for {
			err := w.WatchInventory(ctx, backend.WatchOptions{Resync: l.cfg.InventoryResync, Settle: l.cfg.InventorySettle}, func(inv backend.Inventory, changes uint64) {
				h.push(inst, inv, changes)
				backoff = l.cfg.MinBackoff
			})
			if ctx.Err() != nil {
				h.lost(inst, false)
				return
			}
			if errors.Is(err, backend.ErrUnsupported) {
				log.Info("backend does not push its inventory; it is asked for it instead", "error", err)
				h.lost(inst, true)
				return
			}
			h.lost(inst, false)
			log.Warn("backend inventory stream broke; subscribing again", "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, l.cfg.MaxBackoff)
		}
	}()
}

// patch is the device a Create made (create) and the ID the backend
// recorded its intent under while making it (intent: the request's device
// UUID), or the ID of the device a Remove removed (remove), the n-th
// change of its backend process.
type patch struct {
	n      uint64
	create *backend.Device
	intent string
	remove string
}

// apply makes inv show the patch's change: the device made listed, an
// idle GPU in the device's mode, and what it takes taken (its vGPU type's
// count; the MIG starts it covers, and for MIG-backed types one more; a
// passed-through GPU whole), as much or more than the backend will then
// report; or the device removed unlisted and what it held given back.
func (p patch) apply(inv *backend.Inventory) {
	if p.create == nil {
		p.unapply(inv)
		return
	}
	d := *p.create
	// A push read while the device was being made lists the backend's
	// intent instead (a MIG-backed vGPU's is keyed by the device UUID until
	// its VF is known): the device made replaces it.
	inv.Devices = slices.DeleteFunc(inv.Devices, func(x backend.Device) bool {
		return x.ID == d.ID || (p.intent != "" && x.ID == p.intent)
	})
	inv.Devices = append(inv.Devices, d)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.Address != d.GPU {
			continue
		}
		if g.Mode == gpu.ModeIdle || g.Mode == "" {
			g.Mode = gpu.ModeOf(d.Kind)
		}
		switch d.Kind {
		case gpu.KindPassthrough:
			g.Unavailable = "passed through to VM " + d.VMUUID
			for j := range g.VGPUTypes {
				g.VGPUTypes[j].Available = 0
			}
		case gpu.KindMIG:
			size := 0
			for _, mp := range g.MIGProfiles {
				if mp.Name == d.Profile {
					size = mp.Size
				}
			}
			free := map[string]int{}
			for j := range g.MIGProfiles {
				mp := &g.MIGProfiles[j]
				mp.FreeStarts = slices.DeleteFunc(mp.FreeStarts, func(s int) bool {
					return size > 0 && s < d.Placement+size && d.Placement < s+mp.Size
				})
				free[mp.Name] = len(mp.FreeStarts)
			}
			// A MIG-backed type needs a free start and may need a VF:
			// one fewer of each, at most, is left.
			for j := range g.VGPUTypes {
				t := &g.VGPUTypes[j]
				if n, ok := free[t.MIGProfile]; ok {
					t.Available = max(0, min(t.Available, n)-1)
				}
			}
		case gpu.KindVGPU:
			for j := range g.VGPUTypes {
				if t := &g.VGPUTypes[j]; t.Name == d.Type && t.Available > 0 {
					t.Available--
				}
			}
		}
	}
}

// unapply removes device p.remove from inv and gives back what it held:
// one more of its vGPU type (up to the type's maximum), or the GPU it
// passed through.
func (p patch) unapply(inv *backend.Inventory) {
	i := slices.IndexFunc(inv.Devices, func(d backend.Device) bool { return d.ID == p.remove })
	if i < 0 {
		return
	}
	d := inv.Devices[i]
	inv.Devices = slices.Delete(inv.Devices, i, i+1)
	for j := range inv.GPUs {
		g := &inv.GPUs[j]
		if g.Address != d.GPU {
			continue
		}
		switch d.Kind {
		case gpu.KindPassthrough:
			if g.Unavailable == "passed through to VM "+d.VMUUID || (d.VMUUID == "" && g.Unavailable == "passed through by gpuvm") {
				g.Unavailable = ""
			}
		case gpu.KindVGPU:
			for k := range g.VGPUTypes {
				if t := &g.VGPUTypes[k]; t.Name == d.Type && g.Unavailable == "" {
					t.Available = min(t.Available+1, t.MaxInstances)
				}
			}
		}
	}
}
