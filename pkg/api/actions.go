package api

import "time"

// Actions of POST /v1/vms/{id}/actions/{action}.
//
//   - start (202, VMActionResponse): a stopped VM that has a GPU waits in
//     the queue for one again (state queued, with a queue position and a
//     reason, like a new VM; the operation stays unfinished until it runs);
//     once placed, its device is made, its domain is given it in place of
//     the one it had (possibly of another GPU), and it boots on its own
//     disk. A VM without a GPU boots at once. A start after the lease has
//     ended fails: extend the lease first.
//   - stop (202, VMActionResponse): a running VM's guest is asked to power
//     off (ACPI), and forced off when it has not after the server's shutdown
//     timeout; then its GPU is given back (its device removed, its slot free
//     for the next VM in the queue, its GPU time no longer counted). The VM
//     keeps its domain and disk, and its lease keeps running. The rules of
//     sharing stop VMs the same way: at a lease's or a window's end, when
//     idle, when preempted.
//   - reboot (202, VMActionResponse): a running VM's guest is asked to
//     restart (ACPI); the VM stays running.
//   - extend (200, VM): ExtendVMRequest adds hours to the lease of a queued,
//     running or stopped VM.
//
// An action on a VM with an unfinished operation (other than the create of
// a queued VM, for extend) is a 409 conflict whose detail names that
// operation; so is an action the VM's state does not allow (stop of a
// stopped VM). Another user's VM is not found (404).
const (
	ActionStart  = "start"
	ActionStop   = "stop"
	ActionReboot = "reboot"
	ActionExtend = "extend"
)

// Actions lists the actions in the order people read them.
var Actions = []string{ActionStart, ActionStop, ActionReboot, ActionExtend}

// ExtendVMRequest is the body of POST /v1/vms/{id}/actions/extend.
type ExtendVMRequest struct {
	// Hours are added to the lease (at least 1). The VM's total lease (its
	// Hours, counted from when it first ran) may not exceed its profile's
	// maximum; a queued VM's lease starts when it runs.
	Hours int `json:"hours"`
}

// VMActionResponse is the answer (202) to start, stop and reboot: the VM as
// it was when the action was accepted, and the operation that carries it
// out (GET /v1/operations/{id} follows it).
type VMActionResponse struct {
	VM        VM        `json:"vm"`
	Operation Operation `json:"operation"`
}

// EventVMAction is the type of the event recorded for every action: when
// the API accepts it, and when the worker has carried it out (Result set).
const EventVMAction = "vm.action"

// VMActionPayload is the payload of a vm.action event.
type VMActionPayload struct {
	Action      string `json:"action"`
	OperationID string `json:"operation_id,omitempty"`
	RequestedBy string `json:"requested_by,omitempty"`
	// Result is "done" or "failed" once the worker has carried the action
	// out; empty when it was just accepted. Error says why it failed.
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	// Hours (extend) were added; TotalHours is the lease after, LeaseEnd its
	// end when the VM has run.
	Hours      int        `json:"hours,omitempty"`
	TotalHours int        `json:"total_hours,omitempty"`
	LeaseEnd   *time.Time `json:"lease_end,omitempty"`
}
