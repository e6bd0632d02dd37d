package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The one-time desktop password. createVM makes it (newCredential) and the
// store keeps it with the VM; the seed gets only its SHA-512 crypt hash. POST
// /v1/vms/{id}/credentials gives it to the VM's owner once — not to admins,
// who can reach every VM's console anyway but should not learn a person's
// password — and the audit log records every read and every refusal. The
// password is in no log line, event, audit detail or VM answer.
//
// Reading it spends it, so it is a POST, under the defence of every change:
// with the portal's cookie it needs the session's CSRF token and this
// origin (portal.go). As a GET, any page of the same site (another port of
// the host, a guest's web app through a tunnel on 127.0.0.1) could have
// spent it with the owner's cookie. A GET is answered 405 (Allow: POST).

// errCredentialsRead is the second read of a desktop password.
var errCredentialsRead = &Problem{Type: ProblemBase + "credentials-read", Title: "The desktop password was already read", Status: http.StatusGone}

// errNoPassword is a VM whose profile's guest uses no one-time password.
var errNoPassword = &Problem{Type: ProblemBase + "no-password", Title: "The VM has no desktop password", Status: http.StatusConflict}

// credentialsAPIRoutes document the credentials route (apiRoutes).
var credentialsAPIRoutes = []route{
	{Method: "POST", Path: "/v1/vms/{id}/credentials", Summary: "The VM's one-time desktop password and guest user, for its owner only (not admins), once: a second read is 410 (read_at says when it was read); 409 when the VM's profile uses none (access.password is false). A POST, as it spends the password (with the portal's cookie, the session's X-CSRF-Token); no body. Audited",
		Auth: authUser, Params: []param{pVM}, Status: 200, Answer: api.CredentialsResponse{}, Errors: []int{400, 403, 404, 409, 410, 413, 503}},
}

// newCredential makes the one-time desktop password of a new VM of owner.
func newCredential(owner string) (*store.VMCredential, error) {
	pw, err := cloudinit.NewPassword()
	if err != nil {
		return nil, err
	}
	hash, err := cloudinit.HashPassword(pw)
	if err != nil {
		return nil, err
	}
	return &store.VMCredential{Login: cloudinit.LoginName(owner), Password: pw, PasswordHash: hash}, nil
}

// takeCredentials is POST /v1/vms/{id}/credentials.
func (s *Server) takeCredentials(c *gin.Context) {
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	u := user(c)
	if vm.Owner != u.Name {
		s.writeProblem(c, with(errForbidden, "only the VM's owner may read its desktop password; admins do not get it"))
		return
	}
	if vm.State == store.VMDeleted {
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" is deleted"))
		return
	}
	if p := s.vmProfile(vm); p != nil && !p.UsesPassword() { // desktop.go
		s.writeProblem(c, with(errNoPassword, noPasswordDetail(vm, p)))
		return
	}
	cr, err := s.Store.TakeVMCredential(c.Request.Context(), vm.ID, u.Name)
	var read *store.CredentialReadError
	switch {
	case errors.As(err, &read):
		p := with(errCredentialsRead, fmt.Sprintf("the password of VM %q was read at %s, and gpuvmd keeps no copy: set a new one inside the guest (gpuvm ssh %s, then passwd), or make a new VM",
			vm.Name, read.ReadAt.UTC().Format("2006-01-02 15:04 UTC"), vm.Name))
		at := read.ReadAt.UTC()
		p.ReadAt = &at
		s.writeProblem(c, p)
		return
	case errors.Is(err, store.ErrNotFound):
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" has no desktop password (it was made before gpuvmd made them)"))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	}
	auditDetail(c, "desktop password of guest user %s given to the owner", cr.Login)
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, api.CredentialsResponse{VMID: vm.ID, User: cr.Login, Password: cr.Password, ReadAt: cr.ReadAt.UTC()})
}

// noPasswordDetail says why a VM of profile p has no desktop password, and
// what reaches it instead.
func noPasswordDetail(vm *store.VM, p *config.Profile) string {
	var ways []string
	if d := p.DesktopOffered(); d != "" {
		ways = append(ways, "gpuvm desktop "+vm.Name)
	}
	if p.ConsoleOffered() != "" {
		ways = append(ways, "gpuvm console "+vm.Name)
	}
	if p.NetworkOffered() {
		ways = append(ways, "gpuvm ssh "+vm.Name)
	}
	why := "its cloud-init template does not set password_hash"
	if p.CloudInit == nil {
		why = "it has no cloud_init block to set one"
	}
	msg := fmt.Sprintf("profile %s makes no one-time password for VM %q: its guest uses none (%s)", p.Name, vm.Name, why)
	if len(ways) > 0 {
		msg += "; reach it with " + strings.Join(ways, " or ")
	}
	return msg
}
