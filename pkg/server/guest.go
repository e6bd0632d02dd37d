package server

import (
	"context"
	"errors"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// addLiveInfo adds to out what GET /v1/vms/{id} tells of a running VM from
// the hypervisor (Consoles), read live: its guest's addresses and how to
// open its display. Both are asked at once within Console.LiveTimeout;
// what fails or does not answer in time is left out, so that the VM's
// page never waits on a slow guest agent. Lists never call this: a page of
// VMs costs no hypervisor call.
func (s *Server) addLiveInfo(c *gin.Context, vm *store.VM, out *api.VM) {
	if s.Consoles == nil || vm.State != store.VMRunning {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.Console.withDefaults().LiveTimeout)
	defer cancel()
	var (
		wg         sync.WaitGroup
		addrs      []hypervisor.Address
		con        domain.Console
		aerr, cerr error
	)
	wg.Add(2)
	go func() { defer wg.Done(); addrs, aerr = s.Consoles.Addresses(ctx, vm.ID) }()
	go func() { defer wg.Done(); con, cerr = s.Consoles.Console(ctx, vm.ID) }()
	wg.Wait()

	if p := s.vmProfile(vm); p != nil { // desktop.go
		out.Desktop = p.Desktop.Protocol
	}
	log := s.log.With("vm", vm.ID, "name", vm.Name)
	switch {
	case aerr == nil:
		for _, a := range addrs {
			out.Addresses = append(out.Addresses, api.VMAddress{IP: a.IP.String(), Prefix: a.Prefix,
				Interface: a.Interface, MAC: a.MAC, Source: string(a.Source)})
		}
	case hypervisor.IsNotFound(aerr):
		// No domain here: the VM runs on another server of the database.
	default:
		log.Warn("GET vm: the guest's addresses are left out", "err", aerr)
	}
	switch {
	case cerr == nil:
		httpBase, _ := baseURLs(c.Request)
		out.Console = &api.VMConsole{Protocol: string(con.Protocol),
			TicketURL: vmURL(httpBase, vm.ID, "/console"), VVURL: vmURL(httpBase, vm.ID, "/console.vv")}
	case errors.Is(cerr, domain.ErrNoConsole), hypervisor.IsNotFound(cerr):
		// No display (display = none), or no domain here.
	default:
		log.Warn("GET vm: the console is left out", "err", cerr)
	}
}
