package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// Task arrays, retries and the warning signal (docs/tasks.md; pkg/task
// launches the VMs made after the submit).

// taskExtras is what a request asks for besides one command: an array,
// retries, a warning signal, parsed.
type taskExtras struct {
	array     task.Array
	retryOn   string
	warnSig   string
	warnLead  time.Duration
	hasArray  bool
	arraySpec string
}

// checkTaskExtras checks the array, the retries and the warning signal of
// req, whose time limit is limit. It answers the problem itself.
func (s *Server) checkTaskExtras(c *gin.Context, req *api.CreateTaskRequest, limit time.Duration) (taskExtras, bool) {
	var x taskExtras
	fail := func(field, detail string) (taskExtras, bool) {
		s.writeProblem(c, withField(errValidation, field, detail))
		return taskExtras{}, false
	}
	if req.Array != "" {
		a, err := task.ParseArray(req.Array)
		if err != nil {
			return fail("array", err.Error())
		}
		x.array, x.hasArray, x.arraySpec = a, true, req.Array
	}
	switch {
	case req.Retries < 0 || req.Retries > task.MaxRetries:
		return fail("retries", fmt.Sprintf("retries is from 0 to %d", task.MaxRetries))
	case req.Retries > 0 && len(req.RetryOn) == 0:
		return fail("retry_on", `say which ends are retried: exit codes such as [2, 137], or "node_fail", "boot_fail"`)
	case req.Retries == 0 && len(req.RetryOn) > 0:
		return fail("retries", "retry_on is given: say how many times (retries, 1 to 10)")
	}
	on, err := task.ParseRetryOn(req.RetryOn)
	if err != nil {
		return fail("retry_on", err.Error())
	}
	x.retryOn = on
	if req.Signal != "" {
		if x.warnSig, x.warnLead, err = task.ParseWarnSignal(req.Signal, limit); err != nil {
			return fail("signal", err.Error())
		}
	}
	return x, true
}

// checkTaskProfile checks a task against the profile it runs in (one the
// caller may use): the warning signal its guest can be sent, a guest the
// task's runner can be given, the time limit in hours within the lease.
// It answers the field and what is wrong; "" when nothing is.
func checkTaskProfile(p *config.Profile, warnSig string, hours int) (field, detail string) {
	if p.OS == "windows" && warnSig != "" && !slices.Contains(windows.TaskSignals, warnSig) {
		// The Windows runner sends TERM and INT as Ctrl+Break to the
		// command's process group; any other signal would do nothing.
		return "signal", fmt.Sprintf("profile %s runs Windows, where a task's command can be warned with TERM or INT only (Ctrl+Break), not %s", p.Name, warnSig)
	}
	if p.CloudInit == nil || p.OS == "windows" {
		return "profile", "profile " + p.Name + " gives its guests no cloud-init seed for a task's runner: tasks need a Linux profile with cloud_init"
	}
	if m := p.Lease.MaxHours(); hours > m {
		return "time_limit", fmt.Sprintf("profile %s allows at most %d hours", p.Name, m)
	}
	return "", ""
}

// checkArrayVM checks what making the array's VMs later needs, as makeVM
// does for one VM now: the profile (one the caller may not use is
// unknown), a host that can serve it, the admission, the start. It
// answers the problem itself.
func (s *Server) checkArrayVM(c *gin.Context, req *api.CreateTaskRequest, hours int) (*config.Profile, *time.Time, bool) {
	u := user(c)
	p := s.config().Profiles[req.Profile]
	if p == nil || !u.Admin && !p.Allows(u.Name, u.Groups) {
		s.writeProblem(c, withField(errNotFound, "profile", "unknown profile "+strconv.Quote(req.Profile)))
		return nil, nil, false
	}
	startAt, ok := s.checkStartAt(c, req.StartAt)
	if !ok {
		return nil, nil, false
	}
	ctx := c.Request.Context()
	if prob := s.refuseUnservable(ctx, p); prob != nil {
		s.writeProblem(c, prob)
		return nil, nil, false
	}
	if s.Admission != nil {
		adm, err := s.Admission.Admit(ctx, u.Name, u.Groups, p.Name, hours)
		switch {
		case err != nil:
			s.writeProblem(c, err)
			return nil, nil, false
		case adm.Refuse:
			s.writeProblem(c, with(errPolicy, adm.Reason.Text()))
			return nil, nil, false
		}
	}
	return p, startAt, true
}

// createTaskArray writes an array and its elements, none with a VM yet:
// the task supervisor makes them, at most the cap at once.
func (s *Server) createTaskArray(c *gin.Context, req *api.CreateTaskRequest, t *store.Task, x taskExtras) {
	hours := int(math.Ceil(float64(t.TimeLimitS) / 3600))
	_, startAt, ok := s.checkArrayVM(c, req, hours)
	if !ok {
		return
	}
	t.StartAt, t.ArraySpec, t.ArrayCap = startAt, x.arraySpec, x.array.Cap
	t.State, t.Reason = api.TaskPending, "waiting for its elements' VMs to be made"
	elems := make([]store.Task, len(x.array.Indices))
	for i, idx := range x.array.Indices {
		e := *t
		e.ID, e.ArrayIndex, e.ArrayCount = t.ID+"_"+strconv.Itoa(idx), &idx, len(elems)
		e.ArraySpec, e.ArrayCap, e.Reason = "", 0, "waiting for its VM to be made"
		elems[i] = e
	}
	if err := s.Store.CreateTaskArray(c.Request.Context(), t, elems); err != nil {
		s.writeProblem(c, err)
		return
	}
	auditTarget(c, "task/"+t.Owner+"/"+t.ID)
	auditDetail(c, "profile %s, array %s (%d elements), time limit %ds", t.Profile, clip(t.ArraySpec, 80), len(elems), t.TimeLimitS)
	c.Header("Location", "/v1/tasks/"+t.ID)
	out := sayTask(c, t)
	out.ArrayCounts = map[string]int{api.TaskPending: len(elems)}
	s.wakeTasks()
	c.JSON(202, out)
}

// LaunchTask makes the VM of a task that waits for one (an array's
// element, a retry's next attempt), as its submit would have: the task
// supervisor's Launch (pkg/task). A profile that is gone is
// task.ErrLaunchRefused.
func (s *Server) LaunchTask(ctx context.Context, t *store.Task) error {
	var p *config.Profile
	if cfg := s.config(); cfg != nil {
		p = cfg.Profiles[t.Profile]
	}
	if p == nil {
		return fmt.Errorf("%w: profile %s is not configured any more", task.ErrLaunchRefused, t.Profile)
	}
	hours := int(math.Ceil(float64(t.TimeLimitS) / 3600))
	spec, _ := json.Marshal(vmSpec{Hours: hours, Task: t.ID})
	vm := &store.VM{Name: launchVMName(t), Owner: t.Owner, Profile: p.Name, Spec: string(spec), Hours: hours, Phase: api.PhaseQueued,
		DisplayPassword: newDisplayPassword(), Group: t.VMGroup}
	if t.StartAt != nil && t.StartAt.After(s.Store.Now()) {
		vm.StartAt, vm.Phase, vm.StateReason = t.StartAt, startAtPhase, startAtReason(*t.StartAt)
	}
	opts := store.CreateVMOptions{RequestedBy: t.Owner, Launch: &store.TaskLaunch{TaskID: t.ID, Attempt: t.Attempt},
		LaunchReason: "its VM is queued"}
	if p.UsesPassword() {
		cred, err := newCredential(vm.Owner)
		if err != nil {
			return err
		}
		opts.Credential = cred
	}
	if _, err := s.Store.CreateVM(ctx, vm, opts); err != nil {
		return err
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	return nil
}

// launchVMName is the name of a VM made for a task after its submit:
// "task-", the random end of its ID, the element's index, the attempt.
func launchVMName(t *store.Task) string {
	id, _, _ := strings.Cut(t.ID, "_")
	name := taskVMName(id)
	if t.ArrayIndex != nil {
		name += "-" + strconv.Itoa(*t.ArrayIndex)
	}
	if t.Attempt > 1 {
		name += "-r" + strconv.Itoa(t.Attempt)
	}
	return name
}

// Bounds of a page of an array's elements (GET /v1/tasks/{id}).
const (
	defaultElementsPage = 100
	maxElementsPage     = 1000
)

// elementsPage is the page of an array's elements a GET of one task asks
// for: ?limit (1 to maxElementsPage) and ?after (the cursor of an earlier
// page: the index of its last element; -1 for the first page).
type elementsPage struct{ after, limit int }

// parseElementsPage reads the page from the query; it answers the
// problem itself.
func (s *Server) parseElementsPage(c *gin.Context) (elementsPage, bool) {
	pg := elementsPage{after: -1, limit: defaultElementsPage}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxElementsPage {
			s.writeProblem(c, withField(errBadRequest, "limit", fmt.Sprintf("limit is a number from 1 to %d", maxElementsPage)))
			return pg, false
		}
		pg.limit = n
	}
	if a := c.Query("after"); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 || n > task.MaxArrayIndex {
			s.writeProblem(c, withField(errBadRequest, "after", "the cursor is not one this server gave (an element's index, from elements_next)"))
			return pg, false
		}
		pg.after = n
	}
	return pg, true
}

// fillTask adds to an array's answer the counts of its elements by state
// and the page of its elements asked for; to a task that may retry, its
// attempts.
func (s *Server) fillTask(c *gin.Context, t *store.Task, out *api.Task, page elementsPage) error {
	ctx := c.Request.Context()
	if t.IsArray() {
		counts, err := s.Store.ArrayCounts(ctx, []string{t.ID})
		if err != nil {
			return err
		}
		out.ArrayCounts = counts[t.ID]
		elems, more, err := s.Store.ListArrayElementsAfter(ctx, t.ID, page.after, page.limit)
		if err != nil {
			return err
		}
		out.Elements = make([]api.Task, 0, len(elems))
		for i := range elems {
			out.Elements = append(out.Elements, sayTask(c, &elems[i]))
		}
		if more && len(elems) > 0 && elems[len(elems)-1].ArrayIndex != nil {
			out.ElementsNext = strconv.Itoa(*elems[len(elems)-1].ArrayIndex)
		}
	}
	if t.Retries > 0 {
		as, err := s.Store.ListTaskAttempts(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, a := range as {
			out.Attempts = append(out.Attempts, api.TaskAttempt{Attempt: a.Attempt, VMID: a.VMID, State: a.State, Reason: say(c, a.Reason),
				ExitCode: a.ExitCode, Signal: a.Signal, StartedAt: a.StartedAt, EndedAt: a.EndedAt})
		}
	}
	return nil
}

// warningSignal is a task's warning signal as submitted, "USR1@600s".
func warningSignal(t *store.Task) string {
	if t.WarnSignal == "" {
		return ""
	}
	return fmt.Sprintf("%s@%ds", t.WarnSignal, t.WarnLeadS)
}
