package monitor

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// SamplerStore is what the sampler needs of the database (a *store.Store).
type SamplerStore interface {
	ListLiveAllocations(ctx context.Context, host string) ([]store.Allocation, error)
	GetVMs(ctx context.Context, ids []string) (map[string]*store.VM, error)
	InsertSamples(ctx context.Context, samples []store.GPUSample) error
}

// Clock tells the time; tests give a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Round is one sampling round: what was read, mapped to the VMs and users
// holding each GPU and device, as written to gpu_samples.
type Round struct {
	At        time.Time
	Host      string
	GPUs      []MappedGPU
	Instances []MappedInstance
	// Duration is how long reading, mapping and writing took.
	Duration time.Duration
}

// MappedGPU is a GPU and, when one VM holds it whole, that VM.
type MappedGPU struct {
	GPUReading
	VMID, User string
}

// MappedInstance is a device and the VM holding it ("" when none does: a
// MIG instance kept for later, a device gpuvm did not make).
type MappedInstance struct {
	InstanceReading
	Key        string // gpu_samples.instance: the device ID, or "gi:<id>"
	VMID, User string
}

// Sampler reads the host's GPUs each round, maps each GPU and device to the
// VM and user holding it (from the live allocations), and writes the
// samples in one transaction.
type Sampler struct {
	host  string
	src   Source
	st    SamplerStore
	clock Clock
	log   *slog.Logger

	mu       sync.Mutex
	last     *Round
	noted    map[string]bool
	lastErr  string
	xidTotal map[string]int64 // XID errors since gpuvmd started, per GPU
	rounds   int64
	failures int64
}

// maxNotes bounds the notes remembered as logged.
const maxNotes = 1000

// NewSampler samples src for host into st.
func NewSampler(host string, src Source, st SamplerStore, clock Clock, log *slog.Logger) *Sampler {
	if clock == nil {
		clock = realClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sampler{host: host, src: src, st: st, clock: clock, log: log, noted: map[string]bool{}, xidTotal: map[string]int64{}}
}

// Last is the newest round that was written; nil before the first.
func (s *Sampler) Last() *Round {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Stats says how many rounds ran and how many failed.
func (s *Sampler) Stats() (rounds, failures int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds, s.failures
}

// Healthy reports whether the last round succeeded.
func (s *Sampler) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last != nil && s.lastErr == ""
}

// XIDTotal is the XID errors each GPU reported since the sampler started.
func (s *Sampler) XIDTotal() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.xidTotal))
	for k, v := range s.xidTotal {
		out[k] = v
	}
	return out
}

// Sample runs one round. A failure is logged once for as long as it
// repeats, and returned.
func (s *Sampler) Sample(ctx context.Context) (*Round, error) {
	start := time.Now()
	r, err := s.sample(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rounds++
	if err != nil {
		s.failures++
		if msg := err.Error(); msg != s.lastErr {
			s.log.Warn("GPU sampling failed; retried every interval", "source", s.src.Describe(), "err", err)
			s.lastErr = msg
		}
		return nil, err
	}
	if s.lastErr != "" {
		s.log.Info("GPU sampling works again", "source", s.src.Describe())
		s.lastErr = ""
	}
	r.Duration = time.Since(start)
	for _, g := range r.GPUs {
		if g.XIDErrors > 0 {
			s.xidTotal[g.Address] += int64(g.XIDErrors)
		}
	}
	s.last = r
	return r, nil
}

func (s *Sampler) sample(ctx context.Context) (*Round, error) {
	reading, err := s.src.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.src.Describe(), err)
	}
	s.logNotes(reading.Notes)
	at := s.clock.Now().UTC().Truncate(time.Microsecond)
	allocs, err := s.st.ListLiveAllocations(ctx, s.host)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(allocs))
	seen := map[string]bool{}
	for _, a := range allocs {
		if !seen[a.VMID] {
			seen[a.VMID] = true
			ids = append(ids, a.VMID)
		}
	}
	vms, err := s.st.GetVMs(ctx, ids)
	if err != nil {
		return nil, err
	}
	r := mapReading(s.host, at, reading, allocs, vms)
	samples := r.samples()
	if err := s.st.InsertSamples(ctx, samples); err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Sampler) logNotes(notes []string) {
	for _, n := range notes {
		if s.noted[n] {
			continue
		}
		if len(s.noted) >= maxNotes {
			clear(s.noted)
		}
		s.noted[n] = true
		s.log.Info("GPU sampling: "+n, "source", s.src.Describe())
	}
}

// mapReading gives each GPU and device the VM and user that hold it: a
// passthrough allocation holds its GPU; a vGPU or MIG allocation holds the
// device of its device ID (mdev UUID or VF), or, for MIG, the GPU instance
// at its placement. A MIG-backed vGPU seen apart from its GPU instance (an
// mdev, whose instance the host does not say) is merged with it.
func mapReading(host string, at time.Time, rd Reading, allocs []store.Allocation, vms map[string]*store.VM) *Round {
	r := &Round{At: at, Host: host}
	owner := func(vmID string) string {
		if vm, ok := vms[vmID]; ok {
			return vm.Owner
		}
		return ""
	}
	whole := map[string]string{}
	for _, a := range allocs {
		if a.Kind == gpu.KindPassthrough {
			whole[a.GPUAddress] = a.VMID
		}
	}
	for _, g := range rd.GPUs {
		m := MappedGPU{GPUReading: g}
		if vm, ok := whole[g.Address]; ok {
			m.VMID, m.User = vm, owner(vm)
		}
		r.GPUs = append(r.GPUs, m)
	}
	ins := append([]InstanceReading(nil), rd.Instances...)
	taken := make([]bool, len(ins))
	find := func(match func(InstanceReading) bool) int {
		for i, in := range ins {
			if !taken[i] && match(in) {
				return i
			}
		}
		return -1
	}
	for _, a := range allocs {
		if a.Kind == gpu.KindPassthrough {
			continue
		}
		byID := -1
		if a.DeviceID != "" {
			byID = find(func(in InstanceReading) bool { return in.GPUAddress == a.GPUAddress && in.ID == a.DeviceID })
		}
		byPlace := -1
		if a.Kind == gpu.KindMIG {
			byPlace = find(func(in InstanceReading) bool {
				return in.GPUAddress == a.GPUAddress && in.Kind == gpu.KindMIG && in.PlacementStart == a.PlacementStart && (in.ID == "" || in.ID == a.DeviceID)
			})
		}
		var in InstanceReading
		switch {
		case byID >= 0 && byPlace >= 0 && byID != byPlace:
			in = mergeInstance(ins[byID], ins[byPlace])
			taken[byID], taken[byPlace] = true, true
		case byID >= 0:
			in, taken[byID] = ins[byID], true
		case byPlace >= 0:
			in, taken[byPlace] = ins[byPlace], true
		default:
			continue // the device is not made yet, or the host lost it
		}
		if in.ID == "" {
			in.ID = a.DeviceID
		}
		if in.Type == "" {
			in.Type = a.Profile
		}
		r.Instances = append(r.Instances, MappedInstance{InstanceReading: in, Key: in.Key(), VMID: a.VMID, User: owner(a.VMID)})
	}
	for i, in := range ins {
		if !taken[i] && in.Key() != "" {
			r.Instances = append(r.Instances, MappedInstance{InstanceReading: in, Key: in.Key()})
		}
	}
	sort.Slice(r.Instances, func(i, j int) bool {
		a, b := r.Instances[i], r.Instances[j]
		if a.GPUAddress != b.GPUAddress {
			return a.GPUAddress < b.GPUAddress
		}
		return a.Key < b.Key
	})
	return r
}

// samples are the round's rows of gpu_samples.
func (r *Round) samples() []store.GPUSample {
	out := make([]store.GPUSample, 0, len(r.GPUs)+len(r.Instances))
	for _, g := range r.GPUs {
		out = append(out, store.GPUSample{Host: r.Host, GPUAddress: g.Address, VMID: g.VMID, User: g.User, TakenAt: r.At,
			GPUUtil: g.Util, MemUtil: g.MemUtil, EncUtil: g.EncUtil, DecUtil: g.DecUtil, MemUsed: g.MemUsed, MemTotal: g.MemTotal,
			Temperature: g.Temperature, PowerWatts: g.PowerWatts, SMClockMHz: g.SMClockMHz, XIDErrors: g.XIDErrors, ECCErrors: g.ECCErrors})
	}
	for _, in := range r.Instances {
		out = append(out, store.GPUSample{Host: r.Host, GPUAddress: in.GPUAddress, Instance: in.Key, VMID: in.VMID, User: in.User, TakenAt: r.At,
			GPUUtil: in.Util, MemUtil: in.MemUtil, EncUtil: in.EncUtil, DecUtil: in.DecUtil, MemUsed: in.MemUsed, MemTotal: in.MemTotal,
			Temperature: Unknown, PowerWatts: Unknown, License: in.License})
	}
	return out
}
