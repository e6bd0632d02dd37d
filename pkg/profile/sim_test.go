//go:build cgo

package profile_test

import (
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/profile"
)

// TestSimPresetsMatch keeps profile's copy of the simulator's presets (used
// to check host { simulate = … } configurations) in step with pkg/host/sim.
func TestSimPresetsMatch(t *testing.T) {
	if got, want := profile.SimulatorPresets(), sim.Presets(); !reflect.DeepEqual(got, want) {
		t.Errorf("profile knows presets %v; pkg/host/sim has %v (update simPresets in pkg/profile/gpus.go)", got, want)
	}
}
