package sim

import (
	"strconv"
	"testing"
)

// BenchmarkWriteVendorVF measures one simulated sysfs write (a vGPU created
// and deleted through current_vgpu_type) on the largest preset.
func BenchmarkWriteVendorVF(b *testing.B) {
	h, err := Open(b.TempDir(), "h100x8")
	if err != nil {
		b.Fatal(err)
	}
	vf := "bus/pci/devices/0000:9a:00.4/nvidia/current_vgpu_type"
	st := boardTypes(h.mustGPU(b, "0000:9a:00.0").model())[0]
	id := []byte(strconv.Itoa(st.VFIOID))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.WriteFile(vf, id); err != nil {
			b.Fatal(err)
		}
		if err := h.WriteFile(vf, []byte("0")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadCached measures a read when the state did not change.
func BenchmarkReadCached(b *testing.B) {
	h, err := Open(b.TempDir(), "a100x4")
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := h.ReadFile("bus/pci/devices/0000:17:00.4/mdev_supported_types/nvidia-640/available_instances"); err != nil {
			b.Fatal(err)
		}
	}
}

func (h *Host) mustGPU(b *testing.B, addr string) *gpuState {
	s, _, err := h.st.read()
	if err != nil {
		b.Fatal(err)
	}
	return s.gpu(addr)
}
