package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// inventoryTimeout bounds the backends' answers to one inventory request.
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

// CollectInventory merges the inventories of every backend, as the
// backends keep them current (backend.CurrentInventories: a loader's
// pushed inventories, with no call to the backends that push theirs). A
// backend that fails is left out and named in the notes; failed counts
// them.
func CollectInventory(ctx context.Context, bs Backends, log *slog.Logger) (hi gpu.HostInventory, failed int) {
	ctx, cancel := context.WithTimeout(ctx, inventoryTimeout)
	defer cancel()
	invs, errs := backend.CurrentInventories(ctx, bs, bs.Names())
	hi = backend.MergeByName(invs)
	for _, err := range errs {
		log.Warn("a backend's inventory is missing", "err", err)
		hi.Notes = append(hi.Notes, err.Error())
	}
	return hi, len(errs)
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
	invs := make([]storedInventory, len(hosts))
	for i, h := range hosts {
		age := now.Sub(h.HeartbeatAt)
		ah := api.Host{Name: h.Name, State: s.hostState(&h, now), Version: h.Version, StartedAt: h.StartedAt, HeartbeatAt: h.HeartbeatAt,
			HeartbeatAge: max(0, age.Round(time.Millisecond).Seconds()), Leader: h.Name == leader && leader != ""}
		if admin {
			ah.APIURL = h.APIURL
		}
		var stored storedInventory
		if h.Inventory != "" {
			if err := json.Unmarshal([]byte(h.Inventory), &stored); err != nil {
				s.log.Warn("a host's stored inventory is not valid JSON", "host", h.Name, "err", err)
			}
		}
		if admin && stored.Driver != nil {
			d := api.HostDriver(*stored.Driver)
			ah.Driver = &d
		}
		ah.Simulated = stored.Simulated
		ah.GPUs = len(stored.GPUs)
		ah.Free, ah.Total, ah.DrainedGPUs = s.freeCapacity(h.Name, stored, drained[h.Name])
		invs[i] = stored
		out.Items = append(out.Items, ah)
	}
	if admin {
		if err := s.fillGPUDetail(ctx, out.Items, invs, drains); err != nil {
			s.writeProblem(c, err)
			return
		}
	}
	c.JSON(http.StatusOK, out)
}

// storedInventory is what a heartbeat stores in hosts.inventory
// (orchestrator.HeartbeatInventory): the host's inventory and, from
// gpuvmds that publish it, the scheduler's view of its GPUs under its own
// configuration (modes, MIG layouts).
type storedInventory struct {
	gpu.HostInventory
	Spec *scheduler.HostSpec `json:"spec,omitempty"`
}

// freeCapacity is what the scheduler could still place on a host whose
// heartbeat stored inv, its drained GPUs left out (and counted): the GPUs
// as its spec shows them (else as its inventory does, every GPU on auto),
// holding the devices the inventory lists; and what it could place
// holding none (total).
func (s *Server) freeCapacity(host string, inv storedInventory, drained map[string]bool) (free, total api.Capacity, ndrained int) {
	spec, devices := scheduler.FromHost(host, inv.HostInventory, nil)
	if inv.Spec != nil {
		spec = *inv.Spec
		spec.Name = host
	}
	for i := range spec.GPUs {
		if drained[spec.GPUs[i].Address] {
			spec.GPUs[i].Draining = true
			ndrained++
		}
	}
	capacity := func(devices []scheduler.Allocation) (api.Capacity, error) {
		model, err := scheduler.NewInventory([]scheduler.HostSpec{spec}, devices)
		if err != nil {
			return api.Capacity{}, err
		}
		f, _ := model.Free(host)
		c := api.Capacity{IdleGPUs: f.IdleGPUs, VGPU: f.VGPU, MIG: f.MIG}
		for m, n := range f.Split {
			if c.SplitGPUs == nil {
				c.SplitGPUs = map[string]int{}
			}
			c.SplitGPUs[string(m)] = n
		}
		return c, nil
	}
	var err error
	if free, err = capacity(devices); err == nil {
		total, err = capacity(nil)
	}
	if err != nil {
		s.log.Warn("a host's stored inventory does not make a model of its GPUs; its free capacity is shown as none", "host", host, "err", err)
		return api.Capacity{}, api.Capacity{}, ndrained
	}
	return free, total, ndrained
}
