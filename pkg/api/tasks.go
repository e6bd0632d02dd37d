package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task states (docs/tasks.md), after Slurm's job states.
const (
	TaskPending    = "pending"    // its VM is queued; Reason says why
	TaskBooting    = "booting"    // its VM is being made or boots; the runner has not reported yet
	TaskRunning    = "running"    // the runner started the command
	TaskCompleting = "completing" // the command ended (or is being stopped); the VM is being deleted
	TaskCompleted  = "completed"  // the command exited 0
	TaskFailed     = "failed"     // the command exited non-zero or was killed by a signal
	TaskTimeout    = "timeout"    // the time limit was reached: SIGTERM, kill_wait, power off
	TaskCancelled  = "cancelled"  // cancelled by a person
	TaskBootFail   = "boot_fail"  // the guest's runner never reported within the boot timeout
	TaskNodeFail   = "node_fail"  // its VM failed or was lost with its host
)

// TaskStates are the states in their order of life.
var TaskStates = []string{TaskPending, TaskBooting, TaskRunning, TaskCompleting, TaskCompleted, TaskFailed,
	TaskTimeout, TaskCancelled, TaskBootFail, TaskNodeFail}

// TaskEnded reports whether state is one a task never leaves.
func TaskEnded(state string) bool {
	switch state {
	case TaskCompleted, TaskFailed, TaskTimeout, TaskCancelled, TaskBootFail, TaskNodeFail:
		return true
	}
	return false
}

// TaskCounts says how many of an array's elements are in each state (its
// ArrayCounts) in the states' order of life, "4 pending, 2 running"; ""
// when none. An array's reason is these words.
func TaskCounts(n map[string]int) string {
	var parts []string
	for _, st := range TaskStates {
		if n[st] > 0 {
			parts = append(parts, strconv.Itoa(n[st])+" "+st)
		}
	}
	return strings.Join(parts, ", ")
}

// Task is a command run in a GPU VM of its own, deleted when it ends.
type Task struct {
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Profile string `json:"profile"`
	// Command is the argv; Script, when set instead, the script run by sh.
	Command []string          `json:"command,omitempty"`
	Script  string            `json:"script,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// TimeLimit is the time limit in seconds; KillWait the seconds between
	// SIGTERM and SIGKILL at the limit or a cancel.
	TimeLimit int64  `json:"time_limit_s"`
	KillWait  int64  `json:"kill_wait_s"`
	State     string `json:"state"`
	// Reason says in words why the task is in its state: the queue reason
	// of its VM while pending, what ended it after.
	Reason string `json:"reason,omitempty"`
	// ExitCode and Signal are set when the command ended: its exit status,
	// and the signal that killed it (0: none), as Slurm's "0:9".
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    *int       `json:"signal,omitempty"`
	VMID      string     `json:"vm_id,omitempty"`
	LogBytes  int64      `json:"log_bytes"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// EstimatedStart is when a pending task's VM is expected to start, from
	// the VMs' estimates (GET /v1/vms/{id}); EstimatedStartStale says the
	// estimate is older than the queue it was made of. An array's element
	// not yet launched has none.
	EstimatedStart      *time.Time `json:"estimated_start,omitempty"`
	EstimatedStartStale bool       `json:"estimated_start_stale,omitempty"`
	// In is the owner's own VM (its ID) the task runs in (submitted with
	// in); InProfile the profile that VM has again afterwards; InSteps
	// what was done to it, in order, in words.
	In        string   `json:"in,omitempty"`
	InProfile string   `json:"in_profile,omitempty"`
	InSteps   []string `json:"in_steps,omitempty"`
	// Array is an array's spec ("0-99%4"): the task is an array, its state
	// derived from its elements', its exit code their highest.
	// ArrayCounts is how many elements are in each state, all of them;
	// Elements (GET /v1/tasks/{id} only) a page of the elements, by index
	// (?limit, 100 by default, and ?after), and ElementsNext the cursor of
	// the next page (pass it as after), "" on the last.
	Array        string         `json:"array,omitempty"`
	ArrayCounts  map[string]int `json:"array_counts,omitempty"`
	Elements     []Task         `json:"elements,omitempty"`
	ElementsNext string         `json:"elements_next,omitempty"`
	// ArrayID and ArrayIndex are an element's array and index (its ID is
	// "ARRAYID_INDEX").
	ArrayID    string `json:"array_id,omitempty"`
	ArrayIndex *int   `json:"array_index,omitempty"`
	// Retries and RetryOn are as submitted; Attempt is this attempt's
	// number, from 1; Attempts how the attempts that ended, ended (GET
	// /v1/tasks/{id} only, for a task that may retry).
	Retries  int           `json:"retries,omitempty"`
	RetryOn  RetryOn       `json:"retry_on,omitempty"`
	Attempt  int           `json:"attempt"`
	Attempts []TaskAttempt `json:"attempts,omitempty"`
	// WarningSignal is the signal sent before the time limit, as
	// submitted ("USR1@600s"); WarnedAt when it was sent.
	WarningSignal string     `json:"warning_signal,omitempty"`
	WarnedAt      *time.Time `json:"warned_at,omitempty"`
}

// TaskAttempt is how one attempt of a task ended.
type TaskAttempt struct {
	Attempt   int        `json:"attempt"`
	VMID      string     `json:"vm_id,omitempty"`
	State     string     `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    *int       `json:"signal,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   time.Time  `json:"ended_at"`
}

// Ends of an attempt that retry_on may name besides exit codes.
const (
	RetryNodeFail = TaskNodeFail
	RetryBootFail = TaskBootFail
)

// RetryOn is the ends of an attempt that are retried: exit codes (0 to
// 255; a command killed by signal S ends 128+S, as in sh) and "node_fail",
// "boot_fail". In JSON each is a number or a string.
type RetryOn []string

// UnmarshalJSON takes numbers and strings.
func (r *RetryOn) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(RetryOn, 0, len(raw))
	for _, x := range raw {
		var s string
		if err := json.Unmarshal(x, &s); err == nil {
			out = append(out, s)
			continue
		}
		var n json.Number
		if err := json.Unmarshal(x, &n); err != nil {
			return fmt.Errorf("retry_on: %.40s is not an exit code or a name", x)
		}
		if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			out = append(out, strconv.FormatInt(i, 10))
		} else {
			out = append(out, n.String())
		}
	}
	*r = out
	return nil
}

// CreateTaskRequest is the body of POST /v1/tasks: a command (argv) or a
// script, one of them.
type CreateTaskRequest struct {
	Profile string            `json:"profile"`
	Command []string          `json:"command,omitempty"`
	Script  string            `json:"script,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// TimeLimit is the time limit, a Go duration ("4h", "90m"); the VM's
	// hours are its ceiling.
	TimeLimit string `json:"time_limit"`
	// KillWait is the time between SIGTERM and SIGKILL, a Go duration
	// (default 30s).
	KillWait string `json:"kill_wait,omitempty"`
	// StartAt, when set, is the earliest start (RFC 3339), as a VM's.
	StartAt *time.Time `json:"start_at,omitempty"`
	// Array, when set, makes an array of tasks: indices "0-99", "1,3,5-7",
	// with "%N" running at most N at once ("0-99%4"); each element gets
	// TASK_INDEX, TASK_ARRAY_ID and TASK_COUNT. At most 10000 elements,
	// indices 0 to 999999.
	Array string `json:"array,omitempty"`
	// Retries (0 to 10) is how many times a failed attempt whose end is
	// in RetryOn is run again, in a new VM.
	Retries int     `json:"retries,omitempty"`
	RetryOn RetryOn `json:"retry_on,omitempty"`
	// Signal is a signal sent to the command a while before its time
	// limit: "USR1@10m" (NAME@LEAD; LEAD a duration, or seconds as
	// Slurm's --signal; 60s when left out).
	Signal string `json:"signal,omitempty"`
	// In, when set, runs the task in the caller's own VM (its name or ID)
	// rather than a fresh one: the VM must be stopped; it is resized to
	// Profile for the task, started, and afterwards stopped and resized
	// back to its own profile. Not with Array or Retries.
	In string `json:"in,omitempty"`
}

// TaskList answers GET /v1/tasks, newest first.
type TaskList struct {
	Items []Task `json:"items"`
}

// Bounds of a task that people are told (the rules, docs/tasks.md) and the
// server enforces.
const (
	// TaskKillWait is the time between SIGTERM and SIGKILL at a task's
	// limit or cancel when the task sets none (Slurm's KillWait).
	TaskKillWait = 30 * time.Second
	// TaskMaxKillWait is the longest kill wait a task may set.
	TaskMaxKillWait = 10 * time.Minute
	// TaskMaxRetries is the most retries of a task.
	TaskMaxRetries = 10
	// TaskMaxArrayElements is the most elements of an array.
	TaskMaxArrayElements = 10000
)
