package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Several gpuvmds sharing one PostgreSQL database form a fleet
// (pkg/fleet); every node answers the API for all of them. What needs the
// VM's own node — its display and its guest — is proxied there: the
// ticket routes and the websockets of a VM on another node go to that
// node's gpuvmd (hosts.api_url) as they came, the caller's credentials
// (bearer token or ticket) included, and its answer comes back as it is.
// The ticket is spent by the node that opens the connection.

// Fleet is what the API asks of the fleet this gpuvmd is a node of (a
// *fleet.Node).
type Fleet interface {
	// LeaderName is the node that leads the fleet now ("" when none does
	// for the moment).
	LeaderName(ctx context.Context) (string, error)
}

// forwardedHeader marks a request one node proxied to another, with the
// proxying node's name: a node never proxies such a request again.
const forwardedHeader = "X-Gpuvm-Forwarded-By"

// hostTimeout is how old a heartbeat may be before its host is down.
func (s *Server) hostTimeout() time.Duration {
	if s.HostTimeout > 0 {
		return s.HostTimeout
	}
	return config.DefaultHeartbeatTimeout
}

// hostState is a host's state as the API shows it: down when its
// heartbeat is older than the timeout, whatever its row says.
func (s *Server) hostState(h *store.Host, now time.Time) string {
	if now.Sub(h.HeartbeatAt) > s.hostTimeout() {
		return store.HostDown
	}
	return h.State
}

// hostStates is the state of every host, by name, for VMs to show; nil
// when the hosts cannot be read (VMs then show none).
func (s *Server) hostStates(ctx context.Context) map[string]string {
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		s.log.Warn("read the hosts for the VMs' host_state", "err", err)
		return nil
	}
	now := s.Store.Now()
	out := make(map[string]string, len(hosts))
	for i := range hosts {
		out[hosts[i].Name] = s.hostState(&hosts[i], now)
	}
	return out
}

// setHostStates fills in the host_state of VMs that are on a host.
func setHostStates(vms []api.VM, states map[string]string) {
	for i := range vms {
		if vms[i].Host != "" && vms[i].State != store.VMDeleted {
			vms[i].HostState = states[vms[i].Host]
		}
	}
}

// forwardToOwner proxies the request to the gpuvmd of the VM's node when
// that is another node of the fleet, and reports whether it answered the
// request (proxied it, or said why it could not).
func (s *Server) forwardToOwner(c *gin.Context, vm *store.VM) bool {
	if s.Fleet == nil || vm.Host == "" || vm.Host == s.Host {
		return false
	}
	if by := c.GetHeader(forwardedHeader); by != "" {
		s.writeProblem(c, with(errBadGateway, fmt.Sprintf("node %s forwarded this request for VM %s, which the database places on %s, not on %s: the nodes disagree on their names",
			by, vm.Name, vm.Host, s.Host)))
		return true
	}
	ctx := c.Request.Context()
	h, err := s.Store.GetHost(ctx, vm.Host)
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, with(errUnavailable, fmt.Sprintf("VM %s is on node %s, which is not registered", vm.Name, vm.Host)))
		return true
	}
	if err != nil {
		s.writeProblem(c, err)
		return true
	}
	if s.hostState(h, s.Store.Now()) == store.HostDown {
		s.writeProblem(c, with(errUnavailable, fmt.Sprintf("VM %s is on node %s, which is down (no heartbeat for %s): its display and guest are out of reach until the node returns",
			vm.Name, vm.Host, s.Store.Now().Sub(h.HeartbeatAt).Round(time.Second))))
		return true
	}
	target, err := url.Parse(h.APIURL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		s.writeProblem(c, with(errUnavailable, fmt.Sprintf("VM %s is on node %s, whose API address %q is not an http(s) URL", vm.Name, vm.Host, h.APIURL)))
		return true
	}
	s.log.Debug("proxying to the VM's node", "vm", vm.ID, "node", vm.Host, "path", c.Request.URL.Path)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			proto := r.In.Header.Get("X-Forwarded-Proto")
			r.SetURL(target)
			r.SetXForwarded()
			if proto != "" { // a proxy in front already said
				r.Out.Header.Set("X-Forwarded-Proto", proto)
			}
			// The owner answers with URLs of the node the client reached.
			r.Out.Host = r.In.Host
			r.Out.Header.Set(forwardedHeader, s.Host)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			auditForwarded(c, false) // no node answered: this one records it
			s.log.Warn("the VM's node did not answer a proxied request", "vm", vm.ID, "node", vm.Host, "api_url", h.APIURL, "err", err)
			s.writeProblem(c, with(errBadGateway, fmt.Sprintf("VM %s is on node %s, whose gpuvmd at %s did not answer: %v", vm.Name, vm.Host, h.APIURL, err)))
		},
		FlushInterval: -1, // websockets and streams as they come
	}
	auditForwarded(c, true) // the VM's node answers, and records it
	rp.ServeHTTP(c.Writer, c.Request)
	c.Abort()
	return true
}

// forwardTicket proxies a websocket whose ticket is for a VM on another
// node there, before the ticket is spent (the owner spends it); it reports
// whether it answered the request. Problems with the ticket are left to
// the caller, which spends it and says what is wrong.
func (s *Server) forwardTicket(c *gin.Context, plain string) bool {
	if s.Fleet == nil {
		return false
	}
	ctx := c.Request.Context()
	t, err := s.Store.PeekTicket(ctx, plain)
	if err != nil {
		return false
	}
	vm, err := s.Store.GetVM(ctx, t.VMID)
	if err != nil {
		return false
	}
	return s.forwardToOwner(c, vm)
}

// hostOfPath reads the node of the path, answering 404 for one that is not
// registered.
func (s *Server) hostOfPath(c *gin.Context) (*store.Host, bool) {
	name := c.Param("name")
	h, err := s.Store.GetHost(c.Request.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		hosts, _ := s.Store.ListHosts(c.Request.Context())
		names := make([]string, 0, len(hosts))
		for _, x := range hosts {
			names = append(names, x.Name)
		}
		list := "no node is registered"
		if len(names) > 0 {
			list = "the nodes are " + strings.Join(names, ", ")
		}
		s.writeProblem(c, with(errNotFound, fmt.Sprintf("no node is named %q: %s (gpuvm hosts)", name, list)))
		return nil, false
	}
	if err != nil {
		s.writeProblem(c, err)
		return nil, false
	}
	return h, true
}

// drainHost stops placements on a node: what runs there stays.
func (s *Server) drainHost(c *gin.Context) { s.setHostDrain(c, true) }

// undrainHost lets a node take VMs again.
func (s *Server) undrainHost(c *gin.Context) { s.setHostDrain(c, false) }

func (s *Server) setHostDrain(c *gin.Context, drain bool) {
	var none struct{} // no body, or an empty object
	if drain && !s.decodeOptionalJSON(c, &none) {
		return
	}
	h, ok := s.hostOfPath(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	if !drain && h.State != store.HostDraining {
		s.writeProblem(c, with(errNotFound, fmt.Sprintf("node %s is not drained (it is %s)", h.Name, s.hostState(h, s.Store.Now()))))
		return
	}
	h, err := s.Store.SetHostDraining(ctx, h.Name, drain)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	vms, err := s.vmsOnHost(ctx, h.Name)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.HostDrainState{Host: h.Name, State: s.hostState(h, s.Store.Now()), VMs: vms}
	switch {
	case drain && len(vms) == 0:
		out.Message = fmt.Sprintf("Node %s is drained: it takes no new VMs, and none is on it.", h.Name)
	case drain:
		out.Message = fmt.Sprintf("Node %s is drained: it takes no new VMs. The %d VMs on it stay there: their disks are local to %s, so gpuvm cannot move them to another node; the node is empty once they are deleted or their leases end.",
			h.Name, len(vms), h.Name)
	default:
		out.Message = fmt.Sprintf("Node %s takes VMs again.", h.Name)
	}
	s.log.Info("node drain changed", "host", h.Name, "drained", drain, "vms_on_it", len(vms), "by", user(c).Name)
	s.drainEvent(ctx, h.Name, "", drain, user(c).Name)
	if s.Worker != nil {
		s.Worker.Wake() // queued VMs get their reasons, or fit now
	}
	c.JSON(http.StatusOK, out)
}

// vmsOnHost names the VMs that hold something on a node (owner/name),
// oldest first.
func (s *Server) vmsOnHost(ctx context.Context, host string) ([]string, error) {
	vms, err := store.AllVMs(ctx, s.Store, store.VMFilter{Host: host, States: []string{store.VMAllocating, store.VMCreating, store.VMRunning,
		store.VMStopping, store.VMStopped, store.VMDeleting}})
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, vm := range vms {
		names = append(names, vm.Owner+"/"+vm.Name)
	}
	return names, nil
}

// pNode names a node of the fleet.
var pNode = param{Name: "name", In: "path", Description: "the node's name (gpuvm hosts)", Type: "string"}

// fleetAPIRoutes are the routes of this file, for the OpenAPI document.
var fleetAPIRoutes = []route{
	{Method: "POST", Path: "/v1/admin/hosts/{name}/drain", Summary: "Drain a node: it takes no new VMs; the VMs on it stay there (their disks are local to it, gpuvm cannot move them), and the answer names them", Auth: authAdmin, Params: []param{pNode}, Status: 200, Answer: api.HostDrainState{}, Errors: []int{400, 404, 413, 503}},
	{Method: "DELETE", Path: "/v1/admin/hosts/{name}/drain", Summary: "Undrain a node: it takes VMs again", Auth: authAdmin, Params: []param{pNode}, Status: 200, Answer: api.HostDrainState{}, Errors: []int{404, 503}},
}
