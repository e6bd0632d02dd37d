package api

import "time"

// Snapshot states and consistencies (docs/snapshots.md).
const (
	SnapshotCreating  = "creating"
	SnapshotReady     = "ready"
	SnapshotRestoring = "restoring"
	SnapshotDeleting  = "deleting"
	SnapshotFailed    = "failed"

	SnapshotQuiesced        = "quiesced"
	SnapshotCrashConsistent = "crash-consistent"
)

// MaxSnapshotLabel is the longest label, in characters.
const MaxSnapshotLabel = 64

// Snapshot is a disk snapshot of a VM's system disk.
type Snapshot struct {
	ID    string `json:"id"`
	VMID  string `json:"vm_id"`
	Owner string `json:"owner"`
	Label string `json:"label,omitempty"`
	// State: creating, ready, restoring, deleting or failed.
	State string `json:"state"`
	// Consistency: quiesced (the guest agent froze the file systems) or
	// crash-consistent (as after a power cut); empty until it is taken.
	Consistency string     `json:"consistency,omitempty"`
	Error       string     `json:"error,omitempty"`
	OperationID string     `json:"operation_id,omitempty"`
	CreatedBy   string     `json:"created_by,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	RestoredAt  *time.Time `json:"restored_at,omitempty"`
	// ExpiresAt is when the rules loop deletes it (the owner's
	// snapshots.expire_after); absent: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreateSnapshotRequest is the body of POST /v1/vms/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Label is a name for people: at most 64 characters, letters (any
	// script), digits, spaces and . _ - + : @ ( ).
	Label string `json:"label,omitempty"`
}

// SnapshotResponse answers a snapshot, restore or delete: the snapshot and
// the operation that carries it out.
type SnapshotResponse struct {
	Snapshot  Snapshot  `json:"snapshot"`
	Operation Operation `json:"operation"`
}

// SnapshotList answers GET /v1/vms/{id}/snapshots, oldest first.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	// Keep is the owner's limit (absent: none); Rule the policy block it
	// comes from.
	Keep *int   `json:"keep,omitempty"`
	Rule string `json:"rule,omitempty"`
}
