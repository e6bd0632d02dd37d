package main

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// go-nvml's DGX A100 mock carries NVIDIA's real A100 40GB profile table: the
// NVML profile indices gpuvm uses must give the IDs of REFERENCE.md §3, and
// instances made at a placement must read back at it.
func TestListGIsAgainstNVMLMock(t *testing.T) {
	server := dgxa100.New()
	dev, ret := server.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	table := &gpu.MIGA100_40GB
	for _, p := range table.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(p.NVMLProfile)
		if ret != nvml.SUCCESS {
			t.Fatalf("%s: %v", p.Name, ret)
		}
		if int(info.SliceCount) != p.Compute || int(info.InstanceCount) != p.Max {
			t.Errorf("%s: NVML mock says %d slices, max %d; table says %d slices, max %d",
				p.Name, info.SliceCount, info.InstanceCount, p.Compute, p.Max)
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			t.Fatalf("%s placements: %v", p.Name, ret)
		}
		var starts []int
		for _, pl := range placements {
			starts = append(starts, int(pl.Start))
			if int(pl.Size) != p.Size {
				t.Errorf("%s: NVML mock size %d, table %d", p.Name, pl.Size, p.Size)
			}
		}
		if fmt.Sprint(starts) != fmt.Sprint(p.Starts) {
			t.Errorf("%s: NVML mock placements %v, table %v", p.Name, starts, p.Starts)
		}
	}
	make := func(name string, start int) {
		p, _ := table.Profile(name)
		info, _ := dev.GetGpuInstanceProfileInfo(p.NVMLProfile)
		if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Size)}); ret != nvml.SUCCESS {
			t.Fatalf("create %s@%d: %v", name, start, ret)
		}
	}
	make("3g.20gb", 4)
	make("1g.5gb", 1)
	gis, err := listGIs(dev, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(gis) != 2 || gis[0].profile.Name != "1g.5gb" || gis[0].start != 1 || gis[1].profile.Name != "3g.20gb" || gis[1].start != 4 {
		t.Fatalf("listGIs = %+v", gis)
	}
	m := &migGPU{gis: gis}
	p2, _ := table.Profile("2g.10gb")
	if got := table.FreeStarts(m.instances(), p2); len(got) != 1 || got[0] != 2 {
		t.Errorf("2g free starts beside 1g@1 and 3g@4 = %v, want [2]", got)
	}
}

func TestMigType(t *testing.T) {
	h100, _ := gpu.ModelByID(0x2331)
	p3, _ := h100.MIG.Profile("3g.40gb")
	tests := []struct {
		asked, want string
		wantErr     bool
	}{
		{"", "H100-3-40C", false},
		{"H100-3-40C", "H100-3-40C", false},
		{"H100-2-20C", "", true}, // another profile's type
		{"H100-40C", "", true},   // time-sliced
		{"L40S-12Q", "", true},   // another board
	}
	for _, tc := range tests {
		got, err := migType(h100, p3, tc.asked)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("migType(%q) = %q, %v", tc.asked, got, err)
		}
	}
}
