package hypervisor

import (
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

func TestHostdevFromBackend(t *testing.T) {
	tests := []struct {
		name string
		in   backend.Hostdev
		want domain.Hostdev
	}{
		{"mdev with display", backend.Hostdev{Type: backend.HostdevMdev, UUID: "b3c4d5e6-f7a8-4b9c-8d0e-1f2a3b4c5d6e", Display: true},
			domain.Hostdev{Type: domain.HostdevMdev, UUID: "b3c4d5e6-f7a8-4b9c-8d0e-1f2a3b4c5d6e", Display: true}},
		{"vendor VFIO VF", backend.Hostdev{Type: backend.HostdevPCI, Addresses: []string{"0000:41:00.4"}},
			domain.Hostdev{Type: domain.HostdevPCI, Addresses: []string{"0000:41:00.4"}}},
		{"passthrough", backend.Hostdev{Type: backend.HostdevPCI, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}, Managed: true},
			domain.Hostdev{Type: domain.HostdevPCI, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}, Managed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HostdevFromBackend(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("= %+v, want %+v", got, tt.want)
			}
			// It makes a valid domain.
			s := gpuSpec(t, kindNone)
			s.Hostdevs = []domain.Hostdev{got}
			if err := domain.Validate(s); err != nil {
				t.Error(err)
			}
		})
	}
	// The two types name hostdevs with the same words.
	if string(backend.HostdevMdev) != string(domain.HostdevMdev) || string(backend.HostdevPCI) != string(domain.HostdevPCI) {
		t.Error("backend and domain hostdev types differ")
	}
}
