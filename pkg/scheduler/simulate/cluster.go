// Package simulate replays a trace of VM requests against a cluster through
// the very scheduler and policy code gpuvmd runs (pkg/scheduler,
// pkg/policy), once per configuration to compare, and reports what each
// served: acceptance per GPU type, GPU-hours, waits, utilisation,
// fragmentation, fairness and refusals. `gpuvm sim` is its command line.
//
// It is pure: it parses text it is given and reads no file and no clock.
package simulate

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// A cluster file describes the GPU servers to simulate:
//
//	host "lab" {
//	  preset = "a100x4"      # a simulator preset (or gpu blocks, or both)
//	  count  = 3             # lab-1, lab-2, lab-3
//	  mode   = "mig"         # every GPU's mode: auto, vgpu, mig, passthrough
//	}
//	host "render" {
//	  gpu {
//	    model      = "L40S"
//	    count      = 4
//	    mode       = "vgpu"
//	    mixed_size = false
//	  }
//	}
//	booking "ml101" {        # capacity held ahead (checked like gpuvmd's)
//	  group    = "ml101"
//	  gpu_kind = "mig"
//	  gpu_type = "1g.10gb"
//	  vms      = 7
//	  start    = "2026-01-06T14:00:00Z"   # or seconds from the trace's start
//	  hours    = 2
//	  repeat   = "FREQ=WEEKLY;BYDAY=TU"
//	  until    = "2026-03-01T00:00:00Z"
//	}

type clusterFile struct {
	Hosts    []*hostBlock    `hcl:"host,block"`
	Bookings []*bookingBlock `hcl:"booking,block"`
}

type hostBlock struct {
	Name      string      `hcl:"name,label"`
	Preset    *string     `hcl:"preset,optional"`
	Count     *int        `hcl:"count,optional"`
	Mode      *string     `hcl:"mode,optional"`
	MixedSize *bool       `hcl:"mixed_size,optional"`
	Draining  *bool       `hcl:"draining,optional"`
	GPUs      []*gpuBlock `hcl:"gpu,block"`
	DefRange  hcl.Range   `hcl:",def_range"`
}

type gpuBlock struct {
	Model      string    `hcl:"model"`
	Count      *int      `hcl:"count,optional"`
	Mode       *string   `hcl:"mode,optional"`
	MixedSize  *bool     `hcl:"mixed_size,optional"`
	Address    *string   `hcl:"address,optional"`
	IOMMUGroup *string   `hcl:"iommu_group,optional"`
	MIGLayout  []string  `hcl:"mig_layout,optional"`
	Draining   *bool     `hcl:"draining,optional"`
	DefRange   hcl.Range `hcl:",def_range"`
}

type bookingBlock struct {
	Name     string    `hcl:"name,label"`
	User     *string   `hcl:"user,optional"`
	Group    *string   `hcl:"group,optional"`
	Profile  *string   `hcl:"profile,optional"`
	Kind     *string   `hcl:"gpu_kind,optional"`
	Type     *string   `hcl:"gpu_type,optional"`
	Count    *int      `hcl:"count,optional"`
	VMs      *int      `hcl:"vms,optional"`
	Start    string    `hcl:"start"`
	Hours    float64   `hcl:"hours"`
	Repeat   *string   `hcl:"repeat,optional"`
	Until    *string   `hcl:"until,optional"`
	DefRange hcl.Range `hcl:",def_range"`
}

// presetGPU is one GPU of a simulator preset.
type presetGPU struct {
	bus      int
	deviceID uint16
	vfs      bool // SR-IOV VFs enabled: a vGPU GPU
	mig      bool // MIG mode on
	mixed    bool // mixed-size vGPU mode
}

// presets copies the GPUs of pkg/host/sim's presets (presets.go), which this
// pure package cannot import (it needs cgo). Keep them in step;
// TestPresetsMatchProfile checks the names and boards against pkg/config's
// copy.
var presets = map[string][]presetGPU{
	"a100x4": {{0x17, 0x20f1, true, true, false}, {0x31, 0x20f1, true, true, false}, {0xb1, 0x20f1, true, false, false}, {0xca, 0x20f1, false, false, false}},
	"a40x2":  {{0x41, 0x2235, true, false, false}, {0xc1, 0x2235, false, false, false}},
	"l40sx4": {{0x01, 0x26b9, true, false, false}, {0x21, 0x26b9, true, false, false}, {0x81, 0x26b9, true, false, true}, {0xa1, 0x26b9, false, false, false}},
	"h100x8": {
		{0x18, 0x2331, true, true, false}, {0x2a, 0x2331, true, true, false}, {0x3a, 0x2331, true, true, false}, {0x5d, 0x2331, true, true, false},
		{0x9a, 0x2331, true, false, false}, {0xab, 0x2331, true, false, false}, {0xba, 0x2331, true, false, false}, {0xdb, 0x2331, false, false, false},
	},
	"mixed": {{0x17, 0x20f1, true, true, false}, {0x41, 0x2235, true, false, false}, {0x81, 0x26b9, true, false, false}, {0x9a, 0x2331, true, true, false}, {0xc1, 0x2684, false, false, false}},
}

// Presets lists the preset names.
func Presets() []string {
	out := make([]string, 0, len(presets))
	for k := range presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Limits on a cluster file.
const (
	MaxHosts = 20000
	MaxGPUs  = 200000
)

// Cluster is a parsed cluster file.
type Cluster struct {
	Hosts    []scheduler.HostSpec
	Bookings []BookingSpec
}

// BookingSpec is a booking block; it is booked when a run starts.
type BookingSpec struct {
	Booking policy.Booking
	// Offset is the start as seconds from the trace's start, when written so.
	Offset *time.Duration
	Until  *time.Duration
	Length time.Duration
	Line   int
}

// GPUCount is the number of GPUs.
func (c *Cluster) GPUCount() int {
	n := 0
	for _, h := range c.Hosts {
		n += len(h.GPUs)
	}
	return n
}

// ParseCluster reads a cluster file.
func ParseCluster(name string, src []byte) (*Cluster, error) {
	file, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagErr(diags)
	}
	var cf clusterFile
	if diags := gohcl.DecodeBody(file.Body, nil, &cf); diags.HasErrors() {
		return nil, diagErr(diags)
	}
	var errs []error
	bad := func(rng hcl.Range, f string, a ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", rng.Filename, rng.Start.Line, fmt.Sprintf(f, a...)))
	}
	c := &Cluster{}
	seen := map[string]bool{}
	gpus := 0
	for _, h := range cf.Hosts {
		count := 1
		if h.Count != nil {
			count = *h.Count
			if count < 1 || count > MaxHosts {
				bad(h.DefRange, "host %q: count is from 1 to %d, not %d", h.Name, MaxHosts, count)
				continue
			}
		}
		mode := gpu.Mode("")
		if h.Mode != nil {
			m, err := parseMode(*h.Mode)
			if err != nil {
				bad(h.DefRange, "host %q: %v", h.Name, err)
				continue
			}
			mode = m
		}
		var specs []scheduler.GPUSpec
		own := map[int]bool{} // GPUs whose gpu block sets a mode of its own
		if h.Preset != nil {
			ps, ok := presets[*h.Preset]
			if !ok {
				bad(h.DefRange, "host %q: unknown preset %q (presets: %s)", h.Name, *h.Preset, strings.Join(Presets(), ", "))
				continue
			}
			for i, p := range ps {
				s := scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", p.bus), DeviceID: p.deviceID, IOMMUGroup: strconv.Itoa(10 + i), MixedSize: p.mixed}
				switch {
				case p.mig:
					s.Allow, s.Mode = gpu.ModeMIG, gpu.ModeMIG
				case p.vfs:
					s.Allow, s.Mode = gpu.ModeVGPU, gpu.ModeVGPU
				default:
					s.Allow = gpu.ModePassthrough
				}
				specs = append(specs, s)
			}
		}
		for _, g := range h.GPUs {
			specs = appendGPUBlock(specs, own, h.Name, g, bad)
		}
		if len(specs) == 0 {
			bad(h.DefRange, "host %q has no GPU: give it a preset or gpu blocks", h.Name)
			continue
		}
		for i := range specs {
			if mode != "" && !own[i] {
				specs[i].Allow = mode
				specs[i].Mode = ""
				if mode != gpu.ModeAuto {
					specs[i].Mode = mode
				}
			}
			if h.MixedSize != nil {
				specs[i].MixedSize = *h.MixedSize
			}
		}
		gpus += count * len(specs)
		if gpus > MaxGPUs {
			bad(h.DefRange, "the cluster has more than %d GPUs", MaxGPUs)
			break
		}
		for k := 1; k <= count; k++ {
			name := h.Name
			if count > 1 {
				name = fmt.Sprintf("%s-%d", h.Name, k)
			}
			if seen[name] {
				bad(h.DefRange, "host %q is defined twice", name)
				continue
			}
			seen[name] = true
			hs := scheduler.HostSpec{Name: name, GPUs: append([]scheduler.GPUSpec(nil), specs...)}
			if h.Draining != nil {
				hs.Draining = *h.Draining
			}
			c.Hosts = append(c.Hosts, hs)
		}
	}
	if len(cf.Hosts) == 0 {
		errs = append(errs, fmt.Errorf("%s: no host block", name))
	}
	if len(errs) == 0 {
		if _, err := scheduler.NewInventory(c.Hosts, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
	}
	for _, b := range cf.Bookings {
		bs, err := parseBooking(b)
		if err != nil {
			bad(b.DefRange, "booking %q: %v", b.Name, err)
			continue
		}
		c.Bookings = append(c.Bookings, bs)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// appendGPUBlock adds the GPUs of one gpu block of host to specs, marking
// in own those that set a mode of their own; bad reports what is wrong.
func appendGPUBlock(specs []scheduler.GPUSpec, own map[int]bool, host string, g *gpuBlock, bad func(hcl.Range, string, ...any)) []scheduler.GPUSpec {
	n := 1
	if g.Count != nil {
		n = *g.Count
		if n < 1 || n > 64 {
			bad(g.DefRange, "host %q: a gpu block's count is from 1 to 64, not %d", host, n)
			return specs
		}
	}
	if g.Address != nil && n > 1 {
		bad(g.DefRange, "host %q: address names one GPU; drop count or address", host)
		return specs
	}
	gm := gpu.Mode("")
	if g.Mode != nil {
		m, err := parseMode(*g.Mode)
		if err != nil {
			bad(g.DefRange, "host %q: %v", host, err)
			return specs
		}
		gm = m
	}
	if _, err := scheduler.NewInventory([]scheduler.HostSpec{{Name: "x", GPUs: []scheduler.GPUSpec{{Address: "x", Model: g.Model}}}}, nil); err != nil {
		bad(g.DefRange, "host %q: %v", host, strings.TrimPrefix(err.Error(), "host x: GPU x: "))
		return specs
	}
	for k := 0; k < n; k++ {
		s := scheduler.GPUSpec{Model: g.Model, Allow: gm, MIGLayout: g.MIGLayout}
		s.Address = fmt.Sprintf("0000:%02x:00.0", 0xe0+len(specs)%32)
		if len(specs) >= 32 {
			s.Address = fmt.Sprintf("%04x:%02x:00.0", len(specs)/32, 0xe0+len(specs)%32)
		}
		if g.Address != nil {
			s.Address = *g.Address
		}
		if gm == gpu.ModeMIG || gm == gpu.ModeVGPU || gm == gpu.ModePassthrough {
			s.Mode = gm
		}
		if gm != "" {
			own[len(specs)] = true
		}
		if g.MixedSize != nil {
			s.MixedSize = *g.MixedSize
		}
		if g.IOMMUGroup != nil {
			s.IOMMUGroup = *g.IOMMUGroup
		}
		if g.Draining != nil {
			s.Draining = *g.Draining
		}
		specs = append(specs, s)
	}
	return specs
}

func parseMode(s string) (gpu.Mode, error) {
	switch m := gpu.Mode(s); m {
	case gpu.ModeAuto, gpu.ModeVGPU, gpu.ModeMIG, gpu.ModePassthrough:
		return m, nil
	}
	return "", fmt.Errorf("mode %q is not auto, vgpu, mig or passthrough", s)
}

func diagErr(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		where := ""
		if d.Subject != nil {
			where = fmt.Sprintf("%s:%d: ", d.Subject.Filename, d.Subject.Start.Line)
		}
		errs = append(errs, fmt.Errorf("%s%s: %s", where, d.Summary, d.Detail))
	}
	return errors.Join(errs...)
}

func parseBooking(b *bookingBlock) (BookingSpec, error) {
	bs := BookingSpec{Line: b.DefRange.Start.Line}
	bk := policy.Booking{ID: b.Name, VMs: 1}
	switch {
	case b.User != nil && b.Group != nil:
		return bs, fmt.Errorf("user or group, not both")
	case b.User != nil:
		bk.Owner = policy.Owner{Kind: policy.OwnerUser, Name: *b.User}
	case b.Group != nil:
		bk.Owner = policy.Owner{Kind: policy.OwnerGroup, Name: *b.Group}
	default:
		return bs, fmt.Errorf("name a user or a group")
	}
	if b.VMs != nil {
		bk.VMs = *b.VMs
	}
	if b.Profile != nil {
		bk.Profile = *b.Profile
	}
	kind, typ := "", ""
	if b.Kind != nil {
		kind = *b.Kind
	}
	if b.Type != nil {
		typ = *b.Type
	}
	count := 1
	if b.Count != nil {
		count = *b.Count
	}
	if kind != "" {
		n, err := needOf(kind, typ, count)
		if err != nil {
			return bs, err
		}
		bk.Need = n
	} else if b.Profile == nil {
		return bs, fmt.Errorf("give gpu_kind and gpu_type, or a profile")
	}
	if b.Hours <= 0 || b.Hours > 24*31 {
		return bs, fmt.Errorf("hours is from 0 to %d, not %g", 24*31, b.Hours)
	}
	length := time.Duration(b.Hours * float64(time.Hour))
	bs.Length = length
	if t, off, err := parseWhen(b.Start); err != nil {
		return bs, fmt.Errorf("start: %v", err)
	} else if off != nil {
		bs.Offset = off
	} else {
		bk.Start = t
		bk.End = t.Add(length)
	}
	bk.End = bk.Start.Add(length)
	if b.Repeat != nil {
		r, err := policy.ParseRRule(*b.Repeat, nil)
		if err != nil {
			return bs, err
		}
		bk.Repeat = r
	}
	if b.Until != nil {
		t, off, err := parseWhen(*b.Until)
		if err != nil {
			return bs, fmt.Errorf("until: %v", err)
		}
		bk.Repeat.Until = t
		bs.Until = off
	}
	bs.Booking = bk
	return bs, nil
}

// parseWhen reads RFC 3339, or seconds from the trace's start.
func parseWhen(s string) (time.Time, *time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v < 0 || v > 10*365*24*3600 {
			return time.Time{}, nil, fmt.Errorf("%q seconds is out of range (0 to ten years)", s)
		}
		d := time.Duration(v * float64(time.Second))
		return time.Time{}, &d, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("%q is neither seconds from the start nor an RFC 3339 time (2026-01-05T09:00:00Z)", s)
	}
	return t, nil, nil
}

// needOf turns a trace's gpu_kind and gpu_type into a need.
func needOf(kind, typ string, count int) (scheduler.Need, error) {
	if count < 1 || count > scheduler.MaxCount {
		return scheduler.Need{}, fmt.Errorf("count is from 1 to %d, not %d", scheduler.MaxCount, count)
	}
	typ = strings.TrimSpace(typ)
	n := scheduler.Need{Count: count}
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "mig":
		p := strings.ToLower(typ)
		for _, m := range gpu.Models() {
			if m.MIG != nil {
				if _, ok := m.MIG.Profile(p); ok {
					n.Kind, n.Profile = gpu.KindMIG, p
					return n, nil
				}
			}
		}
		return n, fmt.Errorf("%q is not a MIG profile of any board (e.g. 1g.10gb, 3g.40gb, 7g.80gb)", typ)
	case "vgpu":
		t, err := gpu.ParseVGPUType(typ)
		if err != nil {
			return n, err
		}
		for _, m := range gpu.Models() {
			if !strings.EqualFold(m.Board, t.Board) {
				continue
			}
			info, err := m.VGPUType(t.Name)
			if err != nil {
				return n, err
			}
			if info.MIGBacked() {
				n.Kind, n.Profile, n.Model = gpu.KindMIG, info.MIGProfile, m.Board
				return n, nil
			}
			n.Kind, n.Type = gpu.KindVGPU, info.Name
			return n, nil
		}
		return n, fmt.Errorf("no board gpuvm knows makes vGPU type %s", t.Name)
	case "passthrough":
		n.Kind = gpu.KindPassthrough
		if typ != "" {
			ok := false
			for _, m := range gpu.Models() {
				ok = ok || m.MatchesName(typ)
			}
			if !ok {
				return n, fmt.Errorf("%q is not a GPU model gpuvm knows", typ)
			}
			n.Model = typ
		}
		return n, nil
	case "any":
		mem, err := parseSize(typ)
		if err != nil {
			return n, err
		}
		n.Kind, n.Memory = gpu.KindAny, mem
		return n, nil
	}
	return n, fmt.Errorf("gpu_kind %q is not mig, vgpu, passthrough or any", kind)
}

func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	mult := uint64(1 << 30) // a bare number is GiB
	for _, u := range []struct {
		suffix string
		m      uint64
	}{{"gib", 1 << 30}, {"gb", 1 << 30}, {"g", 1 << 30}, {"mib", 1 << 20}, {"mb", 1 << 20}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v <= 0 || v > 4096 && mult == 1<<30 {
		return 0, fmt.Errorf("%q is not a GPU memory size (e.g. 20GiB)", s)
	}
	return uint64(v * float64(mult)), nil
}
