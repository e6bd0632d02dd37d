package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
)

// Bounds of a task's request (docs/tasks.md).
const (
	maxTaskCommand  = 64 << 10 // bytes of argv, or of the script
	maxTaskArgs     = 1024
	maxTaskEnv      = 64
	maxTaskEnvValue = 4 << 10
	maxKillWait     = api.TaskMaxKillWait
	defaultKillWait = api.TaskKillWait
	// taskFollowPoll is how often GET /v1/tasks/{id}/logs?follow=1 looks
	// for more output.
	taskFollowPoll = 300 * time.Millisecond
)

var taskEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func (s *Server) taskRoutes(g *gin.RouterGroup) {
	g.POST("/tasks", s.createTask)
	g.GET("/tasks", s.listTasks)
	g.GET("/tasks/:id", s.getTask)
	g.GET("/tasks/:id/logs", s.taskLogs)
	g.POST("/tasks/:id/cancel", s.cancelTask)
}

// taskVMName is the name of a task's VM: "task-" and the random end of
// the task's ID.
func taskVMName(id string) string {
	h := strings.ReplaceAll(id, "-", "")
	return "task-" + h[max(len(h)-8, 0):]
}

// taskOfVM is the task a VM serves, from its spec; "" for none.
func taskOfVM(vm *store.VM) string { return store.TaskOfSpec(vm.Spec) }

// sayTask is a task with its reason in the request's language (words.go).
func sayTask(c *gin.Context, t *store.Task) api.Task {
	out := toAPITask(t)
	out.Reason = say(c, out.Reason)
	for i := range out.InSteps {
		out.InSteps[i] = say(c, out.InSteps[i])
	}
	return out
}

func toAPITask(t *store.Task) api.Task {
	out := api.Task{ID: t.ID, Owner: t.Owner, Profile: t.Profile, Script: t.Script, TimeLimit: t.TimeLimitS, KillWait: t.KillWaitS,
		State: t.State, Reason: t.Reason, ExitCode: t.ExitCode, Signal: t.Signal, VMID: t.VMID, LogBytes: t.LogBytes,
		CreatedAt: t.CreatedAt, StartedAt: t.StartedAt, EndedAt: t.EndedAt, Array: t.ArraySpec, ArrayID: t.ArrayID, ArrayIndex: t.ArrayIndex,
		Retries: t.Retries, RetryOn: task.RetryOnList(t.RetryOn), Attempt: t.Attempt, WarningSignal: warningSignal(t), WarnedAt: t.WarnedAt,
		In: t.InVM, InSteps: t.InStepList()}
	if t.InVM != "" {
		out.InProfile = t.InProfile
	}
	if t.Command != "" {
		_ = json.Unmarshal([]byte(t.Command), &out.Command)
	}
	if t.Env != "" {
		_ = json.Unmarshal([]byte(t.Env), &out.Env)
	}
	return out
}

// checkTask checks what the VM's checks do not: the command, the
// environment and the times. It answers the problem itself.
func (s *Server) checkTask(c *gin.Context, req *api.CreateTaskRequest) (limit, killWait time.Duration, ok bool) {
	fail := func(field, detail string) (time.Duration, time.Duration, bool) {
		s.writeProblem(c, withField(errValidation, field, detail))
		return 0, 0, false
	}
	if (len(req.Command) == 0) == (req.Script == "") {
		return fail("command", "give a command (an argv) or a script, one of them")
	}
	size := len(req.Script)
	for _, a := range req.Command {
		size += len(a) + 1
	}
	switch {
	case len(req.Command) > maxTaskArgs:
		return fail("command", fmt.Sprintf("at most %d arguments, not %d", maxTaskArgs, len(req.Command)))
	case size > maxTaskCommand && req.Script != "":
		return fail("script", fmt.Sprintf("at most %d bytes, not %d", maxTaskCommand, size))
	case size > maxTaskCommand:
		return fail("command", fmt.Sprintf("at most %d bytes, not %d", maxTaskCommand, size))
	case len(req.Command) > 0 && req.Command[0] == "":
		return fail("command[0]", "the program to run is empty")
	}
	for i, a := range req.Command {
		if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			return fail(fmt.Sprintf("command[%d]", i), "an argument is UTF-8 text without NUL bytes")
		}
	}
	if strings.ContainsRune(req.Script, 0) || !utf8.ValidString(req.Script) {
		return fail("script", "a script is UTF-8 text without NUL bytes")
	}
	if len(req.Env) > maxTaskEnv {
		return fail("env", fmt.Sprintf("at most %d variables, not %d", maxTaskEnv, len(req.Env)))
	}
	for k, v := range req.Env {
		if !taskEnvName.MatchString(k) {
			return fail("env", fmt.Sprintf("%q is not a variable name (letters, digits and _, not first a digit)", clip(k, 40)))
		}
		if len(v) > maxTaskEnvValue || strings.ContainsRune(v, 0) || !utf8.ValidString(v) {
			return fail("env."+k, fmt.Sprintf("a value is UTF-8 text without NUL bytes, at most %d bytes", maxTaskEnvValue))
		}
	}
	if err := (&cloudinit.Task{ID: "check", Command: req.Command, Script: req.Script, Env: req.Env}).Check(); err != nil {
		return fail("command", err.Error())
	}
	limit, err := time.ParseDuration(req.TimeLimit)
	switch {
	case req.TimeLimit == "":
		return fail("time_limit", `give the time limit, such as "4h" or "90m"`)
	case err != nil:
		return fail("time_limit", fmt.Sprintf("%q is not a duration such as \"4h\" or \"90m\" (at most about 2562047h)", clip(req.TimeLimit, 40)))
	case limit < time.Second:
		return fail("time_limit", "the time limit is at least 1s")
	}
	killWait = defaultKillWait
	if req.KillWait != "" {
		if killWait, err = time.ParseDuration(req.KillWait); err != nil || killWait < 0 || killWait > maxKillWait {
			return fail("kill_wait", fmt.Sprintf("a duration from 0s to %s", maxKillWait))
		}
	}
	return limit, killWait, true
}

func (s *Server) createTask(c *gin.Context) {
	var req api.CreateTaskRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if req.Profile == "" {
		s.writeProblem(c, withField(errValidation, "profile", "name the profile to run the task in"))
		return
	}
	limit, killWait, ok := s.checkTask(c, &req)
	if !ok {
		return
	}
	x, ok := s.checkTaskExtras(c, &req, limit) // taskarrays.go
	if !ok {
		return
	}
	u := user(c)
	hours := int(math.Ceil(limit.Hours()))
	if p := s.config().Profiles[req.Profile]; p != nil && (u.Admin || p.Allows(u.Name, u.Groups)) {
		if field, detail := checkTaskProfile(p, x.warnSig, hours); field != "" {
			s.writeProblem(c, withField(errValidation, field, detail))
			return
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	t := &store.Task{ID: id.String(), Owner: u.Name, Profile: req.Profile, Script: req.Script,
		TimeLimitS: int64(math.Ceil(limit.Seconds())), KillWaitS: int64(killWait / time.Second), Retries: req.Retries, RetryOn: x.retryOn,
		WarnSignal: x.warnSig, WarnLeadS: int64(x.warnLead / time.Second), StartAt: req.StartAt, Attempt: 1}
	if len(u.Groups) > 0 {
		t.VMGroup = u.Groups[0]
	}
	if len(req.Command) > 0 {
		b, _ := json.Marshal(req.Command)
		t.Command = string(b)
	}
	if len(req.Env) > 0 {
		b, _ := json.Marshal(req.Env)
		t.Env = string(b)
	}
	if req.In != "" {
		s.createTaskIn(c, &req, t) // taskin.go
		return
	}
	if x.hasArray {
		s.createTaskArray(c, &req, t, x)
		return
	}
	vm, _, _, ok := s.makeVM(c, api.CreateVMRequest{Profile: req.Profile, Hours: hours, StartAt: req.StartAt}, t)
	if !ok {
		return
	}
	t.State, t.Reason = api.TaskPending, vm.StateReason
	auditTarget(c, "task/"+u.Name+"/"+t.ID)
	if rec := auditOf(c); rec != nil {
		rec.entry.VMID = vm.ID
	}
	auditDetail(c, "profile %s, time limit %s, VM %s", t.Profile, limit, vm.Name)
	c.Header("Location", "/v1/tasks/"+t.ID)
	s.wakeTasks()
	c.JSON(http.StatusAccepted, sayTask(c, t))
}

// wakeTasks has the task supervisor look at the tasks now.
func (s *Server) wakeTasks() {
	if s.Tasks != nil {
		s.Tasks.Wake()
	}
}

// findTask is the task of the path the caller may see (admins: any);
// another person's is not found.
func (s *Server) findTask(c *gin.Context) (*store.Task, bool) {
	u := user(c)
	t, err := s.Store.GetTask(c.Request.Context(), c.Param("id"))
	if err == nil && (u.Admin || t.Owner == u.Name) {
		auditTarget(c, "task/"+t.Owner+"/"+t.ID)
		return t, true
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, err)
		return nil, false
	}
	s.writeProblem(c, withField(errNotFound, "id", "no task "+strconv.Quote(clip(c.Param("id"), 80))))
	return nil, false
}

func (s *Server) listTasks(c *gin.Context) {
	u := user(c)
	owner := u.Name
	if u.Admin {
		owner = c.Query("owner")
	}
	limit := 100
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			s.writeProblem(c, withField(errBadRequest, "limit", "limit is a number from 1 to 1000"))
			return
		}
		limit = n
	}
	ts, err := s.Store.ListTasks(c.Request.Context(), owner, limit)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	var arrays []string
	for i := range ts {
		if ts[i].IsArray() {
			arrays = append(arrays, ts[i].ID)
		}
	}
	counts, err := s.Store.ArrayCounts(c.Request.Context(), arrays)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.TaskList{Items: make([]api.Task, 0, len(ts))}
	for i := range ts {
		t := sayTask(c, &ts[i])
		t.ArrayCounts = counts[t.ID]
		out.Items = append(out.Items, t)
	}
	s.taskEstimates(c.Request.Context(), out.Items) // taskin.go
	c.JSON(http.StatusOK, out)
}

func (s *Server) getTask(c *gin.Context) {
	t, ok := s.findTask(c)
	if !ok {
		return
	}
	page, ok := s.parseElementsPage(c)
	if !ok {
		return
	}
	out := sayTask(c, t)
	if err := s.fillTask(c, t, &out, page); err != nil {
		s.writeProblem(c, err)
		return
	}
	if t.State == api.TaskPending && t.VMID != "" {
		if vm, err := s.Store.GetVM(c.Request.Context(), t.VMID); err == nil {
			var v api.VM
			s.vmEstimate(c.Request.Context(), vm, &v) // estimate.go
			out.EstimatedStart, out.EstimatedStartStale = v.EstimatedStart, v.EstimatedStart != nil && v.EstimateStale
		}
	}
	c.JSON(http.StatusOK, out)
}

// cancelTask asks for a task's end: a pending one's VM is deleted, a
// running one's command gets SIGTERM, then after kill_wait the VM is
// powered off (pkg/task).
func (s *Server) cancelTask(c *gin.Context) {
	t, ok := s.findTask(c)
	if !ok {
		return
	}
	var none struct{} // no body, or an empty object
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	if api.TaskEnded(t.State) {
		s.writeProblem(c, with(errConflict, "task "+t.ID+" has ended: "+t.State))
		return
	}
	if t.CancelAt == nil {
		// An array's elements that have not ended are cancelled with it.
		_, err := s.Store.CancelTask(c.Request.Context(), t.ID)
		if errors.Is(err, store.ErrConflict) {
			s.writeProblem(c, with(errConflict, "task "+t.ID+" has ended"))
			return
		}
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		if t, err = s.Store.GetTask(c.Request.Context(), t.ID); err != nil {
			s.writeProblem(c, err)
			return
		}
	}
	s.wakeTasks()
	c.JSON(http.StatusAccepted, sayTask(c, t))
}

// taskLogs answers a task's output from offset; with follow=1 it goes on
// writing what comes until the task has ended.
func (s *Server) taskLogs(c *gin.Context) {
	t, ok := s.findTask(c)
	if !ok {
		return
	}
	if t.IsArray() {
		s.writeProblem(c, withField(errValidation, "id", "task "+t.ID+" is an array: its elements have the output (gpuvm task logs "+t.ID+"_INDEX)"))
		return
	}
	var off int64
	if o := c.Query("offset"); o != "" {
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil || n < 0 {
			s.writeProblem(c, withField(errBadRequest, "offset", "offset is a byte offset, 0 or more"))
			return
		}
		off = n
	}
	follow := false
	switch c.Query("follow") {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		s.writeProblem(c, withField(errBadRequest, "follow", "follow is 1 or 0"))
		return
	}
	c.Header("Content-Type", "text/plain; charset=utf-8")
	c.Header("X-Content-Type-Options", "nosniff")
	c.Status(http.StatusOK)
	ctx := c.Request.Context()
	path := task.LogPath(s.TaskLogs, t.ID)
	for {
		n, err := copyFrom(c.Writer, path, off)
		off += n
		if err != nil {
			s.log.Warn("task log", "task", t.ID, "err", err)
			return
		}
		c.Writer.Flush()
		if !follow || api.TaskEnded(t.State) && n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-time.After(taskFollowPoll):
		}
		if t, err = s.Store.GetTask(ctx, t.ID); err != nil {
			return
		}
	}
}

// copyFrom writes the file at path from off to its end; a file not made
// yet is empty.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	if path == "" {
		return 0, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, io.NewSectionReader(f, off, math.MaxInt64-off))
}
