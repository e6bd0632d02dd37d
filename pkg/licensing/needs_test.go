package licensing

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestNeedOf(t *testing.T) {
	for _, tc := range []struct {
		kind     gpu.Kind
		typ      string
		products []string
		driver   string
		why      string
	}{
		{gpu.KindMIG, "", []string{ProductAIEnterprise}, DriverVGPUGuest, "NVIDIA AI Enterprise since vGPU 18"},
		{gpu.KindVGPU, "A100-3-20C", []string{ProductAIEnterprise}, DriverVGPUGuest, "MIG-backed vGPU (A100-3-20C)"},
		{gpu.KindVGPU, "H100-4C", []string{ProductVCS, ProductAIEnterprise}, DriverVGPUGuest, "C-series"},
		{gpu.KindVGPU, "L40S-12Q", []string{ProductVWS}, DriverVGPUGuest, "Q-series"},
		{gpu.KindVGPU, "A40-2B", []string{ProductVPC, ProductVWS}, DriverVGPUGuest, "B-series"},
		{gpu.KindVGPU, "A40-4A", []string{ProductVApps}, DriverVGPUGuest, "A-series"},
		{gpu.KindVGPU, "not a type", []string{ProductAIEnterprise, ProductVCS, ProductVWS, ProductVPC}, DriverVGPUGuest, "follows its series"},
		{gpu.KindPassthrough, "", nil, DriverDataCenter, "data-center driver"},
	} {
		n := NeedOf(tc.kind, tc.typ)
		if !slices.Equal(n.Products, tc.products) || n.Driver != tc.driver || !strings.Contains(n.Why, tc.why) {
			t.Errorf("NeedOf(%s, %q) = %+v, want %q, %q, why with %q", tc.kind, tc.typ, n, tc.products, tc.driver, tc.why)
		}
		if !strings.HasPrefix(n.Source, "https://docs.nvidia.com/") {
			t.Errorf("NeedOf(%s, %q): source %q is not NVIDIA's documentation", tc.kind, tc.typ, n.Source)
		}
		if n.Licensed() != (len(tc.products) > 0) || !strings.Contains(n.String(), tc.why) {
			t.Errorf("NeedOf(%s, %q): %q", tc.kind, tc.typ, n.String())
		}
	}
	if got := NeedsOf("", "", nil); got != nil {
		t.Errorf("no GPU needs %+v", got)
	}
	got := NeedsOf(gpu.KindAny, "", []gpu.Kind{gpu.KindMIG, gpu.KindPassthrough})
	if len(got) != 2 || got[0].Kind != gpu.KindMIG || got[1].Licensed() {
		t.Errorf("an abstract need: %+v", got)
	}
}
