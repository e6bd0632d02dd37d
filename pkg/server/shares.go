package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/shares"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// shareRoutes adds the shares' routes.
func (s *Server) shareRoutes(g *gin.RouterGroup) {
	g.GET("/shares", s.listShares)
}

// shareAPIRoutes are the routes of this file, for the OpenAPI document.
var shareAPIRoutes = []route{
	{Method: "GET", Path: "/v1/shares", Summary: "The admin-declared shares the caller may mount, with their mode (rw or ro), the rule that gives it, and whether the share is available on this host (admins: every share, with its host path)", Auth: authUser, Status: 200, Answer: api.ShareList{}, Errors: []int{503}},
}

// shareNameRE is a share's name (config's named blocks).
var shareNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// errShareAccess refuses a VM with a share its owner may not mount.
var errShareAccess = &Problem{Type: ProblemBase + "share-access", Title: "The share is not yours to mount", Status: http.StatusForbidden}

// listShares answers GET /v1/shares.
func (s *Server) listShares(c *gin.Context) {
	u := user(c)
	cfg := s.config()
	out := api.ShareList{Shares: []api.Share{}}
	if cfg == nil {
		c.JSON(http.StatusOK, out)
		return
	}
	all := cfg.Server.Storage.Shares
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	read := s.shareUsage()
	for _, n := range names {
		sh := all[n]
		mode, rule := sh.Access(u.Name, u.Groups)
		if mode == "" && !u.Admin {
			continue
		}
		a := api.Share{Name: n, Description: sh.Description, Mode: mode, Rule: rule, Mount: sh.Mount, Available: true}
		if u.Admin {
			a.Path = sh.Path
		}
		a.Unavailable, a.Enforcement = shareState(sh, mode)
		a.Available = a.Unavailable == ""
		a.QuotaBytes = sh.Quota
		if u, ok := read[n]; ok && sh.Quota != nil {
			used := u.UsedBytes
			a.UsedBytes, a.QuotaEnforcement, a.QuotaNote = &used, u.Enforcement, u.Note
		}
		out.Shares = append(out.Shares, a)
	}
	c.JSON(http.StatusOK, out)
}

// shareUsage is what the quotas last read of the shares, by name (read
// once a request: HomeUsage's rows of kind share).
func (s *Server) shareUsage() map[string]api.VolumeUsage {
	out := map[string]api.VolumeUsage{}
	if s.HomeUsage == nil {
		return out
	}
	for _, u := range s.HomeUsage.Usage() {
		if u.Kind == api.VolumeShare {
			out[u.Name] = u
		}
	}
	return out
}

// shareState says why sh cannot be mounted in mode on this host ("" when
// it can), and how a read-only mode is enforced.
func shareState(sh *config.Share, mode string) (unavailable, enforcement string) {
	if err := shares.Available(sh.Path); err != nil {
		unavailable = err.Error()
	}
	if mode != config.ShareReadOnly {
		return unavailable, ""
	}
	if err := shares.CanEnforceReadOnly(); err != nil {
		if unavailable == "" {
			unavailable = err.Error() + ": the share is not offered read-only-unenforced"
		}
		return unavailable, "none"
	}
	return unavailable, shares.EnforcedBindMount
}

// checkVMShares checks the shares a VM is asked with (req) and those of
// its profile p for user u: at most config.MaxVMShares, each a declared
// share named once (422, field shares[i]), each one u may mount (403,
// naming the share).
func checkVMShares(cfg *config.Config, u *store.User, p *config.Profile, req []string) *Problem {
	if len(req) > config.MaxVMShares {
		return withField(errValidation, "shares", fmt.Sprintf("at most %d shares, not %d", config.MaxVMShares, len(req)))
	}
	var declared map[string]*config.Share
	if cfg != nil {
		declared = cfg.Server.Storage.Shares
	}
	seen := map[string]bool{}
	for i, n := range req {
		field := fmt.Sprintf("shares[%d]", i)
		switch {
		case !shareNameRE.MatchString(n):
			return withField(errValidation, field, "a share name is 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit")
		case declared[n] == nil:
			return withField(errValidation, field, "unknown share "+strconv.Quote(n)+" (GET /v1/shares lists yours)")
		case seen[n]:
			return withField(errValidation, field, "share "+strconv.Quote(n)+" is named twice")
		}
		seen[n] = true
	}
	all := append(slices.Clone(p.Shares), req...)
	if len(all) > config.MaxVMShares {
		return withField(errValidation, "shares", fmt.Sprintf("profile %s mounts %d shares always; with these the VM would have %d, at most %d", p.Name, len(p.Shares), len(all), config.MaxVMShares))
	}
	for i, n := range all {
		sh := declared[n]
		if sh == nil { // a profile's share the reload removed: the start leaves it out
			continue
		}
		if mode, _ := sh.Access(u.Name, u.Groups); mode == "" {
			field := "shares"
			if j := i - len(p.Shares); j >= 0 {
				field = fmt.Sprintf("shares[%d]", j)
			}
			who := "you are"
			if i < len(p.Shares) {
				who = "profile " + p.Name + " mounts it always, and you are"
			}
			return withField(errShareAccess, field, fmt.Sprintf("share %s: %s in neither its read_write nor its read_only list (%s)", n, who, sh.Source))
		}
	}
	return nil
}

// vmShares are the shares of vm with its owner's mode now.
func (s *Server) vmShares(ctx context.Context, vm *store.VM) []api.VMShare {
	cfg := s.config()
	if cfg == nil {
		return nil
	}
	names := vmShareNames(cfg.Profiles[vm.Profile], vm)
	if len(names) == 0 {
		return nil
	}
	groups, err := s.Store.UserGroups(ctx, []string{vm.Owner})
	if err != nil {
		return nil
	}
	var out []api.VMShare
	for _, n := range names {
		v := api.VMShare{Name: n}
		if sh := cfg.Server.Storage.Shares[n]; sh != nil {
			v.Mode, _ = sh.Access(vm.Owner, groups[vm.Owner])
			v.Mount = sh.Mount
			if v.Mode == config.ShareReadOnly {
				_, v.Enforcement = shareState(sh, v.Mode)
			}
		}
		out = append(out, v)
	}
	return out
}

// vmShareNames are the shares of vm, a VM of p: the profile's and those
// its request asked for.
func vmShareNames(p *config.Profile, vm *store.VM) []string {
	var spec vmSpec
	if vm.Spec != "" && json.Unmarshal([]byte(vm.Spec), &spec) != nil {
		return p.ShareNames(nil)
	}
	return p.ShareNames(spec.Shares)
}
