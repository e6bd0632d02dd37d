package gpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Series is the last letter of a vGPU type name: what licence and workload the
// type is for.
type Series byte

// vGPU series (REFERENCE.md §2).
const (
	SeriesQ Series = 'Q' // virtual workstation (rendering)
	SeriesB Series = 'B' // virtual desktop
	SeriesA Series = 'A' // virtual applications
	SeriesC Series = 'C' // compute
)

// VGPUType is a parsed vGPU type name.
type VGPUType struct {
	Name   string // canonical: "L40S-12Q", "A100-3-20C"
	Board  string // "L40S", "A100"
	Slices int    // MIG compute slices for MIG-backed types; 0 for time-sliced
	// Memory is the framebuffer in bytes; "0Q" types have 512 MiB.
	Memory uint64
	Series Series
	// Variant is the suffix after the series of MIG-backed types: "ME",
	// "NOME", "MEALL", "GFX", or "".
	Variant string
}

// MIGBacked reports whether the type runs on a MIG GPU instance.
func (t VGPUType) MIGBacked() bool { return t.Slices > 0 }

// SizeGB is the framebuffer in the name's units (0 for 512 MiB types).
func (t VGPUType) SizeGB() int { return int(t.Memory / GiB) }

var typeNameRE = regexp.MustCompile(`^([A-Za-z0-9]+(?:-[A-Za-z][A-Za-z0-9]*)?)-(?:([1-8])-)?([0-9]+)([QBAC])(ME|NOME|MEALL|GFX)?$`)

// ParseVGPUType parses a vGPU type name as people write it: time-sliced
// `<board>-<GB><series>` ("A40-8Q", "M60-0Q") or MIG-backed
// `<board>-<slices>-<GB><series>[ME|NOME|MEALL|GFX]` ("A100-3-20C"). The
// "GRID " and "NVIDIA " prefixes that sysfs and the driver print are accepted.
func ParseVGPUType(s string) (VGPUType, error) {
	raw := strings.TrimSpace(s)
	name := strings.TrimPrefix(strings.TrimPrefix(raw, "GRID "), "NVIDIA ")
	name = strings.ToUpper(name)
	m := typeNameRE.FindStringSubmatch(name)
	if m == nil {
		return VGPUType{}, fmt.Errorf("vGPU type %q: not of the form BOARD-<GB><Q|B|A|C> (e.g. L40S-12Q) or BOARD-<slices>-<GB>C (e.g. A100-3-20C)", raw)
	}
	t := VGPUType{Board: m[1], Series: Series(m[4][0]), Variant: m[5]}
	if m[2] != "" {
		t.Slices, _ = strconv.Atoi(m[2])
	}
	gb, err := strconv.Atoi(m[3])
	if err != nil || gb > 1024 {
		return VGPUType{}, fmt.Errorf("vGPU type %q: framebuffer %q is not a size in GB", raw, m[3])
	}
	if gb == 0 {
		t.Memory = 512 << 20
	} else {
		t.Memory = uint64(gb) * GiB
	}
	if t.Variant != "" && t.Slices == 0 {
		return VGPUType{}, fmt.Errorf("vGPU type %q: suffix %s exists only on MIG-backed types", raw, t.Variant)
	}
	t.Name = fmt.Sprintf("%s-%d%c%s", t.Board, gb, t.Series, t.Variant)
	if t.Slices > 0 {
		t.Name = fmt.Sprintf("%s-%d-%d%c%s", t.Board, t.Slices, gb, t.Series, t.Variant)
	}
	return t, nil
}

// VGPUTypeInfo is a type a board offers, with its per-GPU limit.
type VGPUTypeInfo struct {
	VGPUType
	MaxInstances int
	// MIGProfile names the GPU-instance profile a MIG-backed type runs on.
	MIGProfile string
}

// VGPUTypes lists the vGPU types NVIDIA's vGPU software offers on the board:
// time-sliced Q, B, A and C types and, on MIG boards, the MIG-backed C types.
// The limits follow NVIDIA's rule (framebuffer / size, capped by MaxVGPUs).
func (m Model) VGPUTypes() []VGPUTypeInfo {
	if !m.VGPU || m.Board == "" {
		return nil
	}
	gb := m.GB()
	var out []VGPUTypeInfo
	add := func(series Series, size int) {
		if size > gb || size <= 0 {
			return
		}
		n := gb / size
		if n > m.MaxVGPUs {
			n = m.MaxVGPUs
		}
		t, err := ParseVGPUType(fmt.Sprintf("%s-%d%c", m.Board, size, series))
		if err == nil {
			out = append(out, VGPUTypeInfo{VGPUType: t, MaxInstances: n})
		}
	}
	sizes := divisorSizes(gb)
	if m.MIG == nil { // graphics boards: workstation, desktop and app types
		for _, s := range sizes {
			add(SeriesQ, s)
		}
		add(SeriesB, 1)
		add(SeriesB, 2)
		for _, s := range sizes {
			add(SeriesA, s)
		}
	}
	for _, s := range sizes {
		if s >= 4 {
			add(SeriesC, s)
		}
	}
	if m.MIG != nil {
		for _, p := range m.MIG.Profiles {
			name := fmt.Sprintf("%s-%d-%dC", m.Board, p.Compute, p.MemoryGB)
			if p.Media != "" {
				name += "ME"
			}
			t, err := ParseVGPUType(name)
			if err != nil {
				continue
			}
			// Two profiles of the same compute and memory (1g.10gb vs the
			// double-memory 1g) never collide: their GB differs.
			out = append(out, VGPUTypeInfo{VGPUType: t, MaxInstances: p.Max, MIGProfile: p.Name})
		}
	}
	return out
}

// VGPUType finds one of the board's types by name.
func (m Model) VGPUType(name string) (VGPUTypeInfo, error) {
	t, err := ParseVGPUType(name)
	if err != nil {
		return VGPUTypeInfo{}, err
	}
	for _, x := range m.VGPUTypes() {
		if x.Name == t.Name {
			return x, nil
		}
	}
	if !strings.EqualFold(t.Board, m.Board) {
		return VGPUTypeInfo{}, fmt.Errorf("vGPU type %s is for board %s, not %s (%s types start with %q)", t.Name, t.Board, m.Name, m.Name, m.Board+"-")
	}
	return VGPUTypeInfo{}, fmt.Errorf("vGPU type %s does not exist on %s", t.Name, m.Name)
}

// divisorSizes are the framebuffer sizes NVIDIA cuts a board into: every GB
// size that divides the board's memory, at most 1/1.
func divisorSizes(gb int) []int {
	var out []int
	for s := 1; s <= gb; s++ {
		if gb%s == 0 {
			out = append(out, s)
		}
	}
	return out
}
