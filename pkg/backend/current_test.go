package backend

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// polled is a Backends that keeps no inventory: every backend is asked.
type polled map[string]Backend

func (p polled) Names() []string { return slices.Sorted(maps.Keys(p)) }

func (p polled) Backend(name string) (Backend, bool) { b, ok := p[name]; return b, ok }

// cached is a Backends that keeps the inventories (as a loader does).
type cached struct {
	polled
	invs map[string]Inventory
}

func (c *cached) Inventories(_ context.Context, names []string) (map[string]Inventory, []error) {
	out := map[string]Inventory{}
	for _, n := range names {
		if inv, ok := c.invs[n]; ok {
			out[n] = inv
		}
	}
	return out, nil
}

func TestCurrentInventories(t *testing.T) {
	calls := 0
	answer := func(name string, err error) Backend {
		return &Mock{InventoryF: func(context.Context) (Inventory, error) {
			calls++
			return Inventory{Backend: name, Host: "asked"}, err
		}}
	}
	backends := polled{"mig": answer("mig", nil), "vgpu": answer("vgpu", errors.New("plugin restarting"))}
	tests := []struct {
		name      string
		bs        Backends
		ask       []string
		wantHosts map[string]string // backend → Inventory.Host
		wantErr   string
		wantCalls int
	}{
		{name: "polled: every backend asked", bs: backends, ask: []string{"vgpu", "mig", "passthrough"},
			wantHosts: map[string]string{"mig": "asked"}, wantErr: "inventory of vgpu: plugin restarting", wantCalls: 2},
		{name: "cached: no backend asked", bs: &cached{polled: backends, invs: map[string]Inventory{"mig": {Host: "pushed"}, "vgpu": {Host: "pushed"}}},
			ask: []string{"mig", "vgpu"}, wantHosts: map[string]string{"mig": "pushed", "vgpu": "pushed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls = 0
			invs, errs := CurrentInventories(context.Background(), tc.bs, tc.ask)
			got := map[string]string{}
			for n, inv := range invs {
				got[n] = inv.Host
			}
			if !maps.Equal(got, tc.wantHosts) {
				t.Errorf("inventories %v, want %v", got, tc.wantHosts)
			}
			if joined := errors.Join(errs...); (tc.wantErr == "") != (joined == nil) || joined != nil && !strings.Contains(joined.Error(), tc.wantErr) {
				t.Errorf("errors %v, want %q", errs, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("%d Inventory calls, want %d", calls, tc.wantCalls)
			}
		})
	}
}
