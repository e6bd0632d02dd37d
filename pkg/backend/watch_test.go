package backend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// hostModel is a host whose devices a Mock creates and removes, and that a
// test may change behind the backend's back.
type hostModel struct {
	mu      sync.Mutex
	devices []string
}

func (h *hostModel) add(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devices = append(h.devices, id)
}

func (h *hostModel) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devices = slices.DeleteFunc(h.devices, func(d string) bool { return d == id })
}

func (h *hostModel) mock() *Mock {
	return &Mock{
		InventoryF: func(context.Context) (Inventory, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			inv := Inventory{Backend: "vgpu", GPUs: []GPU{{Address: "0000:41:00.0"}}}
			for _, d := range h.devices {
				inv.Devices = append(inv.Devices, Device{ID: d, GPU: "0000:41:00.0", Kind: gpu.KindVGPU})
			}
			return inv, nil
		},
		CreateF: func(_ context.Context, r CreateRequest) (Device, error) {
			if r.DeviceUUID == "full" {
				return Device{}, Errorf(CodeExhausted, r.GPU, "no capacity left")
			}
			h.add(r.DeviceUUID)
			return Device{ID: r.DeviceUUID, GPU: r.GPU, Kind: gpu.KindVGPU}, nil
		},
		RemoveF: func(_ context.Context, r RemoveRequest) error {
			h.remove(r.ID)
			return nil
		},
	}
}

// pushes collects what a WatchInventory stream sends.
type pushes struct {
	mu   sync.Mutex
	got  []pushed
	wake chan struct{}
}

type pushed struct {
	inv     Inventory
	changes uint64
}

func newPushes() *pushes { return &pushes{wake: make(chan struct{}, 1)} }

func (p *pushes) add(inv Inventory, changes uint64) {
	p.mu.Lock()
	p.got = append(p.got, pushed{inv, changes})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// waitFor waits (30s at most) for a push that satisfies ok.
func (p *pushes) waitFor(t *testing.T, what string, ok func(pushed) bool) pushed {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		for _, x := range p.got {
			if ok(x) {
				p.mu.Unlock()
				return x
			}
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-deadline:
			t.Fatalf("no push %s; got %+v", what, p.got)
		}
	}
}

func devicesOf(inv Inventory) []string {
	var ids []string
	for _, d := range inv.Devices {
		ids = append(ids, d.ID)
	}
	return ids
}

// The stream sends the inventory at once, then one read after every
// Create and Remove (failed ones too) that covers its change count, and a
// change behind the backend's back at the next resync.
func TestWatchInventory(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // after the connection's cleanup
	host := &hostModel{}
	b, _ := connect(t, host.mock())
	w := b.(InventoryWatcher)
	ctx, cancel := context.WithCancel(t.Context())
	p := newPushes()
	done := make(chan error, 1)
	go func() { done <- w.WatchInventory(ctx, WatchOptions{Resync: 50 * time.Millisecond, Settle: -1}, p.add) }()

	p.waitFor(t, "at once", func(x pushed) bool { return x.changes == 0 && len(x.inv.GPUs) == 1 })
	if n := w.InventoryChanges(); n != 0 {
		t.Fatalf("InventoryChanges before any Create = %d", n)
	}

	if _, err := b.Create(ctx, CreateRequest{GPU: "0000:41:00.0", DeviceUUID: "dev-a"}); err != nil {
		t.Fatal(err)
	}
	n := w.InventoryChanges()
	if n != 1 {
		t.Fatalf("InventoryChanges after a Create = %d, want 1", n)
	}
	x := p.waitFor(t, "after the Create", func(x pushed) bool { return x.changes >= n })
	if got := devicesOf(x.inv); !slices.Equal(got, []string{"dev-a"}) {
		t.Errorf("push covering the Create lists %v, want [dev-a]", got)
	}

	if _, err := b.Create(ctx, CreateRequest{GPU: "0000:41:00.0", DeviceUUID: "full"}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Create on a full GPU: %v", err)
	}
	if n := w.InventoryChanges(); n != 2 {
		t.Errorf("InventoryChanges after a failed Create = %d, want 2", n)
	}

	if err := b.Remove(ctx, RemoveRequest{ID: "dev-a"}); err != nil {
		t.Fatal(err)
	}
	n = w.InventoryChanges()
	x = p.waitFor(t, "after the Remove", func(x pushed) bool { return x.changes >= n })
	if got := devicesOf(x.inv); len(got) != 0 {
		t.Errorf("push covering the Remove lists %v, want none", got)
	}

	host.add("by-hand") // an admin's device: seen at a resync
	p.waitFor(t, "of the device made by hand", func(x pushed) bool { return slices.Equal(devicesOf(x.inv), []string{"by-hand"}) })

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchInventory after its ctx ended: %v, want context.Canceled", err)
	}
}

// v1Server is the server of a backend built before API v1.1.
type v1Server struct{ *grpcServer }

func (v1Server) WatchInventory(*pb.WatchInventoryRequest, grpc.ServerStreamingServer[pb.InventoryResponse]) error {
	return status.Error(codes.Unimplemented, "method WatchInventory not implemented")
}

type v1Plugin struct{ GRPCPlugin }

func (p *v1Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterBackendServer(s, v1Server{&grpcServer{impl: p.Impl}})
	return nil
}

// A backend without the stream says so with CodeUnsupported, at once.
func TestWatchInventoryUnsupported(t *testing.T) {
	host := &hostModel{}
	client, _ := plugin.TestPluginGRPCConn(t, true, map[string]plugin.Plugin{
		PluginType: &v1Plugin{GRPCPlugin{Impl: host.mock(), Name: "vgpu"}},
	})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(PluginType)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.(InventoryWatcher).WatchInventory(t.Context(), WatchOptions{}, func(Inventory, uint64) { t.Error("a v1 backend pushed an inventory") })
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("WatchInventory of a v1 backend: %v, want CodeUnsupported", err)
	}
}

func TestSupportsWatch(t *testing.T) {
	for v, want := range map[string]bool{"v1": false, "v1.1": true, "v1.2": true, "v2": true, "": false, "bogus": false} {
		if got := SupportsWatch(v); got != want {
			t.Errorf("SupportsWatch(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestInventoryClone(t *testing.T) {
	inv := filled[Inventory]()
	c := inv.Clone()
	c.Notes[0] = "changed"
	c.GPUs[0].MIGProfiles[0].FreeStarts[0] = 99
	c.Devices[0].Hostdev.Addresses[0] = "changed"
	if inv.Notes[0] == "changed" || inv.GPUs[0].MIGProfiles[0].FreeStarts[0] == 99 || inv.Devices[0].Hostdev.Addresses[0] == "changed" {
		t.Error("Clone shares memory with the original")
	}
}

// Creates that come within the settle time of the first are covered by one
// read, pushed after it.
func TestWatchInventorySettles(t *testing.T) {
	host := &hostModel{}
	b, _ := connect(t, host.mock())
	w := b.(InventoryWatcher)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := newPushes()
	done := make(chan error, 1)
	go func() { done <- w.WatchInventory(ctx, WatchOptions{Resync: time.Hour, Settle: 5 * time.Second}, p.add) }()
	p.waitFor(t, "at once", func(x pushed) bool { return x.changes == 0 })
	for _, id := range []string{"dev-a", "dev-b", "dev-c"} {
		if _, err := b.Create(ctx, CreateRequest{GPU: "0000:41:00.0", DeviceUUID: id}); err != nil {
			t.Fatal(err)
		}
	}
	x := p.waitFor(t, "after the Creates", func(x pushed) bool { return x.changes > 0 })
	if x.changes != 3 || !slices.Equal(devicesOf(x.inv), []string{"dev-a", "dev-b", "dev-c"}) {
		t.Errorf("first push after three Creates: changes %d, devices %v; want one read covering all three", x.changes, devicesOf(x.inv))
	}
	cancel()
	<-done
}
