package api

import "time"

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
	// EstimatedStart is when a pending task's VM is expected to start.
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
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
}

// TaskList answers GET /v1/tasks, newest first.
type TaskList struct {
	Items []Task `json:"items"`
}
