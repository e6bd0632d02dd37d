package server

import (
	"context"
	"encoding/json"
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
func CollectInventory(ctx context.Context, bs Backends, log *slog.Logger) (hi gpu.HostInventory, failed int) {
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
		var inv gpu.HostInventory // as heartbeats store it (orchestrator.HeartbeatInventory)
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
func freeCapacity(inv gpu.HostInventory, drained map[string]bool) (api.Capacity, int) {
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
		if !g.Usable() {
			continue
		}
		if g.Mode == gpu.ModeIdle && devices[g.Address] == 0 {
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
func migFits(p gpu.MIGOffer) int {
	n, end := 0, -1
	for _, s := range slices.Sorted(slices.Values(p.FreeStarts)) {
		if s >= end {
			n++
			end = s + max(p.Size, 1)
		}
	}
	return n
}
