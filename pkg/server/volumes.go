package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// VolumeStore backs the data disk routes (volumes.go).
type VolumeStore interface {
	GetVolume(ctx context.Context, id string) (*store.Volume, error)
	// ForgetHomeHost: a home removed here no longer lives here (homes.go).
	ForgetHomeHost(ctx context.Context, user, host string) error
	// HomeHosts: where people's homes live, for their VMs and homes as
	// read (homes.go).
	HomeHosts(ctx context.Context, names []string) (map[string]string, error)
	GetVolumeByName(ctx context.Context, owner, name string) (*store.Volume, error)
	ListVolumes(ctx context.Context, f store.VolumeFilter) ([]store.Volume, error)
	AttachVolume(ctx context.Context, id, vmID string) (*store.Volume, error)
	DetachVolume(ctx context.Context, id string) error
	// AttachVolumeLive and BeginDetachVolume: a running VM's, with the
	// operation that plugs the disk in or out.
	AttachVolumeLive(ctx context.Context, id, vmID, requestedBy string) (*store.Volume, *store.Operation, error)
	BeginDetachVolume(ctx context.Context, id, requestedBy string) (*store.Volume, *store.Operation, error)
}

// Volumes makes, grows and deletes data disks on the host (the
// orchestrator): the row first, then the volume (docs/volumes.md).
type Volumes interface {
	CreateVolume(ctx context.Context, v *store.Volume, quota store.DiskQuota) error
	DeleteVolume(ctx context.Context, id string) error
	ResizeVolume(ctx context.Context, id string, size int64, quota store.DiskQuota) (*store.Volume, error)
}

// minVolumeBytes is the smallest data disk; sizes are whole MiB.
const minVolumeBytes = 1 << 20

// volumeRoutes adds the data disk routes. A volume is found among the
// caller's own (its ID or name); another person's is not found, except for
// an admin who asks with ?as_admin=true (audited as an override).
func (s *Server) volumeRoutes(g *gin.RouterGroup) {
	g.GET("/volumes", s.listVolumes)
	g.POST("/volumes", s.createVolume)
	g.GET("/volumes/:id", s.getVolume)
	g.DELETE("/volumes/:id", s.deleteVolume)
	g.POST("/volumes/:id/actions/resize", s.resizeVolume)
	g.POST("/volumes/:id/actions/attach", s.attachVolume)
	g.POST("/volumes/:id/actions/detach", s.detachVolume)
}

// volumeName is what a data disk may be called: as a VM.
var volumeName = vmName

// checkVolumeName refuses a name that is not a volume name.
func checkVolumeName(field, name string) *Problem {
	if !volumeName.MatchString(name) {
		return withField(errValidation, field, fmt.Sprintf("%s is not a volume name: lower-case letters, digits and dashes, starting with a letter, at most 63 characters", strconv.QuoteToASCII(clip(name, 80))))
	}
	return nil
}

// parseVolumeSize reads a size with a binary unit: whole MiB, from 1 MiB
// to api.MaxVolumeBytes.
func parseVolumeSize(field, text string) (int64, *Problem) {
	n, err := config.ParseSize(text)
	switch {
	case err != nil:
		return 0, withField(errValidation, field, err.Error())
	case n == 0:
		return 0, withField(errValidation, field, "a data disk needs a size above zero, e.g. 20GiB")
	case n > api.MaxVolumeBytes:
		return 0, withField(errValidation, field, fmt.Sprintf("%s is more than the largest data disk, 64TiB", strconv.QuoteToASCII(clip(text, 40))))
	case n%minVolumeBytes != 0:
		return 0, withField(errValidation, field, "a data disk's size is a whole number of MiB")
	}
	return int64(n), nil
}

// diskQuota is owner's storage.disk_quota, from the policy in force.
func (s *Server) diskQuota(ctx context.Context, owner string) (store.DiskQuota, error) {
	u, err := s.Store.GetUser(ctx, owner)
	if err != nil {
		return store.DiskQuota{}, err
	}
	st := s.config().Policy.Effective(u.Name, u.Groups).Storage
	return store.DiskQuota{Bytes: st.DiskQuota, Rule: st.Rule}, nil
}

// volumesReady answers 503 when this gpuvmd keeps no data disks.
func (s *Server) volumesReady(c *gin.Context) bool {
	if s.Volumes == nil {
		s.writeProblem(c, with(errUnavailable, "this gpuvmd keeps no data disks (it has no storage pool)"))
		return false
	}
	return true
}

// volumeProblem turns the store's and the orchestrator's refusals into
// problems naming field.
func volumeProblem(err error, field string) error {
	var inUse *store.VolumeInUseError
	var quota *store.DiskQuotaError
	var off interface{ Unavailable() bool }
	switch {
	case errors.As(err, &off) && off.Unavailable():
		return with(errUnavailable, err.Error())
	case errors.As(err, &inUse):
		return withField(errConflict, field, inUse.Error())
	case errors.As(err, &quota):
		return withField(errConflict, "size", quota.Error())
	case errors.Is(err, store.ErrNameTaken):
		return withField(errConflict, "name", "you already have a volume of that name")
	case errors.Is(err, store.ErrInvalid):
		return withField(errValidation, "size", err.Error())
	case errors.Is(err, store.ErrConflict):
		return withField(errConflict, field, err.Error())
	}
	return err
}

// asAdmin reads ?as_admin: true only for an admin who asked; a non-admin
// who asks is refused.
func (s *Server) asAdmin(c *gin.Context) (bool, bool) {
	switch v := c.Query("as_admin"); v {
	case "", "false":
		return false, true
	case "true":
		if !user(c).Admin {
			s.writeProblem(c, withField(errForbidden, "as_admin", "only an admin may act on another person's volume"))
			return false, false
		}
		return true, true
	default:
		s.writeProblem(c, withField(errValidation, "as_admin", "as_admin is true or false, not "+strconv.QuoteToASCII(clip(v, 40))))
		return false, false
	}
}

// findVolume finds the volume :id names: its ID or its name among the
// caller's volumes. Another person's is not found unless an admin asks
// with ?as_admin=true, which the audit entry records.
func (s *Server) findVolume(c *gin.Context) (*store.Volume, bool) {
	override, ok := s.asAdmin(c)
	if !ok {
		return nil, false
	}
	u, ref, ctx := user(c), c.Param("id"), c.Request.Context()
	v, err := s.Store.GetVolume(ctx, ref)
	if err == nil && v.Owner != u.Name && !override {
		v, err = nil, store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) && volumeName.MatchString(ref) {
		v, err = s.Store.GetVolumeByName(ctx, u.Name, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, withField(errNotFound, "id", "no volume "+strconv.QuoteToASCII(clip(ref, 80))))
		return nil, false
	}
	if err != nil {
		s.writeProblem(c, err)
		return nil, false
	}
	auditTarget(c, "volume/"+v.Owner+"/"+v.Name)
	if v.Owner != u.Name {
		auditDetail(c, "admin override: volume %s of %s", v.ID, v.Owner)
	}
	return v, true
}

// toAPIVolume shows a volume; vms names the VMs volumes are attached to.
func toAPIVolume(v *store.Volume, vms map[string]*store.VM) api.Volume {
	out := api.Volume{ID: v.ID, Name: v.Name, Kind: v.Kind, Owner: v.Owner, SizeBytes: v.SizeBytes, State: v.State, Error: v.Error,
		Host: v.Host, GuestDevice: "/dev/disk/by-id/virtio-" + v.ID[:min(len(v.ID), 20)], CreatedAt: &v.CreatedAt, UpdatedAt: &v.UpdatedAt}
	if v.SizeBytes > 0 {
		// A data disk is counted at its size, as the disk quota counts it.
		used := uint64(v.SizeBytes)
		out.UsedBytes = &used
	}
	if v.AttachedVM != nil {
		if vm := vms[*v.AttachedVM]; vm != nil && vm.State != store.VMDeleted {
			out.AttachedVM, out.AttachedVMName = vm.ID, vm.Name
		}
	}
	return out
}

// attachedVMs reads the VMs volumes are attached to.
func (s *Server) attachedVMs(ctx context.Context, vols ...store.Volume) (map[string]*store.VM, error) {
	var ids []string
	for _, v := range vols {
		if v.AttachedVM != nil {
			ids = append(ids, *v.AttachedVM)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.Store.GetVMs(ctx, ids)
}

func (s *Server) answerVolume(c *gin.Context, status int, v *store.Volume) {
	vms, err := s.attachedVMs(c.Request.Context(), *v)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.JSON(status, toAPIVolume(v, vms))
}

// listedHome is owner's home as the list shows it: with its used bytes,
// quota and enforcement as the home quotas last read them (none before the
// first reading, or without HomeUsage).
func (s *Server) listedHome(owner, mount string) api.Volume {
	v := api.Volume{Name: "home", Kind: api.VolumeHome, Owner: owner, State: api.VolumeReady, Mount: mount}
	if s.HomeUsage == nil {
		return v
	}
	for _, u := range s.HomeUsage.Usage() {
		if u.Kind == api.VolumeHome && u.Owner == owner {
			used := u.UsedBytes
			v.UsedBytes, v.QuotaBytes, v.Enforcement, v.Note = &used, u.QuotaBytes, u.Enforcement, u.Note
			break
		}
	}
	return v
}

// GET /v1/volumes: the caller's data disks, and their home when homes are
// on (a read-only entry).
func (s *Server) listVolumes(c *gin.Context) {
	u, ctx := user(c), c.Request.Context()
	list, err := s.Store.ListVolumes(ctx, store.VolumeFilter{Owner: u.Name})
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	vms, err := s.attachedVMs(ctx, list...)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	quota, err := s.diskQuota(ctx, u.Name)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.VolumeList{Volumes: []api.Volume{}, QuotaBytes: quota.Bytes, Rule: quota.Rule}
	if h := s.config().Server.Storage.Homes; h.Enabled {
		out.Volumes = append(out.Volumes, s.listedHome(u.Name, h.Mount))
	}
	for i := range list {
		out.UsedBytes += uint64(list[i].SizeBytes)
		out.Volumes = append(out.Volumes, toAPIVolume(&list[i], vms))
	}
	c.JSON(http.StatusOK, out)
}

// GET /v1/volumes/{id}
func (s *Server) getVolume(c *gin.Context) {
	if v, ok := s.findVolume(c); ok {
		s.answerVolume(c, http.StatusOK, v)
	}
}

// POST /v1/volumes: the row, then the volume on this host, within the
// caller's storage.disk_quota.
func (s *Server) createVolume(c *gin.Context) {
	var req api.CreateVolumeRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if p := checkVolumeName("name", req.Name); p != nil {
		s.writeProblem(c, p)
		return
	}
	size, p := parseVolumeSize("size", req.Size)
	if p != nil {
		s.writeProblem(c, p)
		return
	}
	if !s.volumesReady(c) {
		return
	}
	u, ctx := user(c), c.Request.Context()
	quota, err := s.diskQuota(ctx, u.Name)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	v := &store.Volume{Owner: u.Name, Name: req.Name, SizeBytes: size, CreatedBy: u.Name}
	err = s.Volumes.CreateVolume(ctx, v, quota)
	if v.ID != "" {
		auditTarget(c, "volume/"+v.Owner+"/"+v.Name)
		auditDetail(c, "data disk %s, %d bytes", v.ID, v.SizeBytes)
	}
	if err != nil {
		s.writeProblem(c, volumeProblem(err, "name"))
		return
	}
	c.Header("Location", "/v1/volumes/"+v.ID)
	s.answerVolume(c, http.StatusCreated, v)
}

// DELETE /v1/volumes/{id}: a detached data disk, its data with it.
func (s *Server) deleteVolume(c *gin.Context) {
	v, ok := s.findVolume(c)
	if !ok || !s.volumesReady(c) {
		return
	}
	if p := homeVolume(v); p != nil {
		s.writeProblem(c, p)
		return
	}
	if err := s.Volumes.DeleteVolume(c.Request.Context(), v.ID); err != nil {
		s.writeProblem(c, volumeProblem(err, "id"))
		return
	}
	c.Status(http.StatusNoContent)
}

// homeVolume refuses a volume that is not a data disk.
func homeVolume(v *store.Volume) *Problem {
	if v.Kind != store.VolumeDisk {
		return withField(errConflict, "id", fmt.Sprintf("volume %q is a %s, not a data disk: it is not changed here", v.Name, v.Kind))
	}
	return nil
}

// stoppedOrDetached refuses a change of a disk whose VM may be using it:
// it is detached, or its VM is queued, stopped or failed.
func (s *Server) stoppedOrDetached(c *gin.Context, v *store.Volume, what string) bool {
	if v.AttachedVM == nil {
		return true
	}
	vm, err := s.Store.GetVM(c.Request.Context(), *v.AttachedVM)
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	if err != nil {
		s.writeProblem(c, err)
		return false
	}
	if !vmHoldsNoDisk(vm) {
		s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("volume %q is attached to VM %q, which is %s: stop the VM first (gpuvm stop %s) to %s it", v.Name, vm.Name, vm.State, vm.Name, what)))
		return false
	}
	return true
}

// vmHoldsNoDisk: the VM's domain does not run, nor is being made, so its
// disks may change (the next start takes what its rows say).
func vmHoldsNoDisk(vm *store.VM) bool {
	switch vm.State {
	case store.VMQueued, store.VMStopped, store.VMFailed, store.VMDeleted:
		return true
	}
	return false
}

// POST /v1/volumes/{id}/actions/resize: grow, detached or its VM stopped.
func (s *Server) resizeVolume(c *gin.Context) {
	v, ok := s.findVolume(c)
	if !ok {
		return
	}
	var req api.ResizeVolumeRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	size, p := parseVolumeSize("size", req.Size)
	if p == nil {
		p = homeVolume(v)
	}
	if p == nil && size <= v.SizeBytes {
		p = withField(errValidation, "size", fmt.Sprintf("volume %q holds %d bytes: a data disk only grows", v.Name, v.SizeBytes))
	}
	if p != nil {
		s.writeProblem(c, p)
		return
	}
	if !s.volumesReady(c) || !s.stoppedOrDetached(c, v, "resize") {
		return
	}
	ctx := c.Request.Context()
	quota, err := s.diskQuota(ctx, v.Owner)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	got, err := s.Volumes.ResizeVolume(ctx, v.ID, size, quota)
	if err != nil {
		s.writeProblem(c, volumeProblem(err, "id"))
		return
	}
	auditDetail(c, "%d bytes to %d", v.SizeBytes, size)
	s.answerVolume(c, http.StatusOK, got)
}

// POST /v1/volumes/{id}/actions/attach {vm}: to a VM of the same owner on
// the same host, queued or stopped; the VM's next start has it.
func (s *Server) attachVolume(c *gin.Context) {
	v, ok := s.findVolume(c)
	if !ok {
		return
	}
	var req api.AttachVolumeRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if p := homeVolume(v); p != nil {
		s.writeProblem(c, p)
		return
	}
	if strings.TrimSpace(req.VM) == "" {
		s.writeProblem(c, withField(errValidation, "vm", "name the VM to attach the volume to"))
		return
	}
	vm, ok := s.ownersVM(c, v.Owner, req.VM)
	if !ok {
		return
	}
	switch {
	case vm.State != store.VMRunning && (!vmHoldsNoDisk(vm) || vm.State == store.VMFailed):
		s.writeProblem(c, withField(errConflict, "vm", fmt.Sprintf("VM %q is %s: a disk is attached to a running VM (plugged in at once), or to a stopped or queued one (there at its next start); wait until it runs, or stop it (gpuvm stop %s)", vm.Name, vm.State, vm.Name)))
		return
	case vm.Host != "" && vm.Host != v.Host:
		s.writeProblem(c, withField(errConflict, "vm", fmt.Sprintf("VM %q is on host %s and volume %q on %s: a disk attaches to VMs on its own host", vm.Name, vm.Host, v.Name, v.Host)))
		return
	case vm.State == store.VMRunning:
		s.plugVolume(c, v, vm, true)
		return
	}
	got, err := s.Store.AttachVolume(c.Request.Context(), v.ID, vm.ID)
	if err != nil {
		s.writeProblem(c, volumeProblem(err, "id"))
		return
	}
	auditDetail(c, "attached to VM %s (%s)", vm.Name, vm.ID)
	s.answerVolume(c, http.StatusOK, got)
}

// plugVolume attaches v to (in) or detaches it from its running VM vm:
// the row and the operation that plugs the disk in or out, on the VM's host
// (the orchestrator's diskplugs.go), answered 202 with the operation's id.
// A VM with an unfinished operation is busy (409).
func (s *Server) plugVolume(c *gin.Context, v *store.Volume, vm *store.VM, in bool) {
	ctx := c.Request.Context()
	if !s.notBusy(c, vm, map[bool]string{true: "vm", false: "id"}[in]) {
		return
	}
	var got *store.Volume
	var op *store.Operation
	var err error
	if in {
		got, op, err = s.Store.AttachVolumeLive(ctx, v.ID, vm.ID, user(c).Name)
	} else {
		got, op, err = s.Store.BeginDetachVolume(ctx, v.ID, user(c).Name)
	}
	if err != nil {
		s.writeProblem(c, volumeProblem(err, "id"))
		return
	}
	if in {
		auditDetail(c, "plugged into running VM %s (%s), operation %s", vm.Name, vm.ID, op.ID)
	} else {
		auditDetail(c, "unplugged from running VM %s (%s), operation %s", vm.Name, vm.ID, op.ID)
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	vms, err := s.attachedVMs(ctx, *got)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := toAPIVolume(got, vms)
	out.OperationID = op.ID
	c.JSON(http.StatusAccepted, out)
}

// ownersVM finds the live VM ref names among owner's: its ID or name.
// Another person's VM is not found.
func (s *Server) ownersVM(c *gin.Context, owner, ref string) (*store.VM, bool) {
	ctx := c.Request.Context()
	vm, err := s.Store.GetVM(ctx, ref)
	if err == nil && (vm.Owner != owner || vm.State == store.VMDeleted) {
		vm, err = nil, store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) && vmName.MatchString(ref) {
		vm, err = s.Store.GetVMByName(ctx, owner, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, withField(errNotFound, "vm", fmt.Sprintf("%s has no VM %s", owner, strconv.QuoteToASCII(clip(ref, 80)))))
		return nil, false
	}
	if err != nil {
		s.writeProblem(c, err)
		return nil, false
	}
	return vm, true
}

// POST /v1/volumes/{id}/actions/detach: from a queued, stopped or failed
// VM.
func (s *Server) detachVolume(c *gin.Context) {
	v, ok := s.findVolume(c)
	if !ok {
		return
	}
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	if p := homeVolume(v); p != nil {
		s.writeProblem(c, p)
		return
	}
	ctx := c.Request.Context()
	if v.State == store.VolDetaching {
		s.writeProblem(c, withField(errConflict, "id", fmt.Sprintf("volume %q is being unplugged from its VM already: wait until its guest has let it go (gpuvm volume show %s)", v.Name, v.Name)))
		return
	}
	if v.AttachedVM != nil && v.State == store.VolReady {
		if vm, err := s.Store.GetVM(ctx, *v.AttachedVM); err == nil && vm.State == store.VMRunning {
			s.plugVolume(c, v, vm, false)
			return
		}
	}
	if !s.stoppedOrDetached(c, v, "detach") {
		return
	}
	if err := s.Store.DetachVolume(ctx, v.ID); err != nil {
		s.writeProblem(c, volumeProblem(err, "id"))
		return
	}
	got, err := s.Store.GetVolume(ctx, v.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.answerVolume(c, http.StatusOK, got)
}

// createVolumes resolves the volumes of POST /v1/vms: the caller's, by
// name or ID, each ready and free; their IDs.
func (s *Server) createVolumes(c *gin.Context, owner string, refs []string) ([]string, bool) {
	if len(refs) > 16 {
		s.writeProblem(c, withField(errValidation, "volumes", fmt.Sprintf("at most 16 data disks, not %d", len(refs))))
		return nil, false
	}
	ctx := c.Request.Context()
	seen := map[string]bool{}
	var ids []string
	for i, ref := range refs {
		field := fmt.Sprintf("volumes[%d]", i)
		v, err := s.Store.GetVolume(ctx, ref)
		if err == nil && v.Owner != owner {
			v, err = nil, store.ErrNotFound
		}
		if errors.Is(err, store.ErrNotFound) && volumeName.MatchString(ref) {
			v, err = s.Store.GetVolumeByName(ctx, owner, ref)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			s.writeProblem(c, withField(errNotFound, field, "no volume "+strconv.QuoteToASCII(clip(ref, 80))))
			return nil, false
		case err != nil:
			s.writeProblem(c, err)
			return nil, false
		case v.Kind != store.VolumeDisk || v.State != store.VolReady:
			s.writeProblem(c, withField(errConflict, field, fmt.Sprintf("volume %q is %s, not a ready data disk", v.Name, v.State)))
			return nil, false
		case seen[v.ID]:
			s.writeProblem(c, withField(errValidation, field, fmt.Sprintf("volume %q is named twice", v.Name)))
			return nil, false
		}
		seen[v.ID] = true
		ids = append(ids, v.ID)
	}
	if len(ids) > 0 && !s.volumesReady(c) {
		return nil, false
	}
	return ids, true
}
