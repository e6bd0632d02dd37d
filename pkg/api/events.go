package api

import (
	"encoding/json"
	"time"
)

// Event is one server-sent event of GET /v1/events: something that happened
// to a VM. IDs grow in commit order, so a watcher that resumes after the
// last ID it saw (the Last-Event-ID header, or ?after=) misses nothing that
// is still kept.
type Event struct {
	ID    int64     `json:"id"`
	Time  time.Time `json:"time"`
	VMID  string    `json:"vm_id,omitempty"`
	Owner string    `json:"owner,omitempty"`
	// Type is what happened: vm.created, vm.state, vm.action, ...
	Type string `json:"type"`
	// Payload is the type's detail: for vm.state the new state, phase,
	// reason and version.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Event types.
const (
	EventVMCreated = "vm.created"
	EventVMState   = "vm.state"
)

// EventHostDrain and EventGPUDrain are the types of the events an admin's
// drain or undrain of a host or a GPU makes (admins see them: they are no
// user's); their payload is a DrainEventPayload.
const (
	EventHostDrain = "host.drain"
	EventGPUDrain  = "gpu.drain"
)

// DrainEventPayload is the payload of host.drain and gpu.drain: the host,
// the GPU (gpu.drain), whether it is drained now, and by whom.
type DrainEventPayload struct {
	Host    string `json:"host"`
	GPU     string `json:"gpu,omitempty"`
	Drained bool   `json:"drained"`
	By      string `json:"by"`
}

// EventVMWarning is the type of the notices gpuvmd gives a VM's owner
// before, and when, a rule of sharing stops or deletes the VM: its lease
// ends, its GPU has been idle, the time window it started in ends, or it
// is preempted. Its payload is a VMWarningPayload.
const EventVMWarning = "vm.warning"

// Kinds of vm.warning.
const (
	WarningLeaseEnd   = "lease_end"  // the lease ends (or ended)
	WarningIdle       = "idle"       // the GPU stayed idle for the profile's idle_stop
	WarningWindowEnd  = "window_end" // the time window the VM started in ends
	WarningPreemption = "preemption" // the VM makes room for a VM of higher priority
	// WarningGuestDriver: the image's NVIDIA guest driver is not one the
	// host's vGPU manager supports (its action is none).
	WarningGuestDriver = "guest_driver"
	// WarningShare: a share the VM was made with is left out at a start
	// (its action is none): the owner no longer has access, or the share
	// is no longer declared.
	WarningShare = "share"
	// WarningVirtiofs: the virtiofs daemon serving the VM's home and
	// shares died; the guest's mounts hang until the VM is stopped and
	// started (its action is none).
	WarningVirtiofs = "virtiofs"
	// WarningTaskPutBack: a task ran in the VM (gpuvm task submit --in)
	// and the VM could not be resized back to its own profile (its action
	// is none): 'gpuvm resize VM --back' puts it back.
	WarningTaskPutBack = "task_put_back"
)

// What a vm.warning says will happen, or happens now.
const (
	NoticeStop      = "stop"      // the VM is stopped (its GPU is given back; it keeps its disk)
	NoticeDelete    = "delete"    // the VM is deleted (its GPU and disk go)
	NoticeNone      = "none"      // nothing: a warning only
	NoticeCancelled = "cancelled" // an announced preemption no longer happens
)

// VMWarningPayload is the payload of a vm.warning event.
type VMWarningPayload struct {
	Kind string `json:"kind"`
	// Action is what happens to the VM at At.
	Action string    `json:"action"`
	At     time.Time `json:"at"`
	// MinutesLeft is how long until At, when the notice was given; 0 when
	// it happens now.
	MinutesLeft int    `json:"minutes_left"`
	Reason      string `json:"reason"`
	// OperationID is the stop or delete the notice started, when it
	// happens now.
	OperationID string `json:"operation_id,omitempty"`
	// For is the VM a preemption makes room for.
	For string `json:"for,omitempty"`
}

// VMStatePayload is the payload of a vm.state event.
type VMStatePayload struct {
	State   string `json:"state"`
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Version int64  `json:"version"`
}
