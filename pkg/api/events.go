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

// VMStatePayload is the payload of a vm.state event.
type VMStatePayload struct {
	State   string `json:"state"`
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Version int64  `json:"version"`
}
