package orchestrator

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// What gpuvm removes on its own, and what it only reports.
//
// The reconciler removes a domain, a device or a volume only when it is
// provably this installation's and this installation's records say it was
// made for a VM that is no longer live: it carries this installation's ID
// (or, made before installations existed, none) *and* the database has a
// row for its VM. Anything else that looks like gpuvm's — another
// installation's domain or device, a domain or device of this installation
// whose VM is not in the database (an older backup restored, a database
// lost), a volume no VM and no domain refers to — is an orphan: left
// exactly as it is, reported (Orphans, GET /v1/admin/orphans, the
// gpuvm_orphans metric, the "orphans" alert), and deleted or adopted only
// when an admin says so.

// ErrNoOrphan: no orphan has that ID (it was deleted, adopted, or is not
// an orphan any more).
var ErrNoOrphan = fmt.Errorf("%w: no such orphan", store.ErrNotFound)

// ErrNotAdoptable: the orphan cannot be adopted (only a domain of this
// installation whose VM is missing can).
var ErrNotAdoptable = fmt.Errorf("%w: not adoptable", store.ErrConflict)

// OrphanAlertRule is the alert that fires while a host has orphans.
const OrphanAlertRule = "orphans"

// orphan is an api.Orphan with what it takes to delete or adopt it.
type orphan struct {
	api.Orphan
	pool, volume string // OrphanVolume
	diskID       string // a data disk's: the volume ID its name carries
	backend      string // OrphanDevice
	deviceID     string
	device       backend.Device
}

// orphanState is what the last reconcile found.
type orphanState struct {
	mu        sync.Mutex
	items     map[string]orphan
	checkedAt time.Time
	volumes   *regexp.Regexp       // the names of this gpuvmd's volumes (volumeNames)
	seen      map[string]time.Time // first seen, by ID
}

func orphanID(kind, host, name string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + host + "\x00" + name))
	return kind + "-" + hex.EncodeToString(sum[:6])
}

// set replaces the orphans with those found now, keeping when each was
// first seen; it returns those not seen before.
func (s *orphanState) set(found []orphan, now time.Time) []orphan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	var fresh []orphan
	items := make(map[string]orphan, len(found))
	for _, o := range found {
		first, ok := s.seen[o.ID]
		if !ok {
			first = now
			fresh = append(fresh, o)
		}
		o.FirstSeen = first
		items[o.ID] = o
	}
	for id := range s.seen {
		if _, ok := items[id]; !ok {
			delete(s.seen, id)
		}
	}
	for id, o := range items {
		s.seen[id] = o.FirstSeen
	}
	s.items, s.checkedAt = items, now
	return fresh
}

func (s *orphanState) get(id string) (orphan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.items[id]
	return o, ok
}

func (s *orphanState) list() ([]api.Orphan, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.Orphan, 0, len(s.items))
	for _, o := range s.items {
		out = append(out, o.Orphan)
	}
	slices.SortFunc(out, func(a, b api.Orphan) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, s.checkedAt
}

// Orphans are what the last reconcile found that looks like gpuvm's but is
// not provably this installation's to keep or remove, and when it looked.
func (rc *reconciler) Orphans() ([]api.Orphan, time.Time) { return rc.orphans.list() }

// CheckOrphans compares the host with the database now (a reconcile) and
// returns the orphans it found; when the comparison is incomplete the
// error says why, and the orphans are those it could judge.
func (rc *reconciler) CheckOrphans(ctx context.Context) ([]api.Orphan, time.Time, error) {
	_, err := rc.reconcileHost(ctx)
	items, at := rc.orphans.list()
	return items, at, err
}

// OrphanCounts are the orphans by kind (every kind named, 0 when none).
func (rc *reconciler) OrphanCounts() map[string]int {
	items, _ := rc.orphans.list()
	out := map[string]int{api.OrphanDomain: 0, api.OrphanVolume: 0, api.OrphanDevice: 0}
	for _, it := range items {
		out[it.Kind]++
	}
	return out
}

// records answers, for one reconcile, whether the database has a row for
// a VM (deleted ones too): the proof that this installation made what was
// made for it.
type records struct {
	st interface {
		GetVM(ctx context.Context, id string) (*store.VM, error)
	}
	seen map[string]bool
}

func (r *records) has(ctx context.Context, vmID string) (bool, error) {
	if vmID == "" {
		return false, nil
	}
	if ok, done := r.seen[vmID]; done {
		return ok, nil
	}
	_, err := r.st.GetVM(ctx, vmID)
	switch {
	case err == nil:
		r.seen[vmID] = true
	case errors.Is(err, store.ErrNotFound):
		r.seen[vmID] = false
	default:
		return false, fmt.Errorf("look up vm %s: %w", vmID, err)
	}
	return r.seen[vmID], nil
}

// whyOrphan says why something made for vmID by installation inst is not
// this installation's to remove; "" when it is.
func (rc *reconciler) whyOrphan(ctx context.Context, r *records, inst, vmID string) (string, error) {
	if inst != "" && inst != rc.installation {
		return fmt.Sprintf("made by another gpuvm installation (%s)", inst), nil
	}
	ok, err := r.has(ctx, vmID)
	if err != nil || ok {
		return "", err
	}
	if vmID == "" {
		return "it names no VM", nil
	}
	if inst == "" {
		return fmt.Sprintf("it names no installation, and this installation's database has no VM %s", vmID), nil
	}
	return fmt.Sprintf("this installation's, but its database has no VM %s (restored from an older backup, or the row was lost)", vmID), nil
}

// volumeNames matches the volumes gpuvm makes for a domain named with
// prefix: the overlay and the seed (domain.OverlayName, domain.SeedName).
func volumeNames(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `[0-9a-f]{12}(\.qcow2|-seed\.iso)$`)
}

// poolVolumes lists the configured pool's volumes ("" pool: none); listed
// is false when there was nothing to list (no pool configured, none made
// yet, or a hypervisor without pools), so that no row is judged by it.
func (rc *reconciler) poolVolumes(ctx context.Context) (pool string, names []string, listed bool, err error) {
	pool = rc.settings().StoragePool
	vh, ok := rc.hv.(volumeLister)
	if pool == "" || !ok {
		return "", nil, false, nil
	}
	names, err = vh.Volumes(ctx, pool)
	if hypervisor.IsNotFound(err) {
		return pool, nil, false, nil // no pool yet: no volume
	}
	if err != nil {
		return pool, nil, false, fmt.Errorf("list the volumes of pool %s: %w", pool, err)
	}
	return pool, names, true, nil
}

// volumeLister and volumeDeleter are the storage calls orphans need; a
// *hypervisor.Conn has them.
type volumeLister interface {
	Volumes(ctx context.Context, pool string) ([]string, error)
}

type volumeDeleter interface {
	DeleteVolume(ctx context.Context, pool, name string) error
}

// domainXML reads a domain's XML (with its display password, secure).
type domainXML interface {
	XML(ctx context.Context, uuid string, secure bool) (string, error)
}

// publishOrphans records what this reconcile found: the list, a log line
// for each new one, and the host's "orphans" alert.
func (rc *reconciler) publishOrphans(ctx context.Context, found []orphan) error {
	now := rc.st.Now()
	for _, n := range rc.orphans.set(found, now) {
		rc.log.Warn("found an orphan: left as it is until an admin deletes or adopts it (gpuvm admin orphans)",
			"orphan", n.ID, "kind", n.Kind, "name", n.Name, "vm", n.VMID, "installation", n.Installation, "reason", n.Reason)
	}
	subject := "host/" + rc.host
	if len(found) > 0 {
		counts := rc.OrphanCounts()
		summary := fmt.Sprintf("%d things on %s look like gpuvm's but are not this installation's to remove (%d domains, %d volumes, %d devices): see gpuvm admin orphans",
			len(found), rc.host, counts[api.OrphanDomain], counts[api.OrphanVolume], counts[api.OrphanDevice])
		_, err := rc.st.FireAlert(ctx, &store.Alert{Rule: OrphanAlertRule, Subject: subject, Host: rc.host, Metric: "gpuvm_orphans",
			Value: float64(len(found)), Summary: summary, StartedAt: now})
		if err != nil {
			return fmt.Errorf("fire the orphans alert: %w", err)
		}
		return nil
	}
	if _, err := rc.st.ResolveAlert(ctx, OrphanAlertRule, subject, 0, "no orphans on "+rc.host, now); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("resolve the orphans alert: %w", err)
	}
	return nil
}

// findOrphan runs a reconcile (so that the decision is taken on what is
// there now) and returns the orphan with id.
func (rc *reconciler) findOrphan(ctx context.Context, id string) (orphan, error) {
	if _, err := rc.reconcileHost(ctx); err != nil {
		rc.log.Warn("reconcile before an orphan decision incomplete", "err", err)
	}
	it, ok := rc.orphans.get(id)
	if !ok {
		return orphan{}, fmt.Errorf("orphan %s: %w", id, ErrNoOrphan)
	}
	return it, nil
}

// DeleteOrphan removes an orphan an admin chose to delete: a domain with
// the volumes its metadata names, a volume, or a device (removed by its
// backend only if its ledger entry names the installation the orphan
// report named).
func (rc *reconciler) DeleteOrphan(ctx context.Context, id string) (api.Orphan, error) {
	it, err := rc.findOrphan(ctx, id)
	if err != nil {
		return api.Orphan{}, err
	}
	rc.roundMu.Lock()
	defer rc.roundMu.Unlock()
	switch it.Kind {
	case api.OrphanDomain:
		err = rc.hv.DeleteVM(ctx, it.UUID, rc.settings().ShutdownTimeout)
		if hypervisor.IsNotFound(err) {
			err = nil
		}
	case api.OrphanVolume:
		vd, ok := rc.hv.(volumeDeleter)
		if !ok {
			return it.Orphan, errors.New("this hypervisor cannot delete volumes")
		}
		err = vd.DeleteVolume(ctx, it.pool, it.volume)
	case api.OrphanDevice:
		b, ok := rc.backends.Backend(it.backend)
		if !ok {
			return it.Orphan, fmt.Errorf("backend %s is not running", it.backend)
		}
		err = b.Remove(ctx, backend.RemoveRequest{ID: it.deviceID, GPU: it.GPU, OfInstallation: it.Installation})
		if errors.Is(err, backend.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		return it.Orphan, fmt.Errorf("delete orphan %s (%s %s): %w", it.ID, it.Kind, it.Name, err)
	}
	rc.log.Warn("deleted an orphan an admin chose to delete", "orphan", it.ID, "kind", it.Kind, "name", it.Name, "vm", it.VMID, "installation", it.Installation)
	rc.orphans.drop(it.ID)
	return it.Orphan, nil
}

func (s *orphanState) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, id)
}

// AdoptOrphan makes an orphaned domain of this installation, whose VM row
// was lost, a VM of owner again: running or stopped as its domain is, with
// the GPU devices made for it (orphaned devices of this installation naming
// its VM) recorded as its allocations. by is the admin who adopts it.
func (rc *reconciler) AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest, by string) (*store.VM, error) {
	it, err := rc.findOrphan(ctx, id)
	if err != nil {
		return nil, err
	}
	if it.Kind != api.OrphanDomain || !it.Adoptable {
		return nil, fmt.Errorf("orphan %s (%s %s): %w: only a domain of this installation whose VM is not in the database can be adopted; this one is an orphan because %s",
			it.ID, it.Kind, it.Name, ErrNotAdoptable, it.Reason)
	}
	profName := cmp.Or(req.Profile, it.Profile)
	p := rc.settings().Profiles[profName]
	if p == nil {
		return nil, fmt.Errorf("%w: profile %q is not in the configuration (name one with \"profile\")", store.ErrInvalid, profName)
	}
	owner, err := rc.st.GetUser(ctx, req.Owner)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: owner: no user %q", store.ErrInvalid, req.Owner)
		}
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = "adopted-" + it.VMID[max(0, len(it.VMID)-8):]
	}

	rc.roundMu.Lock()
	defer rc.roundMu.Unlock()
	info, err := rc.hv.Lookup(ctx, it.UUID)
	if err != nil {
		return nil, fmt.Errorf("adopt orphan %s: look up domain %s: %w", it.ID, it.Name, err)
	}
	devices, err := rc.adoptedDevices(ctx, it.VMID)
	if err != nil {
		return nil, fmt.Errorf("adopt orphan %s: %w", it.ID, err)
	}
	vm := &store.VM{ID: it.VMID, Name: name, Owner: owner.Name, Profile: p.Name, Host: rc.host,
		Spec: `{"hours":` + fmt.Sprint(int(p.Lease.Default/time.Hour)) + `}`, Hours: int(p.Lease.Default / time.Hour),
		StateReason: "adopted by " + by + " from an orphaned domain"}
	if len(owner.Groups) > 0 {
		vm.Group = owner.Groups[0]
	}
	if info.Active() {
		lease := rc.st.Now().Add(p.Lease.Default)
		vm.State, vm.Phase, vm.LeaseEnd = store.VMRunning, api.PhaseReady, &lease
	} else {
		vm.State = store.VMStopped
	}
	if x, ok := rc.hv.(domainXML); ok {
		if doc, err := x.XML(ctx, it.UUID, true); err == nil {
			vm.DisplayPassword = domain.DisplayPassword(doc)
		}
	}
	if err := rc.st.AdoptVM(ctx, vm, devices, by); err != nil {
		return nil, fmt.Errorf("adopt orphan %s: %w", it.ID, err)
	}
	rc.log.Warn("adopted an orphaned domain", "orphan", it.ID, "domain", it.Name, "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "devices", len(devices), "by", by)
	rc.orphans.drop(it.ID)
	for _, d := range devices {
		rc.orphans.drop(orphanID(api.OrphanDevice, rc.host, d.Claim.Backend+"/"+d.DeviceID))
	}
	return vm, nil
}

// adoptedDevices are the slots held by the orphaned devices of this
// installation made for vmID, as the backends report them now.
func (rc *reconciler) adoptedDevices(ctx context.Context, vmID string) ([]store.AdoptedDevice, error) {
	invs, errs := rc.backends.inventoriesOf(ctx, rc.backends.Names())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	held, err := rc.st.ListLiveAllocations(ctx, rc.host)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{} // gpu + slot key
	for _, a := range held {
		used[a.GPUAddress+" "+a.Slot] = true
	}
	var out []store.AdoptedDevice
	for _, name := range slices.Sorted(maps.Keys(invs)) {
		inv := invs[name]
		for _, d := range inv.Devices {
			if !d.Managed || d.VMUUID != vmID || d.Absent != "" || (d.Installation != "" && d.Installation != rc.installation) {
				continue
			}
			c := store.SlotClaim{Host: rc.host, GPUAddress: d.GPU, Backend: name, Kind: d.Kind, Profile: cmp.Or(d.Profile, d.Type)}
			switch d.Kind {
			case gpu.KindMIG:
				c.PlacementStart = d.Placement
				for _, g := range inv.GPUs {
					for _, mp := range g.MIGProfiles {
						if g.Address == d.GPU && mp.Name == d.Profile {
							c.PlacementSize = mp.Size
						}
					}
				}
				if c.PlacementSize == 0 {
					return nil, fmt.Errorf("device %s/%s: GPU %s reports no MIG profile %q", name, d.ID, d.GPU, d.Profile)
				}
			case gpu.KindVGPU:
				if d.Hostdev.Type == backend.HostdevPCI {
					c.VF = d.ID
				} else {
					c.Index = -1
					for i := range backendMaxVGPUs {
						if k := fmt.Sprintf("vgpu:%d", i); !used[d.GPU+" "+k] {
							c.Index, used[d.GPU+" "+k] = i, true
							break
						}
					}
				}
			}
			hd, _ := json.Marshal(d.Hostdev)
			out = append(out, store.AdoptedDevice{Claim: c, DeviceID: d.ID, Hostdev: string(hd)})
		}
	}
	return out, nil
}
