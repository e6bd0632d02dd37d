package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The announced changes of the hosts' vGPU manager (api.DriverChange;
// docs/snapshots.md, "Before a driver change"), admins only: the rules of
// sharing tell the owners of the VMs that hold a vGPU, and offer a
// snapshot (orchestrator's driverchange.go).

func (s *Server) driverChangeRoutes(admin *gin.RouterGroup) {
	admin.POST("/admin/driver-changes", s.announceDriverChange)
	admin.GET("/admin/driver-changes", s.listDriverChanges)
	admin.DELETE("/admin/driver-changes/:id", s.withdrawDriverChange)
}

func (s *Server) announceDriverChange(c *gin.Context) {
	var req api.DriverChangeRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	req.Note = strings.TrimSpace(req.Note)
	if field, msg := req.Problem(s.Store.Now()); field != "" {
		s.writeProblem(c, withField(errValidation, field, msg))
		return
	}
	dc := &api.DriverChange{Driver: req.Driver, At: req.At, Note: req.Note, By: user(c).Name}
	if err := s.Store.AnnounceDriverChange(c.Request.Context(), dc); err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("driver change announced", "id", dc.ID, "driver", dc.Driver, "at", dc.At, "by", dc.By)
	c.JSON(http.StatusCreated, dc)
}

func (s *Server) listDriverChanges(c *gin.Context) {
	all, err := s.Store.DriverChanges(c.Request.Context())
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	if all == nil {
		all = []api.DriverChange{}
	}
	c.JSON(http.StatusOK, api.DriverChangeList{DriverChanges: all})
}

func (s *Server) withdrawDriverChange(c *gin.Context) {
	dc, err := s.Store.WithdrawDriverChange(c.Request.Context(), c.Param("id"), user(c).Name)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("driver change withdrawn", "id", dc.ID, "driver", dc.Driver, "by", user(c).Name)
	c.JSON(http.StatusOK, dc)
}

// vmDriverChanges are the announcements still ahead that concern vm
// (orchestrator.DriverChangesFor), running or stopped. A read error only
// leaves them out; other VMs read nothing.
func (s *Server) vmDriverChanges(c *gin.Context, vm *store.VM) []api.VMDriverChange {
	p := s.vmProfile(vm) // desktop.go
	if !orchestrator.DriverChangesConcern(p) || (vm.State != store.VMRunning && vm.State != store.VMStopped) {
		return nil
	}
	all, err := s.Store.DriverChanges(c.Request.Context())
	if err != nil {
		s.log.Warn("read the driver changes for a VM", "vm", vm.ID, "err", err)
		return nil
	}
	return orchestrator.DriverChangesFor(p, all, s.Store.Now())
}
