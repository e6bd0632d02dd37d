package backend

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/mod/semver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// APIVersionWatch is the first API version with WatchInventory: a backend
// that speaks it pushes its inventory to gpuvmd instead of being polled.
const APIVersionWatch = "v1.1"

// SupportsWatch says whether the negotiated API version has WatchInventory.
func SupportsWatch(apiVersion string) bool {
	return semver.IsValid(apiVersion) && semver.Compare(apiVersion, APIVersionWatch) >= 0
}

// DefaultResync is how often a watched backend re-reads the host for
// changes it did not make, and DefaultSettle how long it waits after a
// Create or Remove before it re-reads the host (so that one read covers a
// burst of them), unless the watcher asks otherwise (WatchOptions).
const (
	DefaultResync = 30 * time.Second
	DefaultSettle = 200 * time.Millisecond
)

// HostGenerations is what a backend may offer besides Backend: a token
// that changes whenever any backend process changes the host (the backend
// binaries share one, under their host lock). WatchInventory polls it
// every HostPoll and re-reads the host when it changed, so that a change
// one backend makes reaches the others' inventories too (a GPU the
// passthrough backend takes is no longer offered by the vgpu backend).
type HostGenerations interface {
	HostGeneration() string
}

// HostPoll is how often WatchInventory polls HostGenerations.
const HostPoll = 250 * time.Millisecond

// WatchOptions tune a WatchInventory stream; zero fields take the
// defaults. A negative Settle makes the backend re-read at once.
type WatchOptions struct {
	Resync, Settle time.Duration
}

// changeTrailer is the gRPC trailer of Create and Remove that carries the
// number of Create and Remove calls the backend process has finished.
const changeTrailer = "gpuvm-inventory-change"

// InventoryWatcher is what the gRPC client of a backend offers besides
// Backend (API v1.1): the backend's inventory pushed as it changes.
type InventoryWatcher interface {
	// WatchInventory calls got with the backend's full inventory at once,
	// then again opts.Settle after the Creates and Removes it finishes
	// and whenever its re-read of the host every opts.Resync finds a
	// change, until ctx ends or the stream breaks; it returns why it
	// ended (CodeUnsupported: the backend has no WatchInventory). changes
	// is how many Create and Remove calls the backend had finished before
	// it read that inventory.
	WatchInventory(ctx context.Context, opts WatchOptions, got func(inv Inventory, changes uint64)) error
	// InventoryChanges is the highest count of finished Create and Remove
	// calls that the backend reported with a Create or Remove through
	// this client: an inventory pushed with changes at least this high
	// reflects every change those calls made.
	InventoryChanges() uint64
}

var _ InventoryWatcher = (*grpcClient)(nil)

// WatchInventory implements InventoryWatcher.
func (c *grpcClient) WatchInventory(ctx context.Context, opts WatchOptions, got func(Inventory, uint64)) error {
	if c.done.Err() != nil {
		return c.unavailable("exited before WatchInventory")
	}
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.done, cancel)()
	req := &pb.WatchInventoryRequest{ResyncMs: opts.Resync.Milliseconds(), SettleMs: opts.Settle.Milliseconds()}
	if opts.Settle < 0 {
		req.SettleMs = -1
	}
	stream, err := c.client.WatchInventory(streamCtx, req)
	if err != nil {
		return c.error(ctx, "WatchInventory", err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if ctx.Err() != nil {
				return c.error(ctx, "WatchInventory", ctx.Err())
			}
			return c.unavailable("ended the WatchInventory stream")
		}
		if err != nil {
			return c.error(ctx, "WatchInventory", err)
		}
		got(inventoryFromProto(resp.GetInventory()), resp.GetChanges())
	}
}

// InventoryChanges implements InventoryWatcher.
func (c *grpcClient) InventoryChanges() uint64 { return c.changes.Load() }

// noteChanges keeps the change count of a Create or Remove's trailer.
func (c *grpcClient) noteChanges(md metadata.MD) {
	vs := md.Get(changeTrailer)
	if len(vs) == 0 {
		return
	}
	n, err := strconv.ParseUint(vs[len(vs)-1], 10, 64)
	if err != nil {
		return
	}
	for {
		old := c.changes.Load()
		if n <= old || c.changes.CompareAndSwap(old, n) {
			return
		}
	}
}

// changeHub counts the Create and Remove calls a plugin process has
// finished, and wakes the WatchInventory streams after each.
type changeHub struct {
	mu   sync.Mutex
	n    uint64
	wake chan struct{} // closed and replaced at every change
}

// changed counts one finished Create or Remove and returns the count.
func (h *changeHub) changed() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
	return h.n
}

// current returns the count and a channel closed at the next change.
func (h *changeHub) current() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wake == nil {
		h.wake = make(chan struct{})
	}
	return h.n, h.wake
}

// noteChange counts a finished Create or Remove (whatever its outcome: a
// failed one may have changed the host too) and tells the caller its count
// in the trailer.
func (s *grpcServer) noteChange(ctx context.Context) {
	n := s.changes.changed()
	_ = grpc.SetTrailer(ctx, metadata.Pairs(changeTrailer, strconv.FormatUint(n, 10)))
}

// WatchInventory serves the stream of the backend's inventory: the first
// read at once, then a read settle after a Create or Remove (sent with the
// count of those finished before it began, so that it surely reflects
// them) or after another backend's change (HostGenerations), and every
// resync, sent only when it differs from the last one sent or covers more
// changes. A failed read ends the stream with its error.
func (s *grpcServer) WatchInventory(req *pb.WatchInventoryRequest, stream grpc.ServerStreamingServer[pb.InventoryResponse]) error {
	ctx := stream.Context()
	resync := DefaultResync
	if ms := req.GetResyncMs(); ms > 0 {
		resync = time.Duration(ms) * time.Millisecond
	}
	settle := DefaultSettle
	switch ms := req.GetSettleMs(); {
	case ms > 0:
		settle = time.Duration(ms) * time.Millisecond
	case ms < 0:
		settle = 0
	}
	timer := time.NewTimer(resync)
	defer timer.Stop()
	hosts, polled := s.impl.(HostGenerations)
	var poll <-chan time.Time
	if polled {
		ticker := time.NewTicker(HostPoll)
		defer ticker.Stop()
		poll = ticker.C
	}
	var last *pb.InventoryResponse
	for {
		n, wake := s.changes.current()
		var gen string
		if polled {
			gen = hosts.HostGeneration()
		}
		inv, err := serve(ctx, "WatchInventory", func() (*pb.Inventory, error) {
			inv, err := s.impl.Inventory(ctx)
			return inventoryToProto(inv), err
		})
		if err != nil {
			return err
		}
		if last == nil || last.GetChanges() != n || !proto.Equal(last.GetInventory(), inv) {
			last = &pb.InventoryResponse{Inventory: inv, Changes: n}
			if err := stream.Send(last); err != nil {
				return err
			}
		}
		timer.Reset(resync)
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				break wait
			case <-wake:
				break wait
			case <-poll:
				if hosts.HostGeneration() != gen { // another backend changed the host
					break wait
				}
			}
		}
		if settle > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(settle):
			}
		}
	}
}

// Clone returns a deep copy of inv, which the caller may change.
func (inv Inventory) Clone() Inventory {
	inv.Notes = slices.Clone(inv.Notes)
	inv.GPUs = slices.Clone(inv.GPUs)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		g.GroupDevices = slices.Clone(g.GroupDevices)
		g.VGPUTypes = slices.Clone(g.VGPUTypes)
		g.MIGProfiles = slices.Clone(g.MIGProfiles)
		for j := range g.MIGProfiles {
			g.MIGProfiles[j].FreeStarts = slices.Clone(g.MIGProfiles[j].FreeStarts)
		}
	}
	inv.Devices = slices.Clone(inv.Devices)
	for i := range inv.Devices {
		inv.Devices[i].Hostdev.Addresses = slices.Clone(inv.Devices[i].Hostdev.Addresses)
	}
	return inv
}
