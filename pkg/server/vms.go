package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Limits of a VM's SSH keys: how many, and how long each (an RSA 16384-bit
// key is about 2.8 kB).
const (
	maxSSHKeys     = 64
	maxSSHKeyBytes = 16 << 10
)

var vmName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

var vmStates = []string{store.VMQueued, store.VMAllocating, store.VMCreating, store.VMRunning, store.VMStopping,
	store.VMStopped, store.VMDeleting, store.VMDeleted, store.VMFailed}

// Admitter applies the sharing policy to a VM asked for, before it is
// queued (the orchestrator): Refuse when a rule means it can never start,
// with the Reason naming the rule; otherwise the Reason is what keeps it
// from starting now (none if nothing in the rules does). The server writes
// the reason for people (Reason.Text) only here, at the edge.
type Admitter interface {
	Admit(ctx context.Context, user string, groups []string, profile string, hours int) (scheduler.Admission, error)
}

// errPolicy refuses a VM that a rule of the sharing policy (a quota, a time
// window, a GPU-hour budget) means can never start.
var errPolicy = &Problem{Type: ProblemBase + "policy", Title: "Refused by the sharing policy", Status: http.StatusForbidden}

func toAPIVM(vm *store.VM, allocs []store.Allocation) api.VM {
	out := api.VM{ID: vm.ID, Name: vm.Name, Owner: vm.Owner, Profile: vm.Profile, State: vm.State, Phase: vm.Phase,
		Reason: vm.StateReason, Host: vm.Host, Hours: vm.Hours, LeaseEnd: vm.LeaseEnd, CreatedAt: vm.CreatedAt, UpdatedAt: vm.UpdatedAt}
	out.StartAt = vm.StartAt
	// Only a VM made on a host has host keys: a page of 1,000 queued VMs
	// does not decode 1,000 requests to find none.
	if strings.Contains(vm.Spec, `"ssh_host_keys"`) {
		var spec vmSpec
		if json.Unmarshal([]byte(vm.Spec), &spec) == nil {
			out.SSHHostKeys = spec.SSHHostKeys
		}
	}
	if strings.Contains(vm.Spec, `"previous_profile"`) {
		var spec vmSpec
		if json.Unmarshal([]byte(vm.Spec), &spec) == nil {
			out.PreviousProfile = spec.PreviousProfile
		}
	}
	if vm.State == store.VMQueued {
		out.QueuePosition = vm.QueuePosition
	}
	for _, a := range allocs {
		if a.State == store.AllocReleased {
			continue
		}
		g := api.VMGPU{Address: a.GPUAddress, Kind: string(a.Kind), Type: a.Profile, Device: a.DeviceID}
		if a.Kind == gpu.KindMIG {
			p := a.PlacementStart
			g.Placement = &p
		}
		out.GPUs = append(out.GPUs, g)
	}
	return out
}

func toAPIOp(op *store.Operation) api.Operation {
	return api.Operation{ID: op.ID, VMID: op.VMID, Kind: op.Kind, State: op.State, Step: op.Step, Error: op.Error,
		CreatedAt: op.CreatedAt, FinishedAt: op.FinishedAt}
}

// vmSpec is what the VM's spec column keeps of the request.
type vmSpec struct {
	Hours   int      `json:"hours"`
	SSHKeys []string `json:"ssh_keys,omitempty"`
	// Task is the task the VM serves (tasks.go; store.SpecTask).
	Task string `json:"task,omitempty"`
	// SSHHostKeys are what the orchestrator adds at create: the public
	// halves of the guest's host keys (orchestrator.SpecHostKeys).
	SSHHostKeys []string `json:"ssh_host_keys,omitempty"`
	// Shares are the shares asked for (orchestrator.SpecShares); the
	// profile's are not repeated here.
	Shares []string `json:"shares,omitempty"`
	// PreviousProfile and ResizeTo are what a resize records
	// (orchestrator.ResizeOfSpec): the profile the VM had before its last
	// one, and the target of one under way.
	PreviousProfile string `json:"previous_profile,omitempty"`
	ResizeTo        string `json:"resize_to,omitempty"`
}

func (s *Server) createVM(c *gin.Context) {
	var req api.CreateVMRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	vm, op, p, ok := s.makeVM(c, req, nil)
	if !ok {
		return
	}
	c.Header("Location", "/v1/vms/"+vm.ID)
	out := toAPIVM(vm, nil)
	out.Access = vmAccess(p)
	c.JSON(http.StatusAccepted, api.CreateVMResponse{VM: out, Operation: toAPIOp(op)})
}

// newVMName makes a name up for a VM its person did not name (a test
// makes its own).
var newVMName = generatedName

// generatedName is a name for a VM of profile that its person did not
// name: the profile's name (or "vm") and six random hex digits.
func generatedName(profile string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := strings.ToLower(profile)
	if !vmName.MatchString(name + "-x") {
		name = "vm"
	}
	return strings.TrimRight(name[:min(len(name), 55)], "-") + "-" + hex.EncodeToString(b)
}

// makeVM checks a request for a VM and queues the VM, as POST /v1/vms
// does, and as POST /v1/tasks does for the VM of task (nil for a VM of
// none; a task's request has no Idempotency-Key, and its VM's spec names
// the task). It answers the request itself when it returns false: a
// problem, or the first answer to a request with the same Idempotency-Key.
// A VM of no task is audited in the transaction that makes it.
func (s *Server) makeVM(c *gin.Context, req api.CreateVMRequest, task *store.Task) (*store.VM, *store.Operation, *config.Profile, bool) {
	u := user(c)
	var p *config.Profile
	if s.Config != nil {
		if q := s.Config.Load().Profiles[req.Profile]; q != nil && (u.Admin || q.Allows(u.Name, u.Groups)) {
			p = q
		}
	}
	if req.Profile == "" {
		s.writeProblem(c, withField(errValidation, "profile", "name the profile to make the VM from"))
		return nil, nil, nil, false
	}
	if p == nil {
		// A profile the caller may not use is as absent as an unknown one.
		s.writeProblem(c, withField(errNotFound, "profile", "unknown profile "+strconv.Quote(req.Profile)))
		return nil, nil, nil, false
	}
	if req.Name != "" && !vmName.MatchString(req.Name) {
		s.writeProblem(c, withField(errValidation, "name", "a name is lower-case letters, digits and dashes, starts with a letter, at most 63 characters"))
		return nil, nil, nil, false
	}
	// Hours are compared as whole numbers before any arithmetic on them:
	// time.Duration(hours)*time.Hour overflows past 2562047 hours.
	maxHours := p.Lease.MaxHours()
	switch {
	case req.Hours < 0:
		s.writeProblem(c, withField(errValidation, "hours", "hours must be positive"))
		return nil, nil, nil, false
	case req.Hours == 0:
		req.Hours = p.Lease.DefaultHours()
	case req.Hours > maxHours:
		s.writeProblem(c, withField(errValidation, "hours", fmt.Sprintf("profile %s allows at most %d hours", p.Name, maxHours)))
		return nil, nil, nil, false
	}
	startAt, ok := s.checkStartAt(c, req.StartAt)
	if !ok {
		return nil, nil, nil, false
	}
	volumeIDs, ok := s.checkVMExtras(c, p, req)
	if !ok {
		return nil, nil, nil, false
	}
	ctx := c.Request.Context()
	key := c.GetHeader("Idempotency-Key")
	if task != nil {
		key = "" // a task is not replayed as a VM
	}
	canon, _ := json.Marshal(req)
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	if key != "" {
		if len(key) > 200 {
			s.writeProblem(c, withField(errBadRequest, "Idempotency-Key", "the key may have at most 200 characters"))
			return nil, nil, nil, false
		}
		if s.replay(c, u.Name, key, hash) {
			return nil, nil, nil, false
		}
	}
	// A profile no reporting host can ever serve would queue forever.
	if prob := s.refuseUnservable(ctx, p); prob != nil {
		s.writeProblem(c, prob)
		return nil, nil, nil, false
	}
	var waitReason string
	if s.Admission != nil {
		adm, err := s.Admission.Admit(ctx, u.Name, u.Groups, p.Name, req.Hours)
		switch {
		case err != nil:
			s.writeProblem(c, err)
			return nil, nil, nil, false
		case adm.Refuse:
			s.writeProblem(c, with(errPolicy, adm.Reason.Text()))
			return nil, nil, nil, false
		}
		waitReason = adm.Reason.Text()
	}
	name := req.Name
	if name == "" {
		name = newVMName(p.Name)
	}
	sp := vmSpec{Hours: req.Hours, SSHKeys: req.SSHKeys, Shares: req.Shares}
	if task != nil {
		sp.Task, name = task.ID, taskVMName(task.ID)
	}
	spec, _ := json.Marshal(sp)
	vm := &store.VM{Name: name, Owner: u.Name, Profile: p.Name, Spec: string(spec), Hours: req.Hours, Phase: api.PhaseQueued,
		DisplayPassword: newDisplayPassword()}
	vm.StateReason = waitReason
	if startAt != nil {
		vm.StartAt, vm.Phase, vm.StateReason = startAt, startAtPhase, startAtReason(*startAt)
	}
	if len(u.Groups) > 0 {
		vm.Group = u.Groups[0]
	}
	opts := store.CreateVMOptions{RequestedBy: u.Name, Volumes: volumeIDs, Task: task}
	if p.UsesPassword() { // a password the guest does not use would work nowhere
		cred, err := newCredential(vm.Owner) // credentials.go
		if err != nil {
			s.writeProblem(c, err)
			return nil, nil, nil, false
		}
		opts.Credential = cred
	}
	if key != "" {
		opts.IdempotencyKey = &store.IdempotencyKey{User: u.Name, Key: key, RequestHash: hash}
	}
	create := func() (*store.Operation, error) {
		if task == nil {
			opts.Audit = s.auditCreated(c, vm)
		}
		return s.Store.CreateVM(ctx, vm, opts)
	}
	op, err := create()
	// A name made up here that one of the person's VMs has already (one in
	// 16 million a pair) is made up again, not refused.
	for try := 0; errors.Is(err, store.ErrNameTaken) && req.Name == "" && task == nil && try < 3; try++ {
		name = newVMName(p.Name)
		vm.Name = name
		op, err = create()
	}
	if err == nil && opts.Audit != nil {
		s.auditWritten(c, opts.Audit)
	}
	switch {
	case errors.Is(err, store.ErrIdempotencyKeyUsed):
		if !s.replay(c, u.Name, key, hash) {
			s.writeProblem(c, err)
		}
		return nil, nil, nil, false
	case errors.Is(err, store.ErrNameTaken) && task == nil:
		s.writeProblem(c, withField(errConflict, "name", "you already have a VM called "+strconv.Quote(name)))
		return nil, nil, nil, false
	case err != nil && len(volumeIDs) > 0 && errors.Is(err, store.ErrConflict):
		s.writeProblem(c, volumeProblem(err, "volumes"))
		return nil, nil, nil, false
	case err != nil:
		s.writeProblem(c, err)
		return nil, nil, nil, false
	}
	s.wakeQueue()
	return vm, op, p, true
}

// checkVMExtras checks what a request adds to its profile — SSH keys,
// shares, data disks — answering a refusal itself; it gives the data
// disks' IDs.
func (s *Server) checkVMExtras(c *gin.Context, p *config.Profile, req api.CreateVMRequest) ([]string, bool) {
	if len(req.SSHKeys) > maxSSHKeys {
		s.writeProblem(c, withField(errValidation, "ssh_keys", fmt.Sprintf("at most %d SSH keys, not %d", maxSSHKeys, len(req.SSHKeys))))
		return nil, false
	}
	for i, k := range req.SSHKeys {
		if len(k) > maxSSHKeyBytes {
			s.writeProblem(c, withField(errValidation, fmt.Sprintf("ssh_keys[%d]", i), fmt.Sprintf("an SSH public key has at most %d bytes", maxSSHKeyBytes)))
			return nil, false
		}
		if strings.TrimSpace(k) == "" || strings.ContainsAny(k, "\r\n") {
			s.writeProblem(c, withField(errValidation, fmt.Sprintf("ssh_keys[%d]", i), "an SSH public key is one non-empty line"))
			return nil, false
		}
	}
	if prob := checkVMShares(s.config(), user(c), p, req.Shares); prob != nil { // shares.go
		s.writeProblem(c, prob)
		return nil, false
	}
	return s.createVolumes(c, user(c).Name, req.Volumes) // volumes.go
}

// replay answers a request whose idempotency key was used before: with the
// first answer when the body is the same, 409 when it is not. It reports
// whether it answered.
func (s *Server) replay(c *gin.Context, userName, key, hash string) bool {
	ctx := c.Request.Context()
	k, err := s.Store.GetIdempotencyKey(ctx, userName, key)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		s.writeProblem(c, err)
		return true
	}
	if k.RequestHash != hash {
		s.writeProblem(c, withField(errConflict, "Idempotency-Key", "this Idempotency-Key was used with another request body"))
		return true
	}
	vm, err := s.Store.GetVM(ctx, k.VMID)
	if err != nil {
		s.writeProblem(c, err)
		return true
	}
	op, err := s.Store.GetOperation(ctx, k.OperationID)
	if err != nil {
		s.writeProblem(c, err)
		return true
	}
	allocs, _ := s.Store.ListAllocations(ctx, vm.ID)
	auditVM(c, vm)
	auditDetail(c, "the answer to an earlier request with the same Idempotency-Key")
	c.Header("Location", "/v1/vms/"+vm.ID)
	out := toAPIVM(vm, allocs)
	out.Access = vmAccess(s.vmProfile(vm)) // desktop.go
	c.JSON(http.StatusAccepted, api.CreateVMResponse{VM: out, Operation: toAPIOp(op)})
	return true
}

func (s *Server) listVMs(c *gin.Context) {
	u := user(c)
	f := store.VMFilter{After: c.Query("after")}
	if !u.Admin {
		f.Owner = u.Name
	} else {
		f.Owner = c.Query("owner") // documented, and ignored until now
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			s.writeProblem(c, withField(errBadRequest, "limit", "limit is a number from 1 to 1000"))
			return
		}
		f.Limit = n
	}
	if st := c.Query("state"); st != "" {
		for _, x := range strings.Split(st, ",") {
			if !slices.Contains(vmStates, x) {
				s.writeProblem(c, withField(errBadRequest, "state", fmt.Sprintf("unknown state %q (known: %s)", x, strings.Join(vmStates, ", "))))
				return
			}
			if !slices.Contains(f.States, x) { // a state named 50000 times is one SQL parameter, not 50000
				f.States = append(f.States, x)
			}
		}
	}
	page, err := s.Store.ListVMs(c.Request.Context(), f)
	if errors.Is(err, store.ErrInvalid) {
		s.writeProblem(c, withField(errBadRequest, "after", "the cursor is not one this server gave"))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	// The page's allocations in one query, not one per VM; none for a
	// queued VM: every way back to the queue gives its GPU back first, so
	// the admin's queue page of 1,000 asks for none (issue #26).
	var ids []string
	for i := range page.VMs {
		if page.VMs[i].State != store.VMQueued {
			ids = append(ids, page.VMs[i].ID)
		}
	}
	var allocs map[string][]store.Allocation // none read: a nil map reads as none
	if len(ids) > 0 {
		if allocs, err = s.Store.ListAllocationsForVMs(c.Request.Context(), ids); err != nil {
			s.writeProblem(c, err)
			return
		}
	}
	out := api.VMList{Items: make([]api.VM, 0, len(page.VMs)), Next: page.Next}
	for i := range page.VMs {
		vm := toAPIVM(&page.VMs[i], allocs[page.VMs[i].ID])
		vm.Access = vmAccess(s.vmProfile(&page.VMs[i])) // desktop.go
		out.Items = append(out.Items, vm)
	}
	read := make([]*api.VM, len(out.Items))
	for i := range out.Items {
		read[i] = &out.Items[i]
	}
	s.passwordsRead(c.Request.Context(), read...)               // desktop.go
	setHostStates(out.Items, s.hostStates(c.Request.Context())) // fleet.go
	s.setVMHomes(c.Request.Context(), read...)                  // homes.go
	for i := range out.Items {
		sayVM(c, &out.Items[i])
	}
	s.writeJSON(c, http.StatusOK, out) // jsonout.go: hundreds of kilobytes
}

// findVM finds a VM the caller may see by ID, or by name among the
// caller's own live VMs. Another user's VM is not found (admins see all).
func (s *Server) findVM(c *gin.Context) (*store.VM, bool) { return s.lookupVM(c, c.Param("id")) }

// lookupVM finds the VM ref names (its ID, or its name among the caller's
// VMs) if the caller may see it; otherwise it answers 404 and returns false.
func (s *Server) lookupVM(c *gin.Context, ref string) (*store.VM, bool) {
	u := user(c)
	ctx := c.Request.Context()
	vm, err := s.Store.GetVM(ctx, ref)
	if err == nil && (u.Admin || vm.Owner == u.Name) {
		auditVM(c, vm)
		return vm, true
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	vm, err = s.Store.GetVMByName(ctx, u.Name, ref)
	if err == nil {
		auditVM(c, vm)
		return vm, true
	}
	if !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	s.writeProblem(c, with(errNotFound, "no VM "+strconv.Quote(ref)))
	return nil, false
}

func (s *Server) getVM(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	allocs, err := s.Store.ListAllocations(c.Request.Context(), vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := toAPIVM(vm, allocs)
	out.Access = vmAccess(s.vmProfile(vm)) // desktop.go
	s.passwordsRead(c.Request.Context(), &out)
	s.setVMHomes(c.Request.Context(), &out) // homes.go
	if vm.Host != "" && vm.State != store.VMDeleted {
		out.HostState = s.hostStates(c.Request.Context())[vm.Host] // fleet.go
	}
	s.addLiveInfo(c, vm, &out)                         // addresses and console: here only, never in lists
	s.addLicenses(c, vm, &out)                         // licensing.go
	out.Capabilities = s.vmCapabilities(c, vm, allocs) // capabilities.go
	out.DriverChanges = s.vmDriverChanges(c, vm)       // driverchange.go
	out.Shares = s.vmShares(c.Request.Context(), vm)   // shares.go
	// The estimated start of a queued VM (estimate.go).
	s.vmEstimate(c.Request.Context(), vm, &out)
	sayVM(c, &out)
	c.JSON(http.StatusOK, out)
}

func (s *Server) deleteVM(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	if vm.State == store.VMDeleted {
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" is already deleted"))
		return
	}
	ops, err := s.Store.ListOperations(ctx, vm.ID)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	// A delete already under way is the answer to another.
	for i := range ops {
		if ops[i].Kind == store.OpDelete && !ops[i].Finished() {
			c.JSON(http.StatusAccepted, api.OperationResponse{Operation: toAPIOp(&ops[i])})
			return
		}
	}
	op := &store.Operation{VMID: vm.ID, Kind: store.OpDelete, RequestedBy: user(c).Name}
	if err := s.Store.CreateOperation(ctx, op); err != nil {
		s.writeProblem(c, err)
		return
	}
	if id := taskOfVM(vm); id != "" {
		// The task supervisor ends the task cancelled (tasks.go).
		auditDetail(c, "the VM of task %s: the task ends cancelled", id)
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	c.JSON(http.StatusAccepted, api.OperationResponse{Operation: toAPIOp(op)})
}

func (s *Server) getOperation(c *gin.Context) {
	u := user(c)
	ctx := c.Request.Context()
	op, err := s.Store.GetOperation(ctx, c.Param("id"))
	if err == nil {
		var vm *store.VM
		vm, err = s.Store.GetVM(ctx, op.VMID)
		if err == nil && !u.Admin && vm.Owner != u.Name {
			err = store.ErrNotFound
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, with(errNotFound, "no operation "+strconv.Quote(c.Param("id"))))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.JSON(http.StatusOK, toAPIOp(op))
}
