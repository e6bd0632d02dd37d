package heartbeat

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// fixedInventory is a host of one GPU.
func fixedInventory(context.Context) gpu.HostInventory {
	return gpu.HostInventory{GPUs: []gpu.HostGPU{{Address: "0000:01:00.0", Mode: "idle"}}}
}

func TestRegisterAndPublish(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish func(gpu.HostInventory) any
		want    string // a key of the stored JSON
	}{
		{"inventory as it is", nil, "gpus"},
		{"published", func(hi gpu.HostInventory) any {
			return struct {
				gpu.HostInventory
				Extra int `json:"extra"`
			}{hi, 1}
		}, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.New(t)
			ctx := context.Background()
			b := &Beater{Store: st, Inventory: fixedInventory, Host: "h1", APIURL: "http://h1:8080", Version: "1.2.3", Publish: tc.publish}
			if err := b.Register(ctx); err != nil {
				t.Fatal(err)
			}
			row, err := st.GetHost(ctx, "h1")
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(row.Inventory), &got); err != nil {
				t.Fatal(err)
			}
			if _, ok := got[tc.want]; !ok || row.State != store.HostUp || row.Version != "1.2.3" || row.APIURL != "http://h1:8080" {
				t.Errorf("registered %+v, inventory %v (want key %q)", row, got, tc.want)
			}
		})
	}
}

// Run beats until its context ends.
func TestRun(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st := storetest.New(t, storetest.WithClock(clock.Now))
	b := &Beater{Store: st, Inventory: fixedInventory, Host: "h1", Every: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Register(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := st.GetHost(ctx, "h1")
	clock.Advance(time.Minute)
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := st.GetHost(ctx, "h1")
		if err == nil && h.HeartbeatAt.After(first.HeartbeatAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat: %+v %v", h, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}
