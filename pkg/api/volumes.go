package api

import "time"

// Volume kinds and states (docs/volumes.md).
const (
	VolumeDisk = "disk" // a data disk: a block volume on one host
	VolumeHome = "home" // the person's home (read-only entry: homes are not managed here)
	// VolumeShare: an admin-declared share, in the quotas' readings
	// (metrics, GET /v1/shares); never in GET /v1/volumes.
	VolumeShare = "share"

	VolumeCreating = "creating"
	VolumeReady    = "ready"
	VolumeDeleting = "deleting"
	VolumeError    = "error"
	// VolumeDetaching: being unplugged from its running VM; attached
	// until its guest has let it go.
	VolumeDetaching = "detaching"
)

// MaxVolumeBytes is the largest data disk, 64 TiB.
const MaxVolumeBytes = 64 << 40

// Volume is a person's data disk (or, kind home, their home).
type Volume struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Kind: disk, or home (GET /v1/volumes lists the caller's home when
	// homes are on; it cannot be changed through these routes).
	Kind  string `json:"kind"`
	Owner string `json:"owner"`
	// SizeBytes is the disk's size (0 for a home: not sized here).
	SizeBytes int64 `json:"size_bytes"`
	// State: creating, ready, deleting, error, or detaching (being
	// unplugged from its running VM).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Host is the server the disk lives on: it attaches to VMs there.
	Host string `json:"host,omitempty"`
	// AttachedVM and AttachedVMName are the VM it is attached to
	// (absent: detached).
	AttachedVM     string `json:"attached_vm,omitempty"`
	AttachedVMName string `json:"attached_vm_name,omitempty"`
	// GuestDevice is where the guest finds it:
	// /dev/disk/by-id/virtio-<the first 20 characters of its id>.
	GuestDevice string `json:"guest_device,omitempty"`
	// Mount is where a home is mounted in the guest (kind home).
	Mount string `json:"mount,omitempty"`
	// UsedBytes is what the volume takes: a home's as the home quotas
	// last read it, a data disk's its size; absent: not known (a home not
	// read yet, or a server that does not read them).
	UsedBytes *uint64 `json:"used_bytes,omitempty"`
	// QuotaBytes is a home's limit (policy storage.home_quota); absent:
	// none. A data disk is bounded by its size, and the disks together by
	// the list's quota_bytes.
	QuotaBytes *uint64 `json:"quota_bytes,omitempty"`
	// Enforcement is how a home's quota holds: "project" (the filesystem
	// refuses writes past it), "image" (the home is a filesystem of its
	// own, of the quota's size: writes past it are refused) or "none"
	// (measured, nothing refused); Note says why (api.VolumeUsage).
	Enforcement string     `json:"enforcement,omitempty"`
	Note        string     `json:"note,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	// OperationID is the operation that plugs the disk into, or unplugs
	// it from, its running VM (GET /v1/operations/{id}): only in the
	// answer (202) to an attach or detach of a running VM.
	OperationID string `json:"operation_id,omitempty"`
}

// VolumeList answers GET /v1/volumes: the caller's volumes by name, and
// their disk quota (absent: none) with the policy rule it comes from.
type VolumeList struct {
	Volumes    []Volume `json:"volumes"`
	QuotaBytes *uint64  `json:"quota_bytes,omitempty"`
	UsedBytes  uint64   `json:"used_bytes"`
	Rule       string   `json:"rule,omitempty"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	// Name is unique among the owner's volumes: lower-case letters,
	// digits and dashes, starting with a letter, at most 63 characters.
	Name string `json:"name"`
	// Size with a binary unit ("20GiB", "512MiB"): at least 1 MiB, at most
	// 64 TiB, within the owner's storage.disk_quota.
	Size string `json:"size"`
}

// ResizeVolumeRequest is the body of POST /v1/volumes/{id}/actions/resize.
type ResizeVolumeRequest struct {
	// Size is the new size, larger than the current one (disks only grow).
	Size string `json:"size"`
}

// AttachVolumeRequest is the body of POST /v1/volumes/{id}/actions/attach.
type AttachVolumeRequest struct {
	// VM is the VM's ID or name, the volume owner's, on the same host.
	VM string `json:"vm"`
}
