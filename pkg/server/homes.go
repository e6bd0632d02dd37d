package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Homes (server.storage.homes, pkg/homes): listed by their person or an
// admin, and deleted only by them, with the person's name typed again as
// confirmation, never while a VM that mounts the home may run. Nothing
// else deletes a home: not a VM's deletion, a lease or the reconciler.

// homeRoutes adds the homes' routes.
func (s *Server) homeRoutes(g *gin.RouterGroup) {
	g.GET("/homes", s.listHomes)
	g.DELETE("/homes/:user", s.deleteHome)
}

// homeAPIRoutes are the routes of this file, for the OpenAPI document.
var homeAPIRoutes = []route{
	{Method: "GET", Path: "/v1/homes", Summary: "The caller's home (admins: every home under the homes' root, with its directory), with what it uses as the home quotas last read it and the node it lives on (home_host)", Auth: authUser, Status: 200, Answer: api.HomeList{}, Errors: []int{404}},
	{Method: "DELETE", Path: "/v1/homes/{user}", Summary: "Delete a person's home and everything in it: the person or an admin, with confirm=<user>; refused (409, naming them) while a VM of theirs that mounts it is not stopped, failed or deleted. Another person's home is a 404 for a non-admin", Auth: authUser, Params: []param{pHomeUser, pConfirm}, Status: 204, Errors: []int{404, 409, 422}},
}

var (
	pHomeUser = param{Name: "user", In: "path", Description: "the person whose home it is", Type: "string"}
	pConfirm  = param{Name: "confirm", In: "query", Description: "the person's name typed again: required", Type: "string"}
)

// homesOn answers 404 when this server gives no homes.
func (s *Server) homesOn(c *gin.Context) (root, mount string, ok bool) {
	cfg := s.config()
	if cfg == nil || !cfg.Server.Storage.Homes.Enabled {
		s.writeProblem(c, with(errNotFound, "this server gives no homes (server.storage.homes)"))
		return "", "", false
	}
	h := cfg.Server.Storage.Homes
	return h.Root, h.Mount, true
}

// GET /v1/homes
func (s *Server) listHomes(c *gin.Context) {
	root, mount, ok := s.homesOn(c)
	if !ok {
		return
	}
	u := user(c)
	names := []string{u.Name}
	if u.Admin {
		var err error
		if names, err = homeNames(root); err != nil {
			s.writeProblem(c, err)
			return
		}
	}
	hosts, err := s.Store.HomeHosts(c.Request.Context(), names)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.HomeList{Homes: []api.Home{}}
	for _, n := range names {
		dir, err := homes.Path(root, n)
		if err != nil {
			continue
		}
		h := api.Home{User: n, Mount: mount, HomeHost: hosts[n]}
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			h.Exists = true
		}
		if u.Admin {
			h.Dir = dir
		}
		if h.Exists {
			lh := s.listedHome(n, mount)
			h.UsedBytes, h.QuotaBytes, h.Enforcement, h.Note = lh.UsedBytes, lh.QuotaBytes, lh.Enforcement, lh.Note
		}
		out.Homes = append(out.Homes, h)
	}
	c.JSON(http.StatusOK, out)
}

// homeNames are the homes under root: its directories named as people.
func homeNames(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the homes: %w", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := homes.Path(root, e.Name()); err == nil && e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// DELETE /v1/homes/{user}?confirm=<user>
func (s *Server) deleteHome(c *gin.Context) {
	root, _, ok := s.homesOn(c)
	if !ok {
		return
	}
	u, ctx, who := user(c), c.Request.Context(), c.Param("user")
	auditTarget(c, "home/"+clip(who, 80))
	if _, err := homes.Path(root, who); err != nil {
		s.writeProblem(c, withField(errValidation, "user", fmt.Sprintf("%s is not a person's name", strconv.QuoteToASCII(clip(who, 80)))))
		return
	}
	if who != u.Name && !u.Admin {
		s.writeProblem(c, withField(errNotFound, "user", "no home of "+who))
		return
	}
	confirm, has := c.GetQuery("confirm")
	switch {
	case !has || confirm == "":
		s.writeProblem(c, withField(errValidation, "confirm", "deleting a home deletes every file in it: type the person's name again as confirm="+who))
		return
	case confirm != who:
		s.writeProblem(c, withField(errValidation, "confirm", fmt.Sprintf("confirm is %s, not the person's name %q", strconv.QuoteToASCII(clip(confirm, 80)), who)))
		return
	}
	// The check that no VM may mount the home runs with the home held:
	// a start of the person's VM meanwhile (its homes.Ensure) waits: one
	// of this gpuvmd, of another on this host, or of another node whose
	// homes root is the same storage where its filesystem honours flock(2)
	// (homes.Remove). A node with its own homes root makes or finds its
	// own directory, not held.
	inUse := func() error {
		busy, err := s.vmsMountingHome(ctx, who)
		if err != nil {
			return err
		}
		if len(busy) > 0 {
			return withField(errConflict, "user", fmt.Sprintf("%s's home is mounted by VMs that are not stopped: %s; stop or delete them first", who, strings.Join(busy, ", ")))
		}
		return nil
	}
	// Where the home lived is forgotten (the next is made where the
	// person's next VM runs) with the home still held, as a VM's start
	// records it (orchestrator's lifecycle.home): a start that makes the
	// home again records it after, never before.
	forget := func() {
		if err := s.Store.ForgetHomeHost(ctx, who, s.Host); err != nil {
			s.log.Error("the deleted home is still recorded on this host: the person's next VMs are placed here first", "user", who, "host", s.Host, "err", err)
		}
	}
	if err := homes.Remove(root, who, confirm, inUse, forget); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.writeProblem(c, withField(errNotFound, "user", "no home of "+who))
			return
		}
		if errors.Is(err, homes.ErrNotAHome) || errors.Is(err, homes.ErrBusy) {
			s.writeProblem(c, withField(errConflict, "user", err.Error()))
			return
		}
		s.writeProblem(c, err)
		return
	}
	if who != u.Name {
		auditDetail(c, "admin override: home of %s", who)
	}
	s.log.Warn("home deleted", "user", who, "by", u.Name)
	c.Status(http.StatusNoContent)
}

// vmsMountingHome names owner's VMs that mount their home (their profile
// has one, or is gone) and are not stopped, failed or deleted: a stopped
// VM whose start is under way (phase starting, set before the start makes
// the home and starts the domain on it) counts.
func (s *Server) vmsMountingHome(ctx context.Context, owner string) ([]string, error) {
	cfg := s.config()
	vms, err := store.AllVMs(ctx, s.Store, store.VMFilter{Owner: owner})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, vm := range vms {
		state := vm.State
		switch {
		case vm.State == store.VMStopped && vm.Phase == api.PhaseStarting:
			state = api.PhaseStarting
		case vm.State == store.VMStopped, vm.State == store.VMFailed, vm.State == store.VMDeleted:
			continue
		}
		if p := cfg.Profiles[vm.Profile]; p != nil && !p.Home {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s)", vm.Name, state))
	}
	return out, nil
}

// setVMHomes fills in, for each of vms whose profile mounts its owner's
// home, the node that home lives on and whether the VM is on another
// (api.VM's HomeHost and AwayFromHome), from one read of the owners' home
// hosts. A read that fails leaves them out: the VMs are answered without.
func (s *Server) setVMHomes(ctx context.Context, vms ...*api.VM) {
	cfg := s.config()
	if cfg == nil || !cfg.Server.Storage.Homes.Enabled {
		return
	}
	var owners []string
	mounts := make([]bool, len(vms))
	for i, vm := range vms {
		if p := cfg.Profiles[vm.Profile]; p == nil || !p.Home || vm.State == store.VMDeleted {
			continue
		}
		mounts[i] = true
		owners = append(owners, vm.Owner)
	}
	if len(owners) == 0 {
		return
	}
	hosts, err := s.Store.HomeHosts(ctx, owners)
	if err != nil {
		s.log.Warn("VMs answered without the hosts of their homes", "vms", len(owners), "err", err)
		return
	}
	for i, vm := range vms {
		if !mounts[i] {
			continue
		}
		vm.HomeHost = hosts[vm.Owner]
		vm.AwayFromHome = vm.HomeHost != "" && vm.Host != "" && vm.Host != vm.HomeHost
	}
}
