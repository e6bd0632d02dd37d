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

// createTaskIn makes a task that runs in the caller's own VM (in; pkg/task
// in.go): the VM is stopped, serves no task, and the task's profile keeps
// its disk (the resize's rule). The task and the VM's spec that names it
// are written in one transaction; the task supervisor does the rest.
func (s *Server) createTaskIn(c *gin.Context, req *api.CreateTaskRequest, t *store.Task) {
	u := user(c)
	ctx := c.Request.Context()
	fail := func(p *Problem, detail string) { s.writeProblem(c, withField(p, "in", detail)) }
	switch {
	case req.Array != "":
		fail(errValidation, "an array's elements run at once, each in a VM of its own: an array cannot run in one VM (leave out in, or array)")
		return
	case req.Retries > 0:
		fail(errValidation, "a retry runs in a fresh VM: a task in your own VM is not retried (leave out in, or retries)")
		return
	}
	startAt, ok := s.checkStartAt(c, req.StartAt) // as a fresh task's VM's (makeVM)
	if !ok {
		return
	}
	t.StartAt = startAt
	vm, ok := s.ownVM(c, req.In)
	if !ok {
		return
	}
	p := s.config().Profiles[req.Profile]
	if p == nil || !(u.Admin || p.Allows(u.Name, u.Groups)) {
		s.writeProblem(c, withField(errNotFound, "profile", "unknown profile "+strconv.Quote(clip(req.Profile, 80))))
		return
	}
	switch {
	case vm.State == store.VMDeleted || vm.State == store.VMDeleting:
		fail(errConflict, fmt.Sprintf("VM %s is %s", vm.Name, vm.State))
		return
	case taskOfVM(vm) != "":
		fail(errConflict, fmt.Sprintf("VM %s runs task %s already: one task at a time", vm.Name, taskOfVM(vm)))
		return
	case vm.State != store.VMStopped:
		fail(errConflict, fmt.Sprintf("VM %s is %s: a task runs only in a stopped VM (stop it first: gpuvm stop %s)", vm.Name, vm.State, vm.Name))
		return
	case vm.LeaseEnd != nil && !s.Store.Now().Before(*vm.LeaseEnd):
		fail(errConflict, fmt.Sprintf("VM %s's lease has ended: extend it first (gpuvm extend %s --hours N)", vm.Name, vm.Name))
		return
	}
	if req.Profile != vm.Profile && !s.taskInResizes(c, vm, req.Profile) {
		return
	}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{store.SpecTask: t.ID})
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	t.InProfile, t.State = vm.Profile, api.TaskPending
	t.Reason = fmt.Sprintf("waits for its turn in VM %s", vm.Name)
	err = s.Store.CreateTaskIn(ctx, t, vm, spec, "runs task "+t.ID)
	if errors.Is(err, store.ErrConflict) {
		fail(errConflict, fmt.Sprintf("VM %s changed, or another task took it, while the task was being made: try again", vm.Name))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	auditTarget(c, "task/"+u.Name+"/"+t.ID)
	if rec := auditOf(c); rec != nil {
		rec.entry.VMID = vm.ID
	}
	auditDetail(c, "profile %s, in VM %s (profile %s)", t.Profile, vm.Name, vm.Profile)
	c.Header("Location", "/v1/tasks/"+t.ID)
	s.wakeTasks()
	c.JSON(http.StatusAccepted, sayTask(c, t))
}

// ownVM is the caller's own VM ref names (its ID or name); another's, an
// admin's too, is not found.
func (s *Server) ownVM(c *gin.Context, ref string) (*store.VM, bool) {
	u := user(c)
	ctx := c.Request.Context()
	vm, err := s.Store.GetVM(ctx, ref)
	if err == nil && vm.Owner == u.Name {
		return vm, true
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	if vm, err = s.Store.GetVMByName(ctx, u.Name, ref); err == nil {
		return vm, true
	}
	if !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	s.writeProblem(c, withField(errNotFound, "in", "you have no VM "+strconv.Quote(clip(ref, 80))))
	return nil, false
}

// taskInResizes checks that vm may move to profile for the task as a
// resize would (the same image, a disk no smaller, the sharing policy); a
// refusal of the VM's disk names in.
func (s *Server) taskInResizes(c *gin.Context, vm *store.VM, profile string) bool {
	rz, ok := s.Admission.(Resizer)
	if !ok {
		s.writeProblem(c, withField(errUnavailable, "in", "this server cannot resize VMs (no orchestrator): a task runs in a VM of its profile only"))
		return false
	}
	u := user(c)
	_, err := rz.PlanResize(c.Request.Context(), vm, profile, orchestrator.ResizeBy{Name: u.Name, Groups: u.Groups, Admin: u.Admin})
	var r *orchestrator.ResizeRefusal
	switch {
	case err == nil:
		return true
	case errors.As(err, &r) && (r.Kind == orchestrator.RefuseInvalid || r.Kind == orchestrator.RefuseConflict):
		s.writeProblem(c, withField(resizeProblems[r.Kind], "in", r.Detail))
	default:
		s.writeProblem(c, resizeProblem(err))
	}
	return false
}

// taskEstimates fills in the estimated start of the pending tasks whose
// VM is queued from the last snapshot of estimates, without waiting for
// one (GET /v1/tasks).
func (s *Server) taskEstimates(ctx context.Context, tasks []api.Task) {
	pending := false
	for i := range tasks {
		pending = pending || tasks[i].State == api.TaskPending && tasks[i].VMID != ""
	}
	if !pending || s.Config == nil {
		return
	}
	sn, stale := s.awaitEstimates(ctx, 0, false, func(*estimateSnap) bool { return true })
	if sn == nil || sn.err != nil {
		return
	}
	for i := range tasks {
		t := &tasks[i]
		if t.State != api.TaskPending || t.VMID == "" {
			continue
		}
		if est, ok := sn.vms[t.VMID]; ok && est.Known() {
			at := est.At.UTC()
			t.EstimatedStart, t.EstimatedStartStale = &at, stale
		}
	}
}
