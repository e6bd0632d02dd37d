package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// HeartbeatInterval is how often a gpuvmd writes its heartbeat; a host
// whose last heartbeat is older than HostDownAfter is shown down.
const (
	HeartbeatInterval = 15 * time.Second
	HostDownAfter     = 3 * HeartbeatInterval
)

// inventoryTimeout bounds one backend's answer to an inventory request.
const inventoryTimeout = 30 * time.Second

// ListenURL is the URL at which others reach a server listening on addr
// ("127.0.0.1:8080"; "[::]:8080" for every address, which others reach at
// the hostname).
func ListenURL(scheme, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = defaultHost()
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

func defaultHost() string {
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return "localhost"
}

// CollectInventory asks every backend for its inventory and merges the
// answers. A backend that fails is left out and named in the notes; failed
// counts them.
func CollectInventory(ctx context.Context, bs Backends, log *slog.Logger) (hi api.HostInventory, failed int) {
	var invs []backend.Inventory
	var notes []string
	for _, name := range bs.Names() {
		b, ok := bs.Backend(name)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, inventoryTimeout)
		inv, err := b.Inventory(cctx)
		cancel()
		if err != nil {
			log.Warn("inventory failed", "backend", name, "err", err)
			notes = append(notes, name+": "+err.Error())
			failed++
			continue
		}
		invs = append(invs, inv)
	}
	hi = backend.Merge(invs)
	hi.Notes = append(hi.Notes, notes...)
	return hi, failed
}

// Heartbeater registers a gpuvmd in the hosts table and keeps its heartbeat
// and inventory current.
type Heartbeater struct {
	Store    *store.Store
	Backends Backends
	// Host is the host's name (the orchestrator's); APIURL where its API
	// answers; Version gpuvmd's version.
	Host, APIURL, Version string
	// Every is the heartbeat interval (default HeartbeatInterval).
	Every time.Duration
	// Publish, when set, makes what is stored of the inventory (JSON); it
	// must keep the api.HostInventory's fields (GET /v1/hosts reads them)
	// and may add others: a fleet's nodes add what the leader places by
	// (orchestrator.HeartbeatInventory). nil: the inventory as it is.
	Publish func(api.HostInventory) any
	Log     *slog.Logger
}

func (h *Heartbeater) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

func (h *Heartbeater) inventory(ctx context.Context) (string, error) {
	hi, _ := CollectInventory(ctx, h.Backends, h.log())
	var v any = hi
	if h.Publish != nil {
		v = h.Publish(hi)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode the inventory of %s: %w", h.Host, err)
	}
	return string(b), nil
}

// Register records that the host started, with its inventory now.
func (h *Heartbeater) Register(ctx context.Context) error {
	inv, err := h.inventory(ctx)
	if err != nil {
		return err
	}
	row := &store.Host{Name: h.Host, APIURL: h.APIURL, Version: h.Version, Inventory: inv}
	if err := h.Store.RegisterHost(ctx, row); err != nil {
		return err
	}
	h.log().Info("host registered", "host", h.Host, "api_url", h.APIURL, "state", row.State)
	return nil
}

// Beat writes one heartbeat with the inventory now; a host whose row has
// gone (an admin removed it) registers again.
func (h *Heartbeater) Beat(ctx context.Context) error {
	inv, err := h.inventory(ctx)
	if err != nil {
		return err
	}
	err = h.Store.Heartbeat(ctx, h.Host, inv)
	if errors.Is(err, store.ErrNotFound) {
		return h.Register(ctx)
	}
	return err
}

// Run beats every interval until ctx ends; failures are logged and the
// next beat tries again.
func (h *Heartbeater) Run(ctx context.Context) {
	every := h.Every
	if every <= 0 {
		every = HeartbeatInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.Beat(ctx); err != nil && ctx.Err() == nil {
			h.log().Warn("heartbeat failed; trying again at the next one", "host", h.Host, "err", err)
		}
	}
}

func (s *Server) listHosts(c *gin.Context) {
	ctx := c.Request.Context()
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	drains, err := s.Store.ListGPUDrains(ctx, "")
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	drained := map[string]map[string]bool{}
	for _, d := range drains {
		if drained[d.Host] == nil {
			drained[d.Host] = map[string]bool{}
		}
		drained[d.Host][d.GPUAddress] = true
	}
	admin := user(c).Admin
	now := s.Store.Now()
	leader := s.Host // one server leads itself
	if s.Fleet != nil {
		if leader, err = s.Fleet.LeaderName(ctx); err != nil {
			s.log.Warn("cannot tell which node leads the fleet", "err", err)
		}
	}
	out := api.HostList{Items: make([]api.Host, 0, len(hosts))}
	for _, h := range hosts {
		age := now.Sub(h.HeartbeatAt)
		ah := api.Host{Name: h.Name, State: s.hostState(&h, now), Version: h.Version, StartedAt: h.StartedAt, HeartbeatAt: h.HeartbeatAt,
			HeartbeatAge: max(0, age.Round(time.Millisecond).Seconds()), Leader: h.Name == leader && leader != ""}
		if admin {
			ah.APIURL = h.APIURL
		}
		var inv api.HostInventory
		if h.Inventory != "" {
			if err := json.Unmarshal([]byte(h.Inventory), &inv); err != nil {
				s.log.Warn("a host's stored inventory is not valid JSON", "host", h.Name, "err", err)
			}
		}
		ah.Simulated = inv.Simulated
		ah.GPUs = len(inv.GPUs)
		ah.Free, ah.DrainedGPUs = freeCapacity(inv, drained[h.Name])
		out.Items = append(out.Items, ah)
	}
	c.JSON(http.StatusOK, out)
}

// freeCapacity sums what could still be placed on the GPUs of an inventory
// that are not drained and that some backend can serve; it also counts the
// drained GPUs.
func freeCapacity(inv api.HostInventory, drained map[string]bool) (api.Capacity, int) {
	var free api.Capacity
	ndrained := 0
	devices := map[string]int{}
	for _, d := range inv.Devices {
		devices[d.GPU]++
	}
	for _, g := range inv.GPUs {
		if drained[g.Address] {
			ndrained++
			continue
		}
		usable := false
		for _, why := range g.Backends {
			usable = usable || why == ""
		}
		if !usable {
			continue
		}
		if g.Mode == string(gpu.ModeIdle) && devices[g.Address] == 0 {
			free.IdleGPUs++
		}
		for _, t := range g.VGPUTypes {
			if t.Available > 0 {
				if free.VGPU == nil {
					free.VGPU = map[string]int{}
				}
				free.VGPU[t.Name] += t.Available
			}
		}
		if !g.MIGEnabled {
			continue
		}
		for _, p := range g.MIGProfiles {
			if n := migFits(p); n > 0 {
				if free.MIG == nil {
					free.MIG = map[string]int{}
				}
				free.MIG[p.Name] += n
			}
		}
	}
	return free, ndrained
}

// migFits is how many instances of a profile fit side by side in its free
// start slots.
func migFits(p api.MIGProfile) int {
	n, end := 0, -1
	for _, s := range slices.Sorted(slices.Values(p.FreeStarts)) {
		if s >= end {
			n++
			end = s + max(p.Size, 1)
		}
	}
	return n
}
