package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Resizer plans and queues the resize of a stopped VM to another profile
// (the orchestrator's resize.go; found through Deps.Admission).
type Resizer interface {
	PlanResize(ctx context.Context, vm *store.VM, target string, by orchestrator.ResizeBy) (api.ResizePlan, error)
	QueueResize(ctx context.Context, vm *store.VM, target string, by orchestrator.ResizeBy) (api.ResizePlan, *store.Operation, *store.VM, error)
}

// resizeProblems maps a resize's refusals to problem kinds.
var resizeProblems = map[string]*Problem{
	orchestrator.RefuseInvalid:  errValidation,
	orchestrator.RefuseNotFound: errNotFound,
	orchestrator.RefusePolicy:   errPolicy,
	orchestrator.RefuseConflict: errConflict,
}

// resizeVM is POST /v1/vms/{id}/actions/resize (api.ActionResize): the plan
// alone with dry_run (200), else the plan and the queued operation (202).
func (s *Server) resizeVM(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	if vm.State == store.VMDeleted {
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" is deleted"))
		return
	}
	if id := taskOfVM(vm); id != "" {
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %s runs task %s: it cannot be resized", vm.Name, id)))
		return
	}
	var req api.ResizeVMRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	rz, ok := s.Admission.(Resizer)
	if !ok {
		s.writeProblem(c, with(errUnavailable, "this server cannot resize VMs (no orchestrator)"))
		return
	}
	u := user(c)
	by := orchestrator.ResizeBy{Name: u.Name, Admin: u.Admin}
	if u.Name == vm.Owner {
		by.Groups = u.Groups
	} else if vm.Group != "" {
		by.Groups = []string{vm.Group} // an admin acts for the owner
	}
	ctx := c.Request.Context()
	if req.DryRun {
		plan, err := rz.PlanResize(ctx, vm, req.Profile, by)
		if err != nil {
			s.writeProblem(c, resizeProblem(err))
			return
		}
		c.JSON(http.StatusOK, api.ResizeVMResponse{Plan: plan})
		return
	}
	plan, op, next, err := rz.QueueResize(ctx, vm, req.Profile, by)
	if err != nil {
		s.writeProblem(c, resizeProblem(err))
		return
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	auditVM(c, vm)
	auditDetail(c, "profile %s to %s", vm.Profile, req.Profile)
	out, apiOp := toAPIVM(next, nil), toAPIOp(op)
	c.Header("Location", "/v1/operations/"+op.ID)
	c.JSON(http.StatusAccepted, api.ResizeVMResponse{Plan: plan, VM: &out, Operation: &apiOp})
}

// resizeProblem is the problem of a refused resize; any other error is
// the server's.
func resizeProblem(err error) error {
	var r *orchestrator.ResizeRefusal
	if !errors.As(err, &r) {
		return err
	}
	kind := resizeProblems[r.Kind]
	if kind == nil {
		kind = errValidation
	}
	if r.Field == "" {
		return with(kind, r.Detail)
	}
	return withField(kind, r.Field, r.Detail)
}
