package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Orphans are what the reconciler found on this host that looks like
// gpuvm's but is not provably this installation's (the orchestrator):
// listed, and deleted or adopted only when an admin says so.
type Orphans interface {
	Installation() string
	CheckOrphans(ctx context.Context) ([]api.Orphan, time.Time, error)
	DeleteOrphan(ctx context.Context, id string) (api.Orphan, error)
	AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest, by string) (*store.VM, error)
	AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest, by string) (*store.Volume, error)
}

var orphanAPIRoutes = []route{
	{Method: "GET", Path: "/v1/admin/orphans", Summary: "Compare the host with the database now, and list what this host has that looks like gpuvm's but is not provably this installation's: another installation's domains and devices, this installation's whose VM is not in the database, volumes nothing refers to. gpuvm never removes them on its own", Auth: authAdmin, Status: 200, Answer: api.OrphanList{}, Errors: []int{503}},
	{Method: "DELETE", Path: "/v1/admin/orphans/{id}", Summary: "Delete an orphan: a domain with the volumes its metadata names, a volume, or a device (its backend checks the installation it was reported with)", Auth: authAdmin, Params: []param{pOrphan}, Status: 200, Answer: api.Orphan{}, Errors: []int{404, 503}},
	{Method: "POST", Path: "/v1/admin/orphans/{id}/adopt", Summary: "Make an orphaned domain of this installation a VM of a user again, running or stopped as it is, with the GPU devices made for it", Auth: authAdmin, Params: []param{pOrphan}, Body: api.AdoptRequest{}, Status: 201, Answer: api.VM{}, Errors: []int{400, 404, 409, 413, 422, 503}},
	{Method: "POST", Path: "/v1/admin/volumes/adopt", Summary: "Make an orphaned data disk of this installation (its file in the pool, whose volume row is lost) a detached data disk of a user again; its size is read from the pool, and no quota is checked. Another installation's disk cannot be adopted (409): delete it with DELETE /v1/admin/orphans/{id}", Auth: authAdmin, Body: api.AdoptVolumeRequest{}, Status: 201, Answer: api.Volume{}, Errors: []int{400, 404, 409, 413, 422, 503}},
}

var pOrphan = param{Name: "id", In: "path", Description: "the orphan's ID, as GET /v1/admin/orphans lists it", Type: "string"}

func (s *Server) orphanRoutes(admin *gin.RouterGroup) {
	admin.GET("/admin/orphans", s.requireOrphans, s.listOrphans)
	admin.DELETE("/admin/orphans/:id", s.requireOrphans, s.deleteOrphan)
	admin.POST("/admin/orphans/:id/adopt", s.requireOrphans, s.adoptOrphan)
	admin.POST("/admin/volumes/adopt", s.requireOrphans, s.adoptVolume)
}

func (s *Server) requireOrphans(c *gin.Context) {
	if s.Orphans == nil {
		s.writeProblem(c, with(errUnavailable, "this gpuvmd does not reconcile a host"))
		return
	}
	c.Next()
}

func (s *Server) listOrphans(c *gin.Context) {
	items, at, err := s.Orphans.CheckOrphans(c.Request.Context())
	if err != nil {
		// What could be judged is listed; the rest is logged.
		s.log.Warn("the host could not be compared with the database in full", "err", err)
	}
	out := api.OrphanList{Installation: s.Orphans.Installation(), Items: items}
	if !at.IsZero() {
		out.CheckedAt = &at
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) deleteOrphan(c *gin.Context) {
	o, err := s.Orphans.DeleteOrphan(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeProblem(c, orphanProblem(err))
		return
	}
	s.log.Warn("orphan deleted", "by", user(c).Name, "orphan", o.ID, "kind", o.Kind, "name", o.Name)
	c.JSON(http.StatusOK, o)
}

func (s *Server) adoptOrphan(c *gin.Context) {
	var req api.AdoptRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.Owner) == "":
		s.writeProblem(c, withField(errBadRequest, "owner", "name the user the adopted VM is to belong to"))
		return
	case !userName.MatchString(req.Owner):
		s.writeProblem(c, withField(errValidation, "owner", fmt.Sprintf("no user can be called %q: a user name is lower-case letters, digits and dashes, at most 63 characters", clip(req.Owner, 80))))
		return
	case req.Name != "" && !vmName.MatchString(req.Name):
		s.writeProblem(c, withField(errValidation, "name", "a name is lower-case letters, digits and dashes, starts with a letter, at most 63 characters"))
		return
	case req.Profile != "" && s.config().Profiles[req.Profile] == nil:
		s.writeProblem(c, withField(errValidation, "profile", fmt.Sprintf("no profile is called %q", clip(req.Profile, 80))))
		return
	}
	vm, err := s.Orphans.AdoptOrphan(c.Request.Context(), c.Param("id"), req, user(c).Name)
	if err != nil {
		s.writeProblem(c, orphanProblem(err))
		return
	}
	auditVM(c, vm) // the audit entry names the VM it became
	allocs, err := s.Store.ListAllocations(c.Request.Context(), vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.JSON(http.StatusCreated, toAPIVM(vm, allocs))
}

func (s *Server) adoptVolume(c *gin.Context) {
	var req api.AdoptVolumeRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.File) == "":
		s.writeProblem(c, withField(errBadRequest, "file", "name the orphaned data disk: its pool/name as 'gpuvm admin orphans' lists it"))
		return
	case len(req.File) > 1024 || strings.ContainsRune(req.File, 0):
		s.writeProblem(c, withField(errValidation, "file", "not the name of a volume"))
		return
	case strings.TrimSpace(req.Owner) == "":
		s.writeProblem(c, withField(errBadRequest, "owner", "name the user the adopted data disk is to belong to"))
		return
	case !userName.MatchString(req.Owner):
		s.writeProblem(c, withField(errValidation, "owner", fmt.Sprintf("no user can be called %q: a user name is lower-case letters, digits and dashes, at most 63 characters", clip(req.Owner, 80))))
		return
	}
	if req.Name != "" {
		if p := checkVolumeName("name", req.Name); p != nil {
			s.writeProblem(c, p)
			return
		}
	}
	v, err := s.Orphans.AdoptVolume(c.Request.Context(), req, user(c).Name)
	if err != nil {
		var off interface{ Unavailable() bool }
		if errors.As(err, &off) && off.Unavailable() {
			err = with(errUnavailable, err.Error())
		} else {
			err = orphanProblem(err)
		}
		s.writeProblem(c, err)
		return
	}
	auditTarget(c, "volume/"+v.Owner+"/"+v.Name)
	auditDetail(c, "adopted orphaned data disk %s", clip(req.File, 200))
	c.JSON(http.StatusCreated, toAPIVolume(v, nil))
}

// orphanProblem maps the orchestrator's answers to problems.
func orphanProblem(err error) error {
	detail := err.Error()
	switch {
	case errors.Is(err, store.ErrNotFound):
		return with(errNotFound, detail)
	case errors.Is(err, store.ErrNameTaken):
		return withField(errConflict, "name", detail)
	case errors.Is(err, store.ErrSlotTaken), errors.Is(err, store.ErrConflict):
		// ErrNameTaken is an ErrConflict too: it is matched first.
		return with(errConflict, detail)
	case errors.Is(err, store.ErrInvalid):
		field := ""
		switch {
		case strings.Contains(detail, "owner:"):
			field = "owner"
		case strings.Contains(detail, "profile"):
			field = "profile"
		}
		return withField(errValidation, field, detail)
	}
	return err
}
