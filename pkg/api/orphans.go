package api

import "time"

// Orphan kinds: what on a host looks like gpuvm's but is not provably this
// installation's.
const (
	OrphanDomain = "domain"
	OrphanVolume = "volume"
	OrphanDevice = "device"
)

// Orphan is something on a host that looks like gpuvm's — a domain with
// gpuvm's metadata, a volume named like a VM's disk, a device in a
// backend's ledger — that this installation cannot prove it made and still
// means to keep: another installation's, or this installation's with no VM
// in the database. The reconciler leaves an orphan exactly as it is and
// reports it; an admin deletes or adopts it (GET /v1/admin/orphans).
type Orphan struct {
	// ID names the orphan in the delete and adopt routes: stable while the
	// thing exists (a digest of its kind, host and name).
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Name is the domain's name, the volume's "pool/name" or the device's
	// "backend/device".
	Name string `json:"name"`
	Host string `json:"host"`
	// UUID is the domain's UUID; GPU the device's GPU address.
	UUID string `json:"uuid,omitempty"`
	GPU  string `json:"gpu,omitempty"`
	// VMID, Owner and Profile are what the domain's metadata or the
	// device's ledger entry says it was made for.
	VMID    string `json:"vm_id,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Installation made it, as its metadata, ledger entry or data disk's
	// file name says; "" when it does not say (made before installations
	// existed, or a VM's disk or seed volume, which cannot carry one).
	Installation string `json:"installation,omitempty"`
	// Reason says why it is an orphan, in words.
	Reason string `json:"reason"`
	// Adoptable: a domain of this installation (or one that names none)
	// whose VM is not in the database, adopting it makes it a VM again;
	// or a data disk of this installation whose row is not in the
	// database, adopting it (POST /v1/admin/volumes/adopt) makes it a
	// person's volume again.
	Adoptable bool `json:"adoptable"`
	// FirstSeen is when this gpuvmd first reported it (since it started).
	FirstSeen time.Time `json:"first_seen"`
}

// OrphanList is the answer to GET /v1/admin/orphans.
type OrphanList struct {
	// Installation is this gpuvmd's installation ID.
	Installation string   `json:"installation"`
	Items        []Orphan `json:"items"`
	// CheckedAt is when the host was last compared with the database.
	CheckedAt *time.Time `json:"checked_at,omitempty"`
}

// AdoptRequest is the body of POST /v1/admin/orphans/{id}/adopt: the
// user the domain's VM is to belong to, and optionally its name (default
// "adopted-" and the end of its ID) and profile (default the one its
// metadata names).
type AdoptRequest struct {
	Owner   string `json:"owner"`
	Name    string `json:"name,omitempty"`
	Profile string `json:"profile,omitempty"`
}

// AdoptVolumeRequest is the body of POST /v1/admin/volumes/adopt: the
// orphaned data disk (its "pool/name" as GET /v1/admin/orphans lists it,
// or its file name), the user it is to belong to, and optionally its name
// among their volumes (default "adopted-" and the end of its ID).
type AdoptVolumeRequest struct {
	File  string `json:"file"`
	Owner string `json:"owner"`
	Name  string `json:"name,omitempty"`
}
