package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseVGPUType(t *testing.T) {
	tests := []struct {
		in      string
		want    VGPUType
		wantErr string
	}{
		{in: "L40S-12Q", want: VGPUType{Name: "L40S-12Q", Board: "L40S", Memory: 12 * GiB, Series: SeriesQ}},
		{in: "GRID A40-8Q", want: VGPUType{Name: "A40-8Q", Board: "A40", Memory: 8 * GiB, Series: SeriesQ}},
		{in: "NVIDIA L40S-1B", want: VGPUType{Name: "L40S-1B", Board: "L40S", Memory: GiB, Series: SeriesB}},
		{in: "M60-0Q", want: VGPUType{Name: "M60-0Q", Board: "M60", Memory: 512 << 20, Series: SeriesQ}},
		{in: "a100-3-20c", want: VGPUType{Name: "A100-3-20C", Board: "A100", Slices: 3, Memory: 20 * GiB, Series: SeriesC}},
		{in: "A100-1-5CME", want: VGPUType{Name: "A100-1-5CME", Board: "A100", Slices: 1, Memory: 5 * GiB, Series: SeriesC, Variant: "ME"}},
		{in: "RTX6000-Ada-8Q", want: VGPUType{Name: "RTX6000-ADA-8Q", Board: "RTX6000-ADA", Memory: 8 * GiB, Series: SeriesQ}},
		{in: "L40S-12X", wantErr: "not of the form"},
		{in: "L40S", wantErr: "not of the form"},
		{in: "", wantErr: "not of the form"},
		{in: "A40-8QME", wantErr: "only on MIG-backed"},
		{in: "A40-99999Q", wantErr: "not a size"},
		{in: "../../x-1Q", wantErr: "not of the form"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseVGPUType(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseVGPUType(f *testing.F) {
	for _, s := range []string{"L40S-12Q", "A100-3-20C", "GRID A40-8Q", "M60-0Q", "A100-1-5CME", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVGPUType(s)
		if err != nil {
			return
		}
		again, err := ParseVGPUType(v.Name)
		if err != nil || again != v {
			t.Fatalf("canonical name %q does not round-trip: %+v vs %+v (%v)", v.Name, again, v, err)
		}
	})
}

func TestModels(t *testing.T) {
	seen := map[uint16]bool{}
	for _, m := range Models() {
		if seen[m.DeviceID] {
			t.Errorf("device ID %04x listed twice", m.DeviceID)
		}
		seen[m.DeviceID] = true
		if m.VGPU && m.Board == "" {
			t.Errorf("%s supports vGPU but has no board name", m.Name)
		}
		for _, vt := range m.VGPUTypes() {
			if vt.MaxInstances < 1 {
				t.Errorf("%s: %s has max %d", m.Name, vt.Name, vt.MaxInstances)
			}
			if got, err := m.VGPUType(vt.Name); err != nil || got.Name != vt.Name {
				t.Errorf("%s: VGPUType(%s) = %v, %v", m.Name, vt.Name, got.Name, err)
			}
		}
	}
	a40, _ := ModelByID(0x2235)
	if a40.Interface() != InterfaceMdev || !a40.MdevOnVFs() {
		t.Errorf("A40: interface %s, on VFs %v", a40.Interface(), a40.MdevOnVFs())
	}
	l40s, _ := ModelByID(0x26b9)
	if l40s.Interface() != InterfaceVendorVFIO {
		t.Errorf("L40S interface %s", l40s.Interface())
	}
	if _, err := l40s.VGPUType("A40-8Q"); err == nil || !strings.Contains(err.Error(), `start with "L40S-"`) {
		t.Errorf("foreign board type error: %v", err)
	}
	if vt, err := a40.VGPUType("A40-8Q"); err != nil || vt.MaxInstances != 6 {
		t.Errorf("A40-8Q max = %d, %v (REFERENCE.md: 6)", vt.MaxInstances, err)
	}
	if vt, _ := l40s.VGPUType("L40S-12Q"); vt.MaxInstances != 4 {
		t.Errorf("L40S-12Q max = %d (REFERENCE.md: 4)", vt.MaxInstances)
	}
	h100, _ := ModelByID(0x2331)
	if vt, err := h100.VGPUType("H100-3-40C"); err != nil || vt.MaxInstances != 2 || vt.MIGProfile != "3g.40gb" {
		t.Errorf("H100-3-40C = %+v, %v", vt, err)
	}
	if m, ok := ModelByName("l40s"); !ok || m.DeviceID != 0x26b9 {
		t.Errorf("ModelByName(l40s) = %v %v", m.Name, ok)
	}
	if !h100.MatchesName("H100") {
		t.Error("H100 PCIe does not match family H100")
	}
}

// The placement tables of REFERENCE.md §3.
func TestMIGTables(t *testing.T) {
	want := map[string][]int{"1g.10gb": {0, 1, 2, 3, 4, 5, 6}, "1g.20gb": {0, 2, 4, 6}, "2g.20gb": {0, 2, 4}, "3g.40gb": {0, 4}, "4g.40gb": {0}, "7g.80gb": {0}}
	for name, starts := range want {
		p, ok := MIG80GB.Profile(name)
		if !ok || !reflect.DeepEqual(p.Starts, starts) {
			t.Errorf("%s: %v %v, want starts %v", name, ok, p.Starts, starts)
		}
	}
	for _, tb := range []*MIGTable{&MIGA100_40GB, &MIG80GB, &MIGH200, &MIGB200, &MIGH100NVL, &MIGA30} {
		for _, p := range tb.Profiles {
			for _, s := range p.Starts {
				if s+p.Size > tb.Slices {
					t.Errorf("%s at %d runs past slice %d", p.Name, s, tb.Slices)
				}
			}
		}
	}
}

func TestCanPlace(t *testing.T) {
	tb := &MIG80GB
	p := func(n string) MIGProfile { x, _ := tb.Profile(n); return x }
	at := func(n string, s int) Instance { return Instance{Profile: p(n), Start: s} }
	tests := []struct {
		name     string
		existing []Instance
		profile  string
		start    int
		wantErr  string
	}{
		{"empty GPU takes 7g", nil, "7g.80gb", 0, ""},
		{"3g at a forbidden slot", nil, "3g.40gb", 2, "cannot start at memory slice 2"},
		{"overlap", []Instance{at("3g.40gb", 4)}, "1g.10gb", 5, "overlaps"},
		{"beside", []Instance{at("3g.40gb", 4)}, "3g.40gb", 0, ""},
		{"instance limit", []Instance{at("4g.40gb", 0)}, "4g.40gb", 0, "overlaps"},
		{"one media instance", []Instance{at("1g.10gb+me", 0)}, "1g.10gb+me", 1, "at most 1 instances"},
		// REFERENCE.md §3: 1g at 0 and 4 leave no room for a 3g; at 1 and 2 a 3g at 4 fits.
		{"fragmented", []Instance{at("1g.10gb", 0), at("1g.10gb", 4)}, "3g.40gb", 4, "overlaps"},
		{"packed", []Instance{at("1g.10gb", 1), at("1g.10gb", 2)}, "3g.40gb", 4, ""},
		{"slice 7 via 1g.20gb@6", []Instance{at("3g.40gb", 0), at("2g.20gb", 4)}, "1g.20gb", 6, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tb.CanPlace(tc.existing, p(tc.profile), tc.start)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("CanPlace = %v, want %q", err, tc.wantErr)
			}
		})
	}
	seven := []Instance{}
	for s := 0; s < 7; s++ {
		seven = append(seven, at("1g.10gb", s))
	}
	if got := tb.FreeStarts(seven, p("1g.20gb")); len(got) != 0 {
		t.Errorf("seven 1g leave %v for 1g.20gb; memory slice 7 alone is idle by construction", got)
	}
	if got := tb.FreeStarts(seven, p("1g.10gb")); len(got) != 0 {
		t.Errorf("an eighth 1g fits at %v", got)
	}
}
