package gpu

import (
	"fmt"
	"sort"
	"strings"
)

// MemorySlices is the length of the MIG memory-slice axis on every MIG board
// with 8 slices (A100, H100, H200, B200); the A30 has 4.
const MemorySlices = 8

// MIGProfile is one GPU-instance profile of a board (REFERENCE.md §3).
type MIGProfile struct {
	Name string // "3g.40gb", "1g.10gb+me"
	// ID is the profile ID nvidia-smi shows (`nvidia-smi mig -lgip`).
	ID int
	// NVMLProfile is the NVML profile index (nvml.GPU_INSTANCE_PROFILE_*) that
	// DeviceGetGpuInstanceProfileInfo takes.
	NVMLProfile int
	Compute     int    // compute slices (the "Ng")
	Size        int    // memory slices taken on the placement axis
	MemoryGB    int    // as in the name
	Max         int    // instances per GPU
	Starts      []int  // allowed start slots on the memory axis
	Media       string // "", "+me"
}

// NVML GPU-instance profile indices (nvml.GPU_INSTANCE_PROFILE_*), repeated here
// so that this package stays free of cgo.
const (
	nvmlProfile1Slice     = 0
	nvmlProfile2Slice     = 1
	nvmlProfile3Slice     = 2
	nvmlProfile4Slice     = 3
	nvmlProfile7Slice     = 4
	nvmlProfile1SliceRev1 = 7
	nvmlProfile1SliceRev2 = 9
)

// MIGTable is the set of GPU-instance profiles of one board.
type MIGTable struct {
	Slices   int // memory slices on the placement axis
	Compute  int // compute slices
	Profiles []MIGProfile
}

func migTable(mem1g, mem2g, mem3g, mem4g, mem7g int) MIGTable {
	return MIGTable{Slices: 8, Compute: 7, Profiles: []MIGProfile{
		{Name: fmt.Sprintf("1g.%dgb", mem1g), ID: 19, NVMLProfile: nvmlProfile1Slice, Compute: 1, Size: 1, MemoryGB: mem1g, Max: 7, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: fmt.Sprintf("1g.%dgb+me", mem1g), ID: 20, NVMLProfile: nvmlProfile1SliceRev1, Compute: 1, Size: 1, MemoryGB: mem1g, Max: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}, Media: "+me"},
		{Name: fmt.Sprintf("1g.%dgb", mem2g), ID: 15, NVMLProfile: nvmlProfile1SliceRev2, Compute: 1, Size: 2, MemoryGB: mem2g, Max: 4, Starts: []int{0, 2, 4, 6}},
		{Name: fmt.Sprintf("2g.%dgb", mem2g), ID: 14, NVMLProfile: nvmlProfile2Slice, Compute: 2, Size: 2, MemoryGB: mem2g, Max: 3, Starts: []int{0, 2, 4}},
		{Name: fmt.Sprintf("3g.%dgb", mem3g), ID: 9, NVMLProfile: nvmlProfile3Slice, Compute: 3, Size: 4, MemoryGB: mem3g, Max: 2, Starts: []int{0, 4}},
		{Name: fmt.Sprintf("4g.%dgb", mem4g), ID: 5, NVMLProfile: nvmlProfile4Slice, Compute: 4, Size: 4, MemoryGB: mem4g, Max: 1, Starts: []int{0}},
		{Name: fmt.Sprintf("7g.%dgb", mem7g), ID: 0, NVMLProfile: nvmlProfile7Slice, Compute: 7, Size: 8, MemoryGB: mem7g, Max: 1, Starts: []int{0}},
	}}
}

// The MIG tables of REFERENCE.md §3.
var (
	MIGA100_40GB = migTable(5, 10, 20, 20, 40)
	MIG80GB      = migTable(10, 20, 40, 40, 80) // A100 80GB, H100 80GB
	MIGH100NVL   = migTable(12, 24, 47, 47, 94)
	MIGH200      = migTable(18, 35, 71, 71, 141)
	MIGB200      = migTable(23, 45, 90, 90, 180)
	// MIGA30 has 4 memory and 4 compute slices.
	MIGA30 = MIGTable{Slices: 4, Compute: 4, Profiles: []MIGProfile{
		{Name: "1g.6gb", ID: 14, NVMLProfile: nvmlProfile1Slice, Compute: 1, Size: 1, MemoryGB: 6, Max: 4, Starts: []int{0, 1, 2, 3}},
		{Name: "1g.6gb+me", ID: 21, NVMLProfile: nvmlProfile1SliceRev1, Compute: 1, Size: 1, MemoryGB: 6, Max: 1, Starts: []int{0, 1, 2, 3}, Media: "+me"},
		{Name: "2g.12gb", ID: 5, NVMLProfile: nvmlProfile2Slice, Compute: 2, Size: 2, MemoryGB: 12, Max: 2, Starts: []int{0, 2}},
		{Name: "4g.24gb", ID: 0, NVMLProfile: nvmlProfile4Slice, Compute: 4, Size: 4, MemoryGB: 24, Max: 1, Starts: []int{0}},
	}}
)

// Profile finds a profile by name ("3g.40gb"), case-insensitively.
func (t *MIGTable) Profile(name string) (MIGProfile, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, p := range t.Profiles {
		if p.Name == n {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileByID finds a profile by its nvidia-smi ID.
func (t *MIGTable) ProfileByID(id int) (MIGProfile, bool) {
	for _, p := range t.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileNames lists the table's profile names, for messages.
func (t *MIGTable) ProfileNames() []string {
	names := make([]string, len(t.Profiles))
	for i, p := range t.Profiles {
		names[i] = p.Name
	}
	return names
}

// Instance is a placed GPU instance: a profile at a start slot.
type Instance struct {
	Profile MIGProfile
	Start   int
}

// End is one past the last memory slice the instance covers.
func (i Instance) End() int { return i.Start + i.Profile.Size }

// Overlaps reports whether two placed instances share a memory slice.
func (i Instance) Overlaps(o Instance) bool { return i.Start < o.End() && o.Start < i.End() }

// CanPlace reports whether profile p can be created at start on a GPU that
// already holds existing, and if not, why. It applies the placement table, the
// per-profile instance limit and the compute-slice budget.
func (t *MIGTable) CanPlace(existing []Instance, p MIGProfile, start int) error {
	allowed := false
	for _, s := range p.Starts {
		if s == start {
			allowed = true
		}
	}
	if !allowed {
		return fmt.Errorf("profile %s cannot start at memory slice %d (allowed: %s)", p.Name, start, FormatStarts(p.Starts))
	}
	n := Instance{Profile: p, Start: start}
	compute, count, media := 0, 0, 0
	for _, e := range existing {
		if e.Overlaps(n) {
			return fmt.Errorf("placement %d:%d overlaps GPU instance %s at %d:%d", start, p.Size, e.Profile.Name, e.Start, e.Profile.Size)
		}
		compute += e.Profile.Compute
		if e.Profile.ID == p.ID {
			count++
		}
		if e.Profile.Media != "" {
			media++
		}
	}
	if count >= p.Max {
		return fmt.Errorf("profile %s allows at most %d instances per GPU", p.Name, p.Max)
	}
	if p.Media != "" && media > 0 {
		return fmt.Errorf("profile %s needs the GPU's media engines, which another instance holds", p.Name)
	}
	if compute+p.Compute > t.Compute {
		return fmt.Errorf("profile %s needs %d compute slices; %d of %d are free", p.Name, p.Compute, t.Compute-compute, t.Compute)
	}
	return nil
}

// FreeStarts returns the start slots at which p can be created now, ascending.
func (t *MIGTable) FreeStarts(existing []Instance, p MIGProfile) []int {
	var out []int
	for _, s := range p.Starts {
		if t.CanPlace(existing, p, s) == nil {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out
}

// FormatStarts writes start slots as nvidia-smi does: "{0,4}".
func FormatStarts(starts []int) string {
	parts := make([]string, len(starts))
	for i, s := range starts {
		parts[i] = fmt.Sprint(s)
	}
	return "{" + strings.Join(parts, ",") + "}"
}
