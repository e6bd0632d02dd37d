package scheduler

import (
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestFitter(t *testing.T) {
	hold := func(id string, start int) []Hold {
		return []Hold{{ID: id, Code: CodeReservation, Host: "a", From: t0.Add(-time.Hour), To: t0.Add(100 * time.Hour),
			Devices: []Device{{GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: start}}}}
	}
	need := Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}
	for name, c := range map[string]struct {
		sets      [][]Hold
		ok        bool
		wantStart int
	}{
		"no other booking":              {[][]Hold{nil}, true, 4},
		"one set: the other half":       {[][]Hold{hold("x", 4)}, true, 0},
		"two sets, each half, together": {[][]Hold{hold("x", 4), hold("y", 0)}, false, 0},
		"two sets, the same half":       {[][]Hold{hold("x", 4), hold("y", 4)}, true, 0},
	} {
		t.Run(name, func(t *testing.T) {
			inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
			f := Fitter{Need: need, First: t0, Last: t0.Add(2 * time.Hour), Sets: c.sets}
			p, why := f.Place(inv, nil)
			if why.OK() != c.ok {
				t.Fatalf("Place = %+v, %v; want ok %v", p, why, c.ok)
			}
			if c.ok && (len(p.Devices) != 1 || p.Devices[0].Start != c.wantStart) {
				t.Errorf("placed %+v, want start %d", p.Devices, c.wantStart)
			}
			if len(inv.Allocations()) != 0 {
				t.Errorf("Place left %v on the inventory", inv.Allocations())
			}
			if c.ok {
				if !f.Fits(inv, "vm", p) || len(inv.Allocations()) != 1 {
					t.Errorf("Fits refused its own placement (%v)", inv.Allocations())
				}
			}
		})
	}
}
