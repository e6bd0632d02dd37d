package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// MaxCount bounds the devices one request may ask for.
const MaxCount = 64

// Need is what GPU devices a request wants: the same fields as a resolved
// profile's gpu block (pkg/config GPUNeed).
type Need struct {
	Kind    gpu.Kind `json:"kind"`
	Type    string   `json:"type,omitempty"`    // vGPU type ("L40S-12Q")
	Profile string   `json:"profile,omitempty"` // MIG profile ("3g.40gb")
	// Model restricts the boards: a full name or a family ("H100").
	Model string `json:"model,omitempty"`
	Count int    `json:"count"`
	// Memory is the least framebuffer per device for KindAny (bytes), and
	// for passthrough the least board memory when set.
	Memory uint64 `json:"memory,omitempty"`
	// Kinds are the kinds KindAny may be met with; empty: all three.
	Kinds []gpu.Kind `json:"kinds,omitempty"`
	// Series limits the vGPU types of KindAny ("Q", "B", "A", "C").
	Series string `json:"series,omitempty"`
}

// NeedKey is a Need as a comparable value, for a map key: a cache of what
// a need resolves to, fails with or holds (pkg/policy, pkg/estimate).
type NeedKey struct {
	kind                        gpu.Kind
	typ, profile, model, series string
	count                       int
	memory                      uint64
	kinds                       uint64 // Kinds, four bits each (kindCode)
	more                        string // Kinds joined, when kinds cannot say them
}

// MapKey is n as a NeedKey. Kinds are kept as numbers (no allocation, and
// little to hash: it is made for every placement); a list of more than 16,
// or of a kind gpuvm does not know, is joined instead.
func (n Need) MapKey() NeedKey {
	k := NeedKey{kind: n.Kind, typ: n.Type, profile: n.Profile, model: n.Model, series: n.Series, count: n.Count, memory: n.Memory}
	for i, kind := range n.Kinds {
		c := kindCode(kind)
		if c == 0 || i >= 16 {
			var b strings.Builder
			for _, kind := range n.Kinds {
				b.WriteString(string(kind))
				b.WriteByte('|')
			}
			return NeedKey{kind: k.kind, typ: k.typ, profile: k.profile, model: k.model, series: k.series, count: k.count, memory: k.memory, more: b.String()}
		}
		k.kinds |= c << (4 * i)
	}
	return k
}

// kindCode numbers the device kinds for NeedKey (0: not one of them).
func kindCode(k gpu.Kind) uint64 {
	switch k {
	case gpu.KindMIG:
		return 1
	case gpu.KindVGPU:
		return 2
	case gpu.KindPassthrough:
		return 3
	case gpu.KindAny:
		return 4
	}
	return 0
}

// String describes the need for people: "3g.40gb", "2× L40S-12Q",
// "a whole H100", "20GiB as mig or vgpu".
func (n Need) String() string {
	var s string
	switch n.Kind {
	case gpu.KindMIG:
		s = n.Profile
	case gpu.KindVGPU:
		s = n.Type
	case gpu.KindPassthrough:
		s = "a whole GPU"
		if n.Model != "" {
			s = "a whole " + n.Model
		}
	case gpu.KindAny:
		kinds := make([]string, len(n.kinds()))
		for i, k := range n.kinds() {
			kinds[i] = string(k)
		}
		s = fmt.Sprintf("%s as %s", formatBytes(n.Memory), strings.Join(kinds, " or "))
	default:
		s = string(n.Kind)
	}
	if n.Model != "" && n.Kind != gpu.KindPassthrough {
		s += " on " + n.Model
	}
	if n.Count > 1 {
		s = fmt.Sprintf("%d× %s", n.Count, s)
	}
	return s
}

// Key names the device a need asks for, for reports: the MIG profile, the
// vGPU type, "passthrough[:MODEL]" or "any:<memory>".
func (n Need) Key() string {
	switch n.Kind {
	case gpu.KindMIG:
		return strings.ToLower(n.Profile)
	case gpu.KindVGPU:
		return strings.ToUpper(n.Type)
	case gpu.KindPassthrough:
		if n.Model != "" {
			return "passthrough:" + n.Model
		}
		return "passthrough"
	}
	return "any:" + formatBytes(n.Memory)
}

func (n Need) kinds() []gpu.Kind {
	if len(n.Kinds) == 0 {
		return []gpu.Kind{gpu.KindMIG, gpu.KindVGPU, gpu.KindPassthrough}
	}
	return n.Kinds
}

// count is Count, at least 1.
func (n Need) count() int {
	if n.Count < 1 {
		return 1
	}
	return n.Count
}

// Validate checks the need's form (not whether any GPU has it).
func (n Need) Validate() error {
	if n.Count < 0 || n.Count > MaxCount {
		return fmt.Errorf("count %d is out of range (1 to %d devices)", n.Count, MaxCount)
	}
	switch n.Kind {
	case gpu.KindMIG:
		if n.Profile == "" {
			return fmt.Errorf("a MIG need names a profile (e.g. 3g.40gb)")
		}
	case gpu.KindVGPU:
		if n.Type == "" {
			return fmt.Errorf("a vGPU need names a type (e.g. L40S-12Q)")
		}
	case gpu.KindPassthrough:
	case gpu.KindAny:
		if n.Memory == 0 {
			return fmt.Errorf("an abstract need asks for some GPU memory")
		}
		for _, k := range n.Kinds {
			if k != gpu.KindMIG && k != gpu.KindVGPU && k != gpu.KindPassthrough {
				return fmt.Errorf("kind %q is not mig, vgpu or passthrough", k)
			}
		}
		if n.Series != "" && !strings.Contains("QBAC", n.Series) || len(n.Series) > 1 {
			return fmt.Errorf("series %q is not Q, B, A or C", n.Series)
		}
	default:
		return fmt.Errorf("kind %q is not mig, vgpu, passthrough or any", n.Kind)
	}
	return nil
}

// Request is one VM waiting for its GPU devices.
type Request struct {
	ID     string   `json:"id"`
	User   string   `json:"user"`
	Group  string   `json:"group,omitempty"`  // the group it is charged to
	Groups []string `json:"groups,omitempty"` // every group of the user (bookings, quotas); Group is added
	// Profile names the profile the request came from, for reports.
	Profile string `json:"profile,omitempty"`
	Need    Need   `json:"need"`
	// Lease is how long the VM runs once started.
	Lease       time.Duration `json:"lease"`
	Priority    int           `json:"priority"`
	Preemptible bool          `json:"preemptible"`
	Class       string        `json:"class,omitempty"` // "interactive" or "batch"
	Submitted   time.Time     `json:"submitted"`
	// StartBy, when set, is when the requester gives up: the scheduler does
	// not hold capacity for a request that could only start later.
	StartBy time.Time `json:"start_by,omitzero"`
	// PreferHost, when set, is the host the request is placed on when it
	// can be (PlaceOptions.Prefer): in a fleet, the host of the owner's
	// home for a VM that mounts it.
	PreferHost string `json:"prefer_host,omitempty"`
}

// InGroup reports whether the request's user belongs to group.
func (r *Request) InGroup(group string) bool {
	if r.Group == group {
		return true
	}
	for _, g := range r.Groups {
		if g == group {
			return true
		}
	}
	return false
}

// Placement is where a request's devices go: all on one host.
type Placement struct {
	Host    string   `json:"host"`
	Devices []Device `json:"devices"`
}

// Share is the part of GPUs the placement holds: 1 per whole GPU, a MIG
// slice's or a vGPU's fraction.
func (p Placement) Share() float64 {
	s := 0.0
	for _, d := range p.Devices {
		s += d.Share
	}
	return s
}

// String is "host/0000:18:00.0 mig 3g.40gb@4, …".
func (p Placement) String() string {
	parts := make([]string, len(p.Devices))
	for i, d := range p.Devices {
		parts[i] = p.Host + "/" + d.String()
	}
	return strings.Join(parts, ", ")
}

// Device is one device of a placement, as the backend is asked to create it.
type Device struct {
	GPU  string   `json:"gpu"` // PCI address of the physical GPU
	Kind gpu.Kind `json:"kind"`
	// Type is the vGPU type (KindVGPU).
	Type string `json:"type,omitempty"`
	// Profile, Start and Size are the MIG GPU instance (KindMIG): the
	// backend creates it at exactly this placement.
	Profile string `json:"profile,omitempty"`
	Start   int    `json:"start"`
	Size    int    `json:"size,omitempty"`
	// Group lists the other GPUs of the IOMMU group that go to the VM with
	// a passthrough GPU.
	Group []string `json:"group,omitempty"`
	// Memory is the framebuffer the device gives, in bytes.
	Memory uint64 `json:"memory"`
	// Share is the part of the GPU it holds.
	Share float64 `json:"share"`
	// SwitchMode is true when the GPU is empty and must change mode first
	// (MIG on or off, or a different vGPU mode).
	SwitchMode bool `json:"switch_mode,omitempty"`
}

func (d Device) String() string {
	switch d.Kind {
	case gpu.KindMIG:
		return fmt.Sprintf("%s mig %s@%d", d.GPU, d.Profile, d.Start)
	case gpu.KindVGPU:
		return fmt.Sprintf("%s vgpu %s", d.GPU, d.Type)
	}
	if len(d.Group) > 0 {
		return fmt.Sprintf("%s passthrough (+%s)", d.GPU, strings.Join(d.Group, ","))
	}
	return d.GPU + " passthrough"
}

// Code classifies why a request waits or is refused.
type Code string

// Reason codes, stable for the API and reports.
const (
	// Waiting.
	CodeNoCapacity  Code = "no_capacity" // no GPU of that kind has room now
	CodeHeld        Code = "held"        // the room there is, is held for a request ahead
	CodeReservation Code = "reservation" // the room there is, is booked for someone else
	CodeDraining    Code = "draining"    // only draining GPUs could take it
	CodeUnavailable Code = "unavailable" // only GPUs no backend can use now could take it
	CodeQuota       Code = "quota"       // the user's or group's quota is used up for now
	CodeWindow      Code = "window"      // a time window forbids it now
	CodePreempting  Code = "preempting"  // preemptible VMs were told to make room
	// Refused at once.
	CodeNever   Code = "never"   // no GPU of the inventory could ever give it
	CodeInvalid Code = "invalid" // the request itself is wrong
)

// Reason says why a request waits or is refused, in words for people.
type Reason struct {
	Code   Code   `json:"code"`
	Detail string `json:"detail"`
}

func (r Reason) String() string {
	if r.Detail == "" {
		return string(r.Code)
	}
	return string(r.Code) + ": " + r.Detail
}

// OK reports whether there is no reason (the request may go).
func (r Reason) OK() bool { return r.Code == "" }

func formatBytes(b uint64) string {
	const gib = 1 << 30
	if b >= gib && b%gib == 0 {
		return fmt.Sprintf("%dGiB", b/gib)
	}
	if b >= gib {
		return fmt.Sprintf("%.1fGiB", float64(b)/gib)
	}
	return fmt.Sprintf("%dMiB", b>>20)
}
