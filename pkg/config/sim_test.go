//go:build cgo

package config_test

import (
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// TestSimPresetsMatch keeps profile's copy of the simulator's presets (used
// to check host { simulate = … } configurations) in step with pkg/host/sim.
func TestSimPresetsMatch(t *testing.T) {
	if got, want := config.SimulatorPresets(), sim.Presets(); !reflect.DeepEqual(got, want) {
		t.Errorf("profile knows presets %v; pkg/host/sim has %v (update simPresets in pkg/config/gpus.go)", got, want)
	}
}
