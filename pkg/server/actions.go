package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// maxStartAhead bounds create's start_at: how far ahead a VM may be asked
// for.
const maxStartAhead = 30 * 24 * time.Hour

// startAtPhase and startAtReason say why a VM asked for ahead is queued,
// in the orchestrator's words (orchestrator.PhaseStartAt, StartAtReason).
const startAtPhase = api.PhaseStartAt

func startAtReason(t time.Time) string { return "starts at " + t.UTC().Format(time.RFC3339) }

// checkStartAt validates create's start_at: in the future, at most
// maxStartAhead away. It returns the time in UTC (nil when not asked), or
// answers and reports false.
func (s *Server) checkStartAt(c *gin.Context, at *time.Time) (*time.Time, bool) {
	if at == nil {
		return nil, true
	}
	now := s.Store.Now()
	switch {
	case !at.After(now):
		s.writeProblem(c, withField(errValidation, "start_at", fmt.Sprintf("start_at %s is not in the future (it is %s now)",
			at.UTC().Format(time.RFC3339), now.Format(time.RFC3339))))
		return nil, false
	case at.Sub(now) > maxStartAhead:
		s.writeProblem(c, withField(errValidation, "start_at", fmt.Sprintf("start_at may be at most %d days ahead, until %s",
			int(maxStartAhead/(24*time.Hour)), now.Add(maxStartAhead).Format(time.RFC3339))))
		return nil, false
	}
	t := at.UTC().Truncate(time.Microsecond)
	return &t, true
}

// actionVerbs say what an action does to a VM, for problem details.
var actionVerbs = map[string]string{api.ActionStart: "started", api.ActionStop: "stopped", api.ActionReboot: "rebooted"}

// actionNeeds is the state start, stop and reboot need.
var actionNeeds = map[string]string{api.ActionStart: store.VMStopped, api.ActionStop: store.VMRunning, api.ActionReboot: store.VMRunning}

// actionKinds are the operation kinds of the actions that have one.
var actionKinds = map[string]string{api.ActionStart: store.OpStart, api.ActionStop: store.OpStop, api.ActionReboot: store.OpReboot}

// actionRoutes adds POST /v1/vms/{id}/actions/{start,stop,reboot,extend}.
func (s *Server) actionRoutes(g *gin.RouterGroup) {
	for _, a := range api.Actions {
		g.POST("/vms/:id/actions/"+a, s.vmAction(a))
	}
	g.POST("/vms/:id/actions/"+api.ActionResize, s.resizeVM) // resize.go
}

// vmAction is POST /v1/vms/{id}/actions/{action}: start, stop and reboot
// queue an operation (202), extend changes the lease at once (200). Only
// the VM's owner or an admin may act on it; to others it does not exist.
func (s *Server) vmAction(action string) gin.HandlerFunc {
	return func(c *gin.Context) { s.doVMAction(c, action) }
}

func (s *Server) doVMAction(c *gin.Context, action string) {
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	if vm.State == store.VMDeleted {
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" is deleted"))
		return
	}
	if id := taskOfVM(vm); id != "" {
		// The task's runner and time limit own the VM (tasks.go).
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %s runs task %s: it cannot be %s by hand; cancel the task instead (gpuvm task cancel %s), which deleting the VM also does",
			vm.Name, id, map[string]string{api.ActionStart: "started", api.ActionStop: "stopped", api.ActionReboot: "rebooted", api.ActionExtend: "extended"}[action], id)))
		return
	}
	if action == api.ActionExtend {
		s.extendVM(c, vm)
		return
	}
	// start, stop and reboot take no body, or an empty object.
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	ctx := c.Request.Context()
	if !s.notBusy(c, vm, "") {
		return
	}
	if need := actionNeeds[action]; vm.State != need {
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %q is %s: only a %s VM can be %s", vm.Name, vm.State, need, actionVerbs[action])))
		return
	}
	u := user(c)
	op := &store.Operation{VMID: vm.ID, Kind: actionKinds[action], RequestedBy: u.Name}
	err := s.Store.Tx(ctx, func(tx *store.Store) error {
		if err := tx.CreateOperation(ctx, op); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, actionEvent(vm, api.VMActionPayload{Action: action, OperationID: op.ID, RequestedBy: u.Name}))
	})
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	allocs, err := s.Store.ListAllocations(ctx, vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.Header("Location", "/v1/operations/"+op.ID)
	c.JSON(http.StatusAccepted, api.VMActionResponse{VM: toAPIVM(vm, allocs), Operation: toAPIOp(op)})
}

// unfinished is the oldest unfinished operation of ops, of kind when not
// empty.
func unfinished(ops []store.Operation, kind string) *store.Operation {
	for i := range ops {
		if !ops[i].Finished() && (kind == "" || ops[i].Kind == kind) {
			return &ops[i]
		}
	}
	return nil
}

// notBusy refuses a change of vm while it has an unfinished operation
// (busy, naming field when not ""); false when it answered.
func (s *Server) notBusy(c *gin.Context, vm *store.VM, field string) bool {
	ops, err := s.Store.ListOperations(c.Request.Context(), vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return false
	}
	if op := unfinished(ops, ""); op != nil {
		p := busy(vm, op)
		p.Field = field
		s.writeProblem(c, p)
		return false
	}
	return true
}

// busy is the conflict of an action on a VM with an unfinished operation.
func busy(vm *store.VM, op *store.Operation) *Problem {
	return with(errConflict, fmt.Sprintf("VM %q has an unfinished %s operation (%s, %s): wait for it (GET /v1/operations/%s)",
		vm.Name, op.Kind, op.ID, op.State, op.ID))
}

func actionEvent(vm *store.VM, p api.VMActionPayload) *store.Event {
	b, _ := json.Marshal(p)
	return &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMAction, Payload: b}
}

// extendVM adds hours to a VM's lease at once. The lease is the VM's Hours,
// counted from when it first ran (its lease end is set then, to that time
// plus Hours): extend adds to both, and Hours may not pass the profile's
// maximum. A queued VM's lease starts when it runs. Two extends at once
// cannot lose one: each writes the version it read, and one that lost the
// race reads again and checks again.
// ExtendChecker says whether the sharing policy lets a VM's lease end at
// newEnd (the orchestrator; found through Deps.Admission).
type ExtendChecker interface {
	CheckExtend(ctx context.Context, vmID string, newEnd time.Time) error
}

func (s *Server) extendVM(c *gin.Context, vm *store.VM) {
	var req api.ExtendVMRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	var p *config.Profile
	if s.Config != nil {
		p = s.Config.Load().Profiles[vm.Profile]
	}
	switch {
	case req.Hours < 1:
		s.writeProblem(c, withField(errValidation, "hours", "hours must be at least 1"))
		return
	case p == nil:
		s.writeProblem(c, with(errConflict, fmt.Sprintf("the profile %q of VM %q no longer exists: its lease cannot be extended", vm.Profile, vm.Name)))
		return
	}
	// Every profile has a maximum lease (config.DefaultMaxLease when it
	// names none); a part of an hour does not count.
	maxHours := p.Lease.MaxHours()
	ctx := c.Request.Context()
	u := user(c)
	for attempt := 1; ; attempt++ {
		switch vm.State {
		case store.VMQueued, store.VMRunning, store.VMStopped:
		default:
			s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %q is %s: only a queued, running or stopped VM's lease can be extended", vm.Name, vm.State)))
			return
		}
		ops, err := s.Store.ListOperations(ctx, vm.ID)
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		if op := unfinished(ops, store.OpDelete); op != nil {
			s.writeProblem(c, busy(vm, op))
			return
		}
		// Whole hours compared before they are added or multiplied.
		if req.Hours > maxHours || vm.Hours > maxHours-req.Hours {
			s.writeProblem(c, withField(errValidation, "hours", fmt.Sprintf("profile %s allows a lease of at most %d hours; VM %s has %d, so at most %d more",
				p.Name, maxHours, vm.Name, vm.Hours, max(0, maxHours-vm.Hours))))
			return
		}
		total := vm.Hours + req.Hours
		up := store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: vm.StateReason, Hours: &total}
		if vm.LeaseEnd != nil {
			end := vm.LeaseEnd.Add(time.Duration(req.Hours) * time.Hour)
			up.LeaseEnd = &end
			// The longer lease may not run into a window that forbids the
			// VM or onto GPUs a reservation holds for someone else then.
			if ec, ok := s.Admission.(ExtendChecker); ok {
				if err := ec.CheckExtend(ctx, vm.ID, end); err != nil {
					s.writeProblem(c, withField(errPolicy, "hours", fmt.Sprintf("VM %s cannot run until %s: %v", vm.Name, end.UTC().Format(time.RFC3339), err)))
					return
				}
			}
		}
		var next *store.VM
		err = s.Store.Tx(ctx, func(tx *store.Store) error {
			var err error
			if next, err = tx.UpdateVMState(ctx, vm.ID, vm.Version, up); err != nil {
				return err
			}
			return tx.AppendEvent(ctx, actionEvent(next, api.VMActionPayload{Action: api.ActionExtend, RequestedBy: u.Name,
				Result: store.OpDone, Hours: req.Hours, TotalHours: total, LeaseEnd: next.LeaseEnd}))
		})
		if errors.Is(err, store.ErrConflict) && attempt < 5 {
			// Changed since it was read (another extend, the worker): read
			// it again and check again.
			if vm, err = s.Store.GetVM(ctx, vm.ID); err != nil {
				s.writeProblem(c, err)
				return
			}
			continue
		}
		if errors.Is(err, store.ErrConflict) {
			s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %q changed %d times while its lease was being extended: try again", vm.Name, attempt)))
			return
		}
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		allocs, err := s.Store.ListAllocations(ctx, vm.ID)
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		out := toAPIVM(next, allocs)
		sayVM(c, &out)
		c.JSON(http.StatusOK, out)
		return
	}
}
