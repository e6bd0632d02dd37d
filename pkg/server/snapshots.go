package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// SnapshotStore backs the snapshot routes (snapshots.go).
type SnapshotStore interface {
	CreateSnapshot(ctx context.Context, snap *store.Snapshot, requestedBy string, limit store.SnapshotLimit) (*store.Operation, error)
	BeginSnapshotOperation(ctx context.Context, snapID, kind, requestedBy string) (*store.Snapshot, *store.Operation, error)
	GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error)
	ListSnapshots(ctx context.Context, vmID string) ([]store.Snapshot, error)
}

// snapshotRoutes adds the routes of a VM's disk snapshots. A VM is found
// as every VM route finds it (its owner, or an admin, audited); a snapshot
// only under its own VM: another VM's snapshot ID is not found.
func (s *Server) snapshotRoutes(g *gin.RouterGroup) {
	g.GET("/vms/:id/snapshots", s.listSnapshots)
	g.POST("/vms/:id/snapshots", s.createSnapshot)
	g.GET("/vms/:id/snapshots/:snap", s.getSnapshot)
	g.POST("/vms/:id/snapshots/:snap/restore", s.restoreSnapshot)
	g.DELETE("/vms/:id/snapshots/:snap", s.deleteSnapshot)
}

// snapshotLimits are the snapshot limits of a VM's owner.
func (s *Server) snapshotLimits(ctx context.Context, owner string) (config.Snapshots, error) {
	u, err := s.Store.GetUser(ctx, owner)
	if err != nil {
		return config.Snapshots{}, err
	}
	return s.config().Policy.Effective(u.Name, u.Groups).Snapshots, nil
}

func toAPISnapshot(sn *store.Snapshot, lim config.Snapshots) api.Snapshot {
	out := api.Snapshot{ID: sn.ID, VMID: sn.VMID, Owner: sn.Owner, Label: sn.Label, State: sn.State, Consistency: sn.Consistency,
		Error: sn.Error, OperationID: sn.OperationID, CreatedBy: sn.CreatedBy, CreatedAt: sn.CreatedAt, RestoredAt: sn.RestoredAt}
	if lim.ExpireAfter != nil && sn.State != store.SnapFailed {
		t := sn.CreatedAt.Add(*lim.ExpireAfter)
		out.ExpiresAt = &t
	}
	return out
}

// checkSnapshotLabel: at most api.MaxSnapshotLabel characters of letters
// (any script), digits, spaces and . _ - + : @ ( ): no path separators,
// control characters or NUL, whatever a label is used for later.
func checkSnapshotLabel(label string) error {
	switch {
	case !utf8.ValidString(label):
		return errors.New("label is not valid UTF-8")
	case utf8.RuneCountInString(label) > api.MaxSnapshotLabel:
		return fmt.Errorf("label is %d characters long; at most %d", utf8.RuneCountInString(label), api.MaxSnapshotLabel)
	case label != strings.TrimSpace(label):
		return errors.New("label begins or ends with a space")
	}
	for _, r := range label {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != ' ' && !strings.ContainsRune("._-+:@()", r) {
			return fmt.Errorf("label may not hold %q: letters, digits, spaces and . _ - + : @ ( ) only", r)
		}
	}
	return nil
}

// snapshotVM finds the VM of a snapshot route: a live one the caller may
// see.
// It finds the VM as findVM does (its owner, or an admin, audited), but a
// VM the caller may not see is a 404 that names the field.
func (s *Server) snapshotVM(c *gin.Context) (*store.VM, bool) {
	u, ref, ctx := user(c), c.Param("id"), c.Request.Context()
	vm, err := s.Store.GetVM(ctx, ref)
	if err == nil && !u.Admin && vm.Owner != u.Name {
		vm, err = nil, store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		vm, err = s.Store.GetVMByName(ctx, u.Name, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, withField(errNotFound, "id", "no VM "+strconv.QuoteToASCII(ref)))
		return nil, false
	}
	if err != nil {
		s.writeProblem(c, err)
		return nil, false
	}
	auditVM(c, vm)
	if vm.State == store.VMDeleted {
		s.writeProblem(c, withField(errNotFound, "id", "VM "+strconv.Quote(vm.Name)+" is deleted"))
		return nil, false
	}
	return vm, true
}

// findSnapshot finds the snapshot of the route's VM that :snap names: its
// ID, or its label among the VM's snapshots.
func (s *Server) findSnapshot(c *gin.Context, vm *store.VM) (*store.Snapshot, bool) {
	ref := c.Param("snap")
	ctx := c.Request.Context()
	sn, err := s.Store.GetSnapshot(ctx, ref)
	if err == nil && sn.VMID == vm.ID {
		return sn, true
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	if checkSnapshotLabel(ref) == nil && ref != "" {
		list, err := s.Store.ListSnapshots(ctx, vm.ID)
		if err != nil {
			s.writeProblem(c, err)
			return nil, false
		}
		var found []store.Snapshot
		for _, x := range list {
			if x.Label == ref {
				found = append(found, x)
			}
		}
		switch len(found) {
		case 1:
			return &found[0], true
		case 0:
		default:
			s.writeProblem(c, withField(errConflict, "snap", fmt.Sprintf("VM %q has %d snapshots labelled %q: name one by its ID", vm.Name, len(found), ref)))
			return nil, false
		}
	}
	s.writeProblem(c, withField(errNotFound, "snap", fmt.Sprintf("VM %q has no snapshot %s", vm.Name, strconv.QuoteToASCII(ref))))
	return nil, false
}

// GET /v1/vms/{id}/snapshots
func (s *Server) listSnapshots(c *gin.Context) {
	vm, ok := s.snapshotVM(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	list, err := s.Store.ListSnapshots(ctx, vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	lim, err := s.snapshotLimits(ctx, vm.Owner)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.SnapshotList{Snapshots: []api.Snapshot{}, Keep: lim.Keep, Rule: lim.Rule}
	for i := range list {
		out.Snapshots = append(out.Snapshots, toAPISnapshot(&list[i], lim))
	}
	c.JSON(http.StatusOK, out)
}

// GET /v1/vms/{id}/snapshots/{snap}
func (s *Server) getSnapshot(c *gin.Context) {
	vm, ok := s.snapshotVM(c)
	if !ok {
		return
	}
	sn, ok := s.findSnapshot(c, vm)
	if !ok {
		return
	}
	lim, err := s.snapshotLimits(c.Request.Context(), vm.Owner)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.JSON(http.StatusOK, toAPISnapshot(sn, lim))
}

// snapshotReady checks what every snapshot operation needs of the VM: no
// unfinished operation, and a disk the VM's capabilities say can be
// snapshotted (the same answer and reason as GET /v1/vms/{id}).
func (s *Server) snapshotReady(c *gin.Context, vm *store.VM) bool {
	ctx := c.Request.Context()
	ops, err := s.Store.ListOperations(ctx, vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return false
	}
	if op := unfinished(ops, ""); op != nil {
		s.writeProblem(c, busy(vm, op))
		return false
	}
	allocs, err := s.Store.ListAllocations(ctx, vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return false
	}
	if caps := s.vmCapabilities(c, vm, allocs); !caps.DiskSnapshot.Can {
		s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("VM %q cannot have disk snapshots: %s", vm.Name, caps.DiskSnapshot.Reason)))
		return false
	}
	return true
}

// POST /v1/vms/{id}/snapshots: the intent (the snapshot's row and its
// operation) is written at once, within the owner's limit; the worker
// takes the snapshot (202).
func (s *Server) createSnapshot(c *gin.Context) {
	vm, ok := s.snapshotVM(c)
	if !ok {
		return
	}
	var req api.CreateSnapshotRequest
	if !s.decodeOptionalJSON(c, &req) {
		return
	}
	if err := checkSnapshotLabel(req.Label); err != nil {
		s.writeProblem(c, withField(errValidation, "label", err.Error()))
		return
	}
	if vm.State != store.VMRunning && vm.State != store.VMStopped {
		s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("VM %q is %s: only a running or stopped VM's disk can be snapshotted", vm.Name, vm.State)))
		return
	}
	if !s.snapshotReady(c, vm) {
		return
	}
	ctx := c.Request.Context()
	lim, err := s.snapshotLimits(ctx, vm.Owner)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	limit := store.SnapshotLimit{Rule: lim.Rule}
	if lim.Keep != nil {
		if *lim.Keep == 0 {
			s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("%s may keep no snapshots (%s: snapshots.keep = 0)", vm.Owner, lim.Rule)))
			return
		}
		limit.Keep = *lim.Keep
	}
	sn := &store.Snapshot{VMID: vm.ID, Owner: vm.Owner, Label: req.Label}
	op, err := s.Store.CreateSnapshot(ctx, sn, user(c).Name, limit)
	var le *store.SnapshotLimitError
	if err == nil {
		auditTarget(c, "vm/"+vm.Owner+"/"+vm.Name+"/snapshot/"+sn.ID)
	}
	if errors.As(err, &le) {
		s.writeProblem(c, withField(errConflict, "id", le.Error()))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.acceptedSnapshot(c, sn, op, lim)
}

func (s *Server) acceptedSnapshot(c *gin.Context, sn *store.Snapshot, op *store.Operation, lim config.Snapshots) {
	if s.Worker != nil {
		s.Worker.Wake()
	}
	c.Header("Location", "/v1/operations/"+op.ID)
	c.JSON(http.StatusAccepted, api.SnapshotResponse{Snapshot: toAPISnapshot(sn, lim), Operation: toAPIOp(op)})
}

// POST /v1/vms/{id}/snapshots/{snap}/restore: the VM must be stopped.
func (s *Server) restoreSnapshot(c *gin.Context) { s.snapshotOperation(c, store.OpRestore) }

// DELETE /v1/vms/{id}/snapshots/{snap}
func (s *Server) deleteSnapshot(c *gin.Context) { s.snapshotOperation(c, store.OpSnapshotDelete) }

func (s *Server) snapshotOperation(c *gin.Context, kind string) {
	vm, ok := s.snapshotVM(c)
	if !ok {
		return
	}
	// No body, or an empty object: checked first, as every route checks
	// its body before what it names.
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	sn, ok := s.findSnapshot(c, vm)
	if !ok {
		return
	}
	auditTarget(c, "vm/"+vm.Owner+"/"+vm.Name+"/snapshot/"+sn.ID)
	if kind == store.OpRestore && vm.State != store.VMStopped {
		s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("VM %q is %s: stop it first (gpuvm stop %s); a disk is restored only while its VM is stopped", vm.Name, vm.State, vm.Name)))
		return
	}
	if sn.State != store.SnapReady && !(kind == store.OpSnapshotDelete && sn.State == store.SnapFailed) {
		s.writeProblem(c, withField(errConflict, "snap", fmt.Sprintf("snapshot %s is %s, not ready", sn.ID, sn.State)))
		return
	}
	if !s.snapshotReady(c, vm) {
		return
	}
	ctx := c.Request.Context()
	next, op, err := s.Store.BeginSnapshotOperation(ctx, sn.ID, kind, user(c).Name)
	if errors.Is(err, store.ErrConflict) {
		s.writeProblem(c, withField(errConflict, "snap", fmt.Sprintf("snapshot %s changed meanwhile: %v", sn.ID, err)))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	lim, err := s.snapshotLimits(ctx, vm.Owner)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.acceptedSnapshot(c, next, op, lim)
}
