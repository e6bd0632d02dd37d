package store

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// The gorm structs below mirror the tables the migrations create (see
// migrate.go); their index tags name the indexes of the migrations, for
// readers and for TestModelsMatchSchema, and are never used to create them.
// Times are UTC. Names of people and groups are their stable identity: rows
// refer to a user by name (vms.owner references users.name).

// User is a person who may ask for VMs.
type User struct {
	ID        int64     `gorm:"column:id;primaryKey" json:"id"`
	Name      string    `gorm:"column:name;not null;uniqueIndex:users_name" json:"name"`
	Admin     bool      `gorm:"column:admin;not null" json:"admin"`
	CreatedAt time.Time `gorm:"column:created_at;not null" json:"created_at"`
	UpdatedAt time.Time `gorm:"column:updated_at;not null" json:"updated_at"`
	// Source is where the user comes from: SourceLocal (made by an admin),
	// SourceLDAP or SourceOIDC (made at the first sign-in).
	Source string `gorm:"column:source;not null" json:"source"`
	// DisabledAt is when the directory's sync found the user gone: its
	// tokens are refused, its VMs kept. nil: enabled.
	DisabledAt *time.Time `gorm:"column:disabled_at" json:"disabled_at,omitempty"`
	// UID is the person's stable uid, owner of their home on the host and
	// of their account in every guest (UserUID): the directory's
	// uidNumber, or one gpuvm assigned. nil until first needed.
	UID *int64 `gorm:"column:uid;uniqueIndex:users_uid,where:uid IS NOT NULL" json:"uid,omitempty"`
	// HomeHost is the host the person's home lives on: where it was first
	// made (RecordHomeHost). In a fleet the VMs that mount it are placed
	// there when it can serve them. nil until first made.
	HomeHost *string `gorm:"column:home_host" json:"home_host,omitempty"`
	// SSHKeys are the public keys the user keeps for new VMs, one a line
	// (SetUserSSHKeys); "" for none.
	SSHKeys string `gorm:"column:ssh_keys;not null" json:"ssh_keys,omitempty"`
	// Groups are the names of the user's groups, sorted; filled by the
	// store from group_members, as Memberships, which say where each
	// membership comes from.
	Groups      []string     `gorm:"-" json:"groups"`
	Memberships []Membership `gorm:"-" json:"memberships"`
}

// Where users and group memberships come from.
const (
	SourceLocal = "local"
	SourceLDAP  = "ldap"
	SourceOIDC  = "oidc"
)

// Membership is a user's group, and who put the user in it.
type Membership struct {
	Group  string `json:"group"`
	Source string `json:"source"`
}

func (User) TableName() string { return "users" }

// Group is a set of users that policy gives quotas and reservations to.
type Group struct {
	ID        int64     `gorm:"column:id;primaryKey" json:"id"`
	Name      string    `gorm:"column:name;not null;uniqueIndex:groups_name" json:"name"`
	CreatedAt time.Time `gorm:"column:created_at;not null" json:"created_at"`
}

func (Group) TableName() string { return "groups" }

// GroupMember puts a user in a group.
type GroupMember struct {
	GroupID int64 `gorm:"column:group_id;primaryKey"`
	UserID  int64 `gorm:"column:user_id;primaryKey;index:group_members_user"`
	// Source is who put the user in the group: an admin (SourceLocal) or
	// the directory at a sign-in.
	Source string `gorm:"column:source;not null"`
}

func (GroupMember) TableName() string { return "group_members" }

// APIToken is a bearer token of a user. The token itself is never stored:
// Hash is the hex SHA-256 of it, Prefix its first characters for people to
// tell their tokens apart.
type APIToken struct {
	ID         int64      `gorm:"column:id;primaryKey" json:"id"`
	UserID     int64      `gorm:"column:user_id;not null;uniqueIndex:api_tokens_user_name_live,priority:1,where:revoked_at IS NULL" json:"user_id"`
	Name       string     `gorm:"column:name;not null;uniqueIndex:api_tokens_user_name_live,priority:2" json:"name"`
	Hash       string     `gorm:"column:hash;not null;uniqueIndex:api_tokens_hash" json:"-"`
	Prefix     string     `gorm:"column:prefix;not null;index:api_tokens_prefix" json:"prefix"`
	CreatedAt  time.Time  `gorm:"column:created_at;not null" json:"created_at"`
	ExpiresAt  *time.Time `gorm:"column:expires_at" json:"expires_at,omitempty"`
	RevokedAt  *time.Time `gorm:"column:revoked_at" json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `gorm:"column:last_used_at" json:"last_used_at,omitempty"`
}

func (APIToken) TableName() string { return "api_tokens" }

// VM states (the API's). The lifecycle owns the transitions; the store only
// knows that a deleted VM frees its name.
const (
	VMQueued     = api.VMQueued
	VMAllocating = api.VMAllocating
	VMCreating   = api.VMCreating
	VMRunning    = api.VMRunning
	VMStopping   = api.VMStopping
	VMStopped    = api.VMStopped
	VMDeleting   = api.VMDeleting
	VMDeleted    = api.VMDeleted
	VMFailed     = api.VMFailed
)

// VM is a GPU virtual machine somebody asked for. Version is its optimistic
// concurrency token: every update must name the version it read, and bumps it.
type VM struct {
	ID          string     `gorm:"column:id;primaryKey;index:vms_queue_left,where:queue_position <> 0 AND state <> 'queued'" json:"id"`
	Name        string     `gorm:"column:name;not null;uniqueIndex:vms_owner_name_live,priority:2" json:"name"`
	Owner       string     `gorm:"column:owner;not null;uniqueIndex:vms_owner_name_live,priority:1,where:state <> 'deleted';index:vms_owner_created,priority:1" json:"owner"`
	Group       string     `gorm:"column:group_name;not null" json:"group,omitempty"`
	Profile     string     `gorm:"column:profile;not null" json:"profile"`
	Spec        string     `gorm:"column:spec;not null" json:"spec,omitempty"` // the resolved request, JSON
	State       string     `gorm:"column:state;not null;index:vms_state_created,priority:1;index:vms_queued_start,priority:1,where:state = 'queued';index:vms_queue_rank,priority:1,where:state = 'queued';index:vms_live_state,where:state <> 'deleted'" json:"state"`
	Phase       string     `gorm:"column:phase;not null" json:"phase,omitempty"`
	StateReason string     `gorm:"column:state_reason;not null" json:"state_reason,omitempty"`
	Host        string     `gorm:"column:host;not null;index:vms_host" json:"host,omitempty"`
	Hours       int        `gorm:"column:hours;not null" json:"hours"`
	LeaseEnd    *time.Time `gorm:"column:lease_end" json:"lease_end,omitempty"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null;index:vms_created,priority:1;index:vms_owner_created,priority:2;index:vms_state_created,priority:2;index:vms_queued_start,priority:3" json:"created_at"`
	UpdatedAt   time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	Version     int64      `gorm:"column:version;not null" json:"version"`
	// DisplayPassword is the VNC/SPICE password of the VM's display; it is
	// handed out only through console tickets and .vv files.
	DisplayPassword string `gorm:"column:display_password;not null" json:"-"`
	// QueueRank orders the queue while the VM is queued: a sparse number
	// the scheduling rounds keep in the queue's order (queuerank.go), 0
	// when the last round did not rank it. Not a position: see
	// QueuePosition.
	QueueRank int `gorm:"column:queue_position;not null;index:vms_queue_rank,priority:2,where:state = 'queued'" json:"queue_rank,omitempty"`
	// QueuePosition is the VM's place in the queue (1 = next) while it is
	// queued and ranked, counted from the ranks when GetVM, GetVMByName or
	// ListVMs read it; 0 otherwise, and on every other read.
	QueuePosition int `gorm:"-" json:"queue_position,omitempty"`
	// StartAt, when set, is the earliest time the VM may be placed.
	StartAt *time.Time `gorm:"column:start_at;index:vms_queued_start,priority:2" json:"start_at,omitempty"`
	// LeaseWarnedAt is when the owner was warned that the lease ends soon.
	LeaseWarnedAt *time.Time `gorm:"column:lease_warned_at" json:"lease_warned_at,omitempty"`
}

func (VM) TableName() string { return "vms" }

// Conditions that match the WHERE of partial indexes are written as literals:
// SQLite uses a partial index only when the query's condition is the index's,
// word for word, and a bound parameter never is.
const (
	liveAllocation = "state <> 'released'"                       // allocations_host_live, allocations_vm_live
	unfinishedOp   = "state IN ('pending', 'running')"           // operations_unfinished
	liveVM         = "state <> 'deleted'"                        // vms_owner_name_live, vms_live_state
	queuedVM       = "state = 'queued'"                          // vms_queued_start
	leftQueue      = "queue_position <> 0 AND state <> 'queued'" // vms_queue_left
)

// Operation kinds and states.
const (
	OpCreate  = "create"
	OpDelete  = "delete"
	OpStart   = "start"
	OpStop    = "stop"
	OpReboot  = "reboot"
	OpExtend  = "extend"
	OpResize  = "resize" // a stopped VM moved to another profile (the orchestrator's resize.go)
	OpDisks   = "disks"  // a running VM's data disks plugged in or out as its volumes' rows say (volumes.go)
	OpPending = api.OpPending
	OpRunning = api.OpRunning
	OpDone    = api.OpDone
	OpFailed  = api.OpFailed
)

// Operation is a change to a VM that takes time: the API answers 202 with it,
// the worker moves it through its steps, the reconciler finishes the ones a
// crash interrupted.
type Operation struct {
	ID          string     `gorm:"column:id;primaryKey" json:"id"`
	VMID        string     `gorm:"column:vm_id;not null;index:operations_vm,priority:1" json:"vm_id"`
	Kind        string     `gorm:"column:kind;not null" json:"kind"`
	State       string     `gorm:"column:state;not null" json:"state"`
	Step        string     `gorm:"column:step;not null" json:"step,omitempty"`
	Error       string     `gorm:"column:error;not null" json:"error,omitempty"`
	RequestedBy string     `gorm:"column:requested_by;not null" json:"requested_by,omitempty"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null;index:operations_vm,priority:2;index:operations_unfinished,where:state IN ('pending'\\,'running')" json:"created_at"`
	UpdatedAt   time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	StartedAt   *time.Time `gorm:"column:started_at" json:"started_at,omitempty"`
	FinishedAt  *time.Time `gorm:"column:finished_at;index:operations_creates_done,where:kind = 'create' AND state = 'done'" json:"finished_at,omitempty"`
}

func (Operation) TableName() string { return "operations" }

// Finished reports whether the operation is done or failed.
func (o *Operation) Finished() bool { return o.State == OpDone || o.State == OpFailed }

// Allocation states. An allocation's kind (the GPU's mode) is a gpu.Kind,
// stored as its name.
const (
	AllocReserved = "reserved" // slots held; the device is not made yet
	AllocCreated  = "created"  // the backend made the device
	AllocReleased = "released" // slots free; the row is history
)

// Allocation is one GPU device given to a VM: a vGPU, a MIG GPU instance or a
// whole GPU. While it is live (not released) it holds its slots in
// allocation_slots.
type Allocation struct {
	ID         int64    `gorm:"column:id;primaryKey" json:"id"`
	VMID       string   `gorm:"column:vm_id;not null;index:allocations_vm;index:allocations_vm_live,where:state <> 'released'" json:"vm_id"`
	Host       string   `gorm:"column:host;not null;index:allocations_host_live,priority:1,where:state <> 'released'" json:"host"`
	GPUAddress string   `gorm:"column:gpu_address;not null;index:allocations_host_live,priority:2" json:"gpu_address"`
	Backend    string   `gorm:"column:backend;not null" json:"backend"`
	Kind       gpu.Kind `gorm:"column:kind;not null" json:"kind"`
	// Slot names what the allocation holds: "mig:4+4" (placement start 4,
	// size 4), "vf:0000:41:00.4", "vgpu:3", "gpu".
	Slot           string     `gorm:"column:slot;not null" json:"slot"`
	PlacementStart int        `gorm:"column:placement_start;not null" json:"placement_start,omitempty"`
	PlacementSize  int        `gorm:"column:placement_size;not null" json:"placement_size,omitempty"`
	Profile        string     `gorm:"column:profile;not null" json:"profile,omitempty"` // MIG profile or vGPU type
	DeviceID       string     `gorm:"column:device_id;not null" json:"device_id,omitempty"`
	Hostdev        string     `gorm:"column:hostdev;not null" json:"hostdev,omitempty"` // the backend's answer, JSON
	State          string     `gorm:"column:state;not null" json:"state"`
	CreatedAt      time.Time  `gorm:"column:created_at;not null" json:"created_at"`
	UpdatedAt      time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	ReleasedAt     *time.Time `gorm:"column:released_at" json:"released_at,omitempty"`
}

func (Allocation) TableName() string { return "allocations" }

// AllocationSlot is one unit of a GPU held by a live allocation. Its primary
// key (host, gpu_address, slot_key) is the invariant: no unit is held twice.
type AllocationSlot struct {
	Host         string `gorm:"column:host;primaryKey"`
	GPUAddress   string `gorm:"column:gpu_address;primaryKey"`
	SlotKey      string `gorm:"column:slot_key;primaryKey"`
	AllocationID int64  `gorm:"column:allocation_id;not null;index:allocation_slots_allocation"`
}

func (AllocationSlot) TableName() string { return "allocation_slots" }

// GPUMode is the mode of a GPU's live slots and their number.
type GPUMode struct {
	Host       string `gorm:"column:host;primaryKey" json:"host"`
	GPUAddress string `gorm:"column:gpu_address;primaryKey" json:"gpu_address"`
	Mode       string `gorm:"column:mode;not null" json:"mode"`
	LiveSlots  int    `gorm:"column:live_slots;not null" json:"live_slots"`
}

func (GPUMode) TableName() string { return "gpu_modes" }

// Reservation owner kinds.
const (
	OwnerUser  = "user"
	OwnerGroup = "group"
)

// Reservation books GPUs ahead for a user or a group: Count of a profile, or
// of a GPU need (kind, model, type), from StartAt to EndAt, repeated by RRule
// (RFC 5545 text, expanded by policy) until RepeatUntil (nil: forever).
type Reservation struct {
	ID          int64      `gorm:"column:id;primaryKey" json:"id"`
	OwnerKind   string     `gorm:"column:owner_kind;not null;index:reservations_owner,priority:1" json:"owner_kind"`
	Owner       string     `gorm:"column:owner;not null;index:reservations_owner,priority:2" json:"owner"`
	Profile     string     `gorm:"column:profile;not null" json:"profile,omitempty"`
	GPUKind     gpu.Kind   `gorm:"column:gpu_kind;not null" json:"gpu_kind,omitempty"`
	GPUModel    string     `gorm:"column:gpu_model;not null" json:"gpu_model,omitempty"`
	GPUType     string     `gorm:"column:gpu_type;not null" json:"gpu_type,omitempty"`
	Count       int        `gorm:"column:gpu_count;not null" json:"count"`
	StartAt     time.Time  `gorm:"column:start_at;not null;index:reservations_start" json:"start_at"`
	EndAt       time.Time  `gorm:"column:end_at;not null" json:"end_at"`
	RRule       string     `gorm:"column:rrule;not null" json:"rrule,omitempty"`
	RepeatUntil *time.Time `gorm:"column:repeat_until" json:"repeat_until,omitempty"`
	Note        string     `gorm:"column:note;not null" json:"note,omitempty"`
	CreatedBy   string     `gorm:"column:created_by;not null" json:"created_by,omitempty"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null" json:"created_at"`
	UpdatedAt   time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	Version     int64      `gorm:"column:version;not null" json:"version"`
}

func (Reservation) TableName() string { return "reservations" }

// UsageRecord is a stretch of time a VM held a GPU device. Share is the part
// of the GPU it held (1 for a whole GPU, 1/7 for a 1g MIG slice of seven, the
// vGPU type's fraction); GPUSeconds = Share × seconds once it has ended.
type UsageRecord struct {
	ID         int64      `gorm:"column:id;primaryKey" json:"id"`
	VMID       string     `gorm:"column:vm_id;not null;index:usage_records_open,where:ended_at IS NULL" json:"vm_id"`
	User       string     `gorm:"column:user_name;not null;index:usage_records_user_started,priority:1" json:"user"`
	Group      string     `gorm:"column:group_name;not null" json:"group,omitempty"`
	Host       string     `gorm:"column:host;not null" json:"host,omitempty"`
	GPUAddress string     `gorm:"column:gpu_address;not null" json:"gpu_address"`
	Kind       gpu.Kind   `gorm:"column:kind;not null" json:"kind"`
	Profile    string     `gorm:"column:profile;not null" json:"profile,omitempty"`
	Share      float64    `gorm:"column:share;not null" json:"share"`
	StartedAt  time.Time  `gorm:"column:started_at;not null;index:usage_records_user_started,priority:2;index:usage_records_started" json:"started_at"`
	EndedAt    *time.Time `gorm:"column:ended_at" json:"ended_at,omitempty"`
	GPUSeconds float64    `gorm:"column:gpu_seconds;not null" json:"gpu_seconds"`
}

func (UsageRecord) TableName() string { return "usage_records" }

// Event is something that happened, for watchers: IDs grow in commit order,
// so "every event after N" never skips one.
type Event struct {
	ID        int64     `gorm:"column:id;primaryKey" json:"id"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:events_created" json:"time"`
	VMID      string    `gorm:"column:vm_id;not null;index:events_vm,priority:1" json:"vm_id,omitempty"`
	Owner     string    `gorm:"column:owner;not null" json:"owner,omitempty"`
	Type      string    `gorm:"column:type;not null;index:events_type,priority:1" json:"type"`
	Payload   JSON      `gorm:"column:payload;not null" json:"payload"`
}

func (Event) TableName() string { return "events" }

// IdempotencyKey remembers a request a user sent with an Idempotency-Key
// header, so that the same request sent again gets the same answer.
type IdempotencyKey struct {
	User        string    `gorm:"column:user_name;primaryKey" json:"user"`
	Key         string    `gorm:"column:idempotency_key;primaryKey" json:"key"`
	RequestHash string    `gorm:"column:request_hash;not null" json:"request_hash"`
	VMID        string    `gorm:"column:vm_id;not null" json:"vm_id,omitempty"`
	OperationID string    `gorm:"column:operation_id;not null" json:"operation_id,omitempty"`
	CreatedAt   time.Time `gorm:"column:created_at;not null;index:idempotency_keys_created" json:"created_at"`
}

func (IdempotencyKey) TableName() string { return "idempotency_keys" }

// JSON is a JSON document stored as text (SQLite) or jsonb (PostgreSQL).
// The empty value is stored as {}.
type JSON []byte

// Value implements driver.Valuer.
func (j JSON) Value() (driver.Value, error) {
	if len(j) == 0 {
		return "{}", nil
	}
	if !json.Valid(j) {
		return nil, errors.New("store: payload is not valid JSON")
	}
	return string(j), nil
}

// Scan implements sql.Scanner.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("store: cannot scan %T into JSON", src)
	}
	return nil
}

// MarshalJSON writes the document as it is.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("{}"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps the document as it is.
func (j *JSON) UnmarshalJSON(b []byte) error {
	*j = append(JSON(nil), b...)
	return nil
}

// Host states (the API's).
const (
	HostUp       = api.HostUp
	HostDown     = api.HostDown
	HostDraining = api.HostDraining
)

// Host is one gpuvmd (a node of the fleet): it registers at start and keeps
// its heartbeat and inventory current.
type Host struct {
	Name        string    `gorm:"column:name;primaryKey" json:"name"`
	APIURL      string    `gorm:"column:api_url;not null" json:"api_url,omitempty"`
	Version     string    `gorm:"column:version;not null" json:"version,omitempty"`
	State       string    `gorm:"column:state;not null" json:"state"`
	Inventory   string    `gorm:"column:inventory;not null" json:"-"` // gpu.HostInventory, JSON (older gpuvmds: api.HostInventory, the same shape)
	StartedAt   time.Time `gorm:"column:started_at;not null" json:"started_at"`
	HeartbeatAt time.Time `gorm:"column:heartbeat_at;not null" json:"heartbeat_at"`
	UpdatedAt   time.Time `gorm:"column:updated_at;not null" json:"updated_at"`
}

func (Host) TableName() string { return "hosts" }

// GPUDrain marks a GPU that takes no new allocations.
type GPUDrain struct {
	Host       string    `gorm:"column:host;primaryKey" json:"host"`
	GPUAddress string    `gorm:"column:gpu_address;primaryKey" json:"gpu_address"`
	Reason     string    `gorm:"column:reason;not null" json:"reason,omitempty"`
	DrainedBy  string    `gorm:"column:drained_by;not null" json:"drained_by,omitempty"`
	CreatedAt  time.Time `gorm:"column:created_at;not null" json:"created_at"`
}

func (GPUDrain) TableName() string { return "gpu_drains" }

// Console ticket kinds.
const (
	TicketConsole = "console"
	TicketTunnel  = "tunnel"
)

// Ticket protocols: what a tunnel ticket carries to its guest's port. A
// console ticket is tcp (the display is a TCP connection).
const (
	ProtocolTCP = "tcp"
	ProtocolUDP = "udp"
)

// ConsoleTicket is a one-time, short-lived ticket to a VM's display (kind
// console) or to a TCP or UDP port of its guest (kind tunnel, Protocol tcp
// or udp). ID is the SHA-256 of the ticket, hex; the ticket itself is never
// stored.
type ConsoleTicket struct {
	ID        string     `gorm:"column:id;primaryKey" json:"-"`
	VMID      string     `gorm:"column:vm_id;not null" json:"vm_id"`
	User      string     `gorm:"column:user_name;not null" json:"user"`
	Kind      string     `gorm:"column:kind;not null" json:"kind"`
	Port      int        `gorm:"column:port;not null" json:"port,omitempty"`
	Protocol  string     `gorm:"column:protocol;not null" json:"protocol"`
	CreatedAt time.Time  `gorm:"column:created_at;not null" json:"created_at"`
	ExpiresAt time.Time  `gorm:"column:expires_at;not null;index:console_tickets_expires" json:"expires_at"`
	UsedAt    *time.Time `gorm:"column:used_at" json:"used_at,omitempty"`
}

func (ConsoleTicket) TableName() string { return "console_tickets" }

// GPUSample is a sample of one GPU (Instance empty) or of one device on it,
// mapped to the VM and user that held it. Resolution is 0 for a raw sample,
// else the seconds of the period a downsampled row averages (SampleCount raw
// samples). Ratios are 0..1 and -1 when the GPU did not report them.
type GPUSample struct {
	ID          int64     `gorm:"column:id;primaryKey" json:"-"`
	Host        string    `gorm:"column:host;not null;index:gpu_samples_gpu,priority:1" json:"host"`
	GPUAddress  string    `gorm:"column:gpu_address;not null;index:gpu_samples_gpu,priority:2" json:"gpu_address"`
	Instance    string    `gorm:"column:instance;not null" json:"instance,omitempty"`
	VMID        string    `gorm:"column:vm_id;not null;index:gpu_samples_vm,priority:1" json:"vm_id,omitempty"`
	User        string    `gorm:"column:user_name;not null" json:"user,omitempty"`
	TakenAt     time.Time `gorm:"column:taken_at;not null;index:gpu_samples_gpu,priority:4;index:gpu_samples_vm,priority:3;index:gpu_samples_resolution,priority:2" json:"taken_at"`
	Resolution  int       `gorm:"column:resolution;not null;index:gpu_samples_gpu,priority:3;index:gpu_samples_vm,priority:2;index:gpu_samples_resolution,priority:1" json:"resolution"`
	SampleCount int       `gorm:"column:sample_count;not null" json:"sample_count"`
	GPUUtil     float64   `gorm:"column:gpu_util;not null" json:"gpu_util"`
	MemUtil     float64   `gorm:"column:mem_util;not null" json:"mem_util"`
	EncUtil     float64   `gorm:"column:enc_util;not null" json:"enc_util"`
	DecUtil     float64   `gorm:"column:dec_util;not null" json:"dec_util"`
	MemUsed     int64     `gorm:"column:mem_used;not null" json:"mem_used_bytes"`
	MemTotal    int64     `gorm:"column:mem_total;not null" json:"mem_total_bytes"`
	Temperature float64   `gorm:"column:temperature;not null" json:"temperature_celsius"`
	PowerWatts  float64   `gorm:"column:power_watts;not null" json:"power_watts"`
	SMClockMHz  int       `gorm:"column:sm_clock_mhz;not null" json:"sm_clock_mhz"`
	XIDErrors   int       `gorm:"column:xid_errors;not null" json:"xid_errors"`
	ECCErrors   int       `gorm:"column:ecc_errors;not null" json:"ecc_errors"`
	// License is a vGPU's licence state (monitor.License*), "" when not
	// known; a downsampled row keeps the period's last known one.
	License string `gorm:"column:license;not null" json:"license,omitempty"`
}

func (GPUSample) TableName() string { return "gpu_samples" }

// Alert states.
const (
	AlertFiring   = "firing"
	AlertResolved = "resolved"
)

// Alert is one firing (or resolved) alert of a rule about a subject (a GPU,
// a VM, the queue). At most one is firing per rule and subject.
type Alert struct {
	ID         int64      `gorm:"column:id;primaryKey" json:"id"`
	Rule       string     `gorm:"column:rule;not null;uniqueIndex:alerts_firing,priority:1,where:state = 'firing'" json:"rule"`
	Subject    string     `gorm:"column:subject;not null;uniqueIndex:alerts_firing,priority:2" json:"subject"`
	Host       string     `gorm:"column:host;not null" json:"host,omitempty"`
	Metric     string     `gorm:"column:metric;not null" json:"metric"`
	Value      float64    `gorm:"column:value;not null" json:"value"`
	Summary    string     `gorm:"column:summary;not null" json:"summary,omitempty"`
	State      string     `gorm:"column:state;not null" json:"state"`
	StartedAt  time.Time  `gorm:"column:started_at;not null;index:alerts_started" json:"started_at"`
	ResolvedAt *time.Time `gorm:"column:resolved_at" json:"resolved_at,omitempty"`
	NotifiedAt *time.Time `gorm:"column:notified_at" json:"notified_at,omitempty"`
	UpdatedAt  time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
}

func (Alert) TableName() string { return "alerts" }

// Installation is the one row naming the gpuvm installation a database
// belongs to (made at the first migration, kept by migrate-db and restore).
type Installation struct {
	Singleton int       `gorm:"column:singleton;primaryKey" json:"-"`
	ID        string    `gorm:"column:id;not null" json:"id"`
	CreatedAt time.Time `gorm:"column:created_at;not null" json:"created_at"`
}

func (Installation) TableName() string { return "installation" }

// Audit outcomes.
const (
	AuditOK      = "ok"
	AuditRefused = "refused"
	AuditFailed  = "failed"
)

// AuditEntry is one state-changing request, or one console or tunnel
// opened: append only (an update is refused by a trigger), removed only by
// retention. TokenID names the token (never its secret); 0 when none.
type AuditEntry struct {
	ID        int64     `gorm:"column:id;primaryKey" json:"id"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:audit_log_created" json:"time"`
	User      string    `gorm:"column:user_name;not null;index:audit_log_user,priority:1" json:"user,omitempty"`
	TokenID   int64     `gorm:"column:token_id;not null" json:"token_id,omitempty"`
	Source    string    `gorm:"column:source;not null" json:"source,omitempty"`
	Action    string    `gorm:"column:action;not null;index:audit_log_action,priority:1" json:"action"`
	Target    string    `gorm:"column:target;not null" json:"target,omitempty"`
	VMID      string    `gorm:"column:vm_id;not null;index:audit_log_vm,priority:1" json:"vm_id,omitempty"`
	Outcome   string    `gorm:"column:outcome;not null" json:"outcome"`
	Status    int       `gorm:"column:status;not null" json:"status,omitempty"`
	Detail    string    `gorm:"column:detail;not null" json:"detail,omitempty"`
	RequestID string    `gorm:"column:request_id;not null" json:"request_id,omitempty"`
}

func (AuditEntry) TableName() string { return "audit_log" }

// VMCredential is the one-time desktop password of a VM: Login is the
// guest account cloud-init makes, PasswordHash its SHA-512 crypt hash (what
// the seed carries), Password the password itself until its owner reads it
// once (TakeVMCredential empties it and sets ReadAt), or the VM is deleted.
// Never in JSON.
type VMCredential struct {
	VMID         string     `gorm:"column:vm_id;primaryKey" json:"-"`
	Login        string     `gorm:"column:login;not null" json:"-"`
	Password     string     `gorm:"column:password;not null" json:"-"`
	PasswordHash string     `gorm:"column:password_hash;not null" json:"-"`
	CreatedAt    time.Time  `gorm:"column:created_at;not null" json:"-"`
	ReadAt       *time.Time `gorm:"column:read_at" json:"-"`
	ReadBy       string     `gorm:"column:read_by;not null" json:"-"`
}

func (VMCredential) TableName() string { return "vm_credentials" }

// Session is somebody signed in (sessions.go): a browser of the web
// portal (Kind SessionCookie) or a CLI (SessionBearer). ID is the SHA-256
// of the secret the cookie or the Authorization header holds; TokenID the
// API token a cookie session was opened with (nil: none), whose revocation
// ends it too; Method how they signed in (SignInToken, or the directory's
// source). A session lives IdleSeconds after its last use, never past
// NotAfter.
type Session struct {
	ID          string    `gorm:"column:id;primaryKey" json:"-"`
	UserID      int64     `gorm:"column:user_id;not null;index:sessions_user" json:"user_id"`
	Kind        string    `gorm:"column:kind;not null" json:"kind"`
	Method      string    `gorm:"column:method;not null" json:"method"`
	TokenID     *int64    `gorm:"column:token_id" json:"token_id,omitempty"`
	CSRF        string    `gorm:"column:csrf;not null" json:"-"`
	CreatedAt   time.Time `gorm:"column:created_at;not null" json:"created_at"`
	ExpiresAt   time.Time `gorm:"column:expires_at;not null;index:sessions_expires" json:"expires_at"`
	IdleSeconds int64     `gorm:"column:idle_seconds;not null" json:"idle_seconds"`
	NotAfter    time.Time `gorm:"column:not_after;not null" json:"not_after"`
	LastSeenAt  time.Time `gorm:"column:last_seen_at;not null" json:"last_seen_at"`
}

func (Session) TableName() string { return "sessions" }

// Image origins.
const (
	ImageImported  = "import"
	ImagePublished = "publish"
)

// Image is a version of a disk image in a storage pool (images.go): made by
// an import (Origin ImageImported, SourcePath the file it came from) or by
// publishing a stopped VM's disk (ImagePublished, SourceVM the VM's id).
// Sizes are bytes: VirtualSize what a guest sees, ActualSize what the file
// takes on disk.
type Image struct {
	ID          int64     `gorm:"column:id;primaryKey" json:"id"`
	Name        string    `gorm:"column:name;not null;uniqueIndex:images_name_version,priority:1" json:"name"`
	Version     int       `gorm:"column:version;not null;uniqueIndex:images_name_version,priority:2" json:"version"`
	OS          string    `gorm:"column:os;not null" json:"os"`
	Firmware    string    `gorm:"column:firmware;not null" json:"firmware"`
	Format      string    `gorm:"column:format;not null" json:"format"`
	VirtualSize int64     `gorm:"column:virtual_size;not null" json:"virtual_size"`
	ActualSize  int64     `gorm:"column:actual_size;not null" json:"actual_size"`
	SHA256      string    `gorm:"column:sha256;not null" json:"sha256"`
	Pool        string    `gorm:"column:pool;not null;uniqueIndex:images_pool_volume,priority:1" json:"pool"`
	Volume      string    `gorm:"column:volume;not null;uniqueIndex:images_pool_volume,priority:2" json:"volume"`
	Path        string    `gorm:"column:path;not null" json:"path"`
	Origin      string    `gorm:"column:origin;not null" json:"origin"`
	SourcePath  string    `gorm:"column:source_path;not null" json:"source_path,omitempty"`
	SourceVM    string    `gorm:"column:source_vm;not null" json:"source_vm,omitempty"`
	CreatedBy   string    `gorm:"column:created_by;not null" json:"created_by"`
	CreatedAt   time.Time `gorm:"column:created_at;not null" json:"created_at"`
}

func (Image) TableName() string { return "images" }

// ImageUse is the image version a VM's disk overlay was made on.
type ImageUse struct {
	VMID      string    `gorm:"column:vm_id;primaryKey" json:"vm_id"`
	ImageID   int64     `gorm:"column:image_id;not null;index:image_uses_image" json:"image_id"`
	CreatedAt time.Time `gorm:"column:created_at;not null" json:"created_at"`
}

func (ImageUse) TableName() string { return "image_uses" }

// Snapshot states and consistencies (snapshots.go).
const (
	SnapCreating  = "creating"  // the row is written, the disk's snapshot maybe not yet
	SnapReady     = "ready"     // on the disk; may be restored or deleted
	SnapRestoring = "restoring" // the disk is being set back to it
	SnapDeleting  = "deleting"  // being removed from the disk
	SnapFailed    = "failed"    // its creation failed; nothing of it is on the disk

	SnapQuiesced      = "quiesced"         // the guest's file systems were frozen
	SnapCrashConsists = "crash-consistent" // as after a power cut
)

// Snapshot is a disk snapshot of a VM's system disk: an internal qcow2
// snapshot of its overlay named Tag, which carries Installation (the
// database's installation id) so that nothing removes another
// installation's. OperationID is the operation that last acted on it.
type Snapshot struct {
	ID           string     `gorm:"column:id;primaryKey" json:"id"`
	VMID         string     `gorm:"column:vm_id;not null;index:vm_snapshots_vm,priority:1" json:"vm_id"`
	Owner        string     `gorm:"column:owner;not null;index:vm_snapshots_owner,priority:1" json:"owner"`
	Label        string     `gorm:"column:label;not null" json:"label,omitempty"`
	Tag          string     `gorm:"column:tag;not null" json:"tag"`
	Installation string     `gorm:"column:installation;not null" json:"installation"`
	State        string     `gorm:"column:state;not null" json:"state"`
	Consistency  string     `gorm:"column:consistency;not null" json:"consistency,omitempty"`
	OperationID  string     `gorm:"column:operation_id;not null;index:vm_snapshots_operation" json:"operation_id,omitempty"`
	Error        string     `gorm:"column:error;not null" json:"error,omitempty"`
	CreatedBy    string     `gorm:"column:created_by;not null" json:"created_by,omitempty"`
	CreatedAt    time.Time  `gorm:"column:created_at;not null;index:vm_snapshots_vm,priority:2;index:vm_snapshots_owner,priority:2" json:"created_at"`
	UpdatedAt    time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	RestoredAt   *time.Time `gorm:"column:restored_at" json:"restored_at,omitempty"`
}

func (Snapshot) TableName() string { return "vm_snapshots" }

// Volume kinds and states (volumes.go).
const (
	VolumeDisk = "disk" // a data disk: a block volume on one host

	VolCreating = "creating" // the row is written, the host's volume maybe not yet
	VolReady    = "ready"    // made; may be attached, resized, deleted
	VolDeleting = "deleting" // being removed from the host; the row goes last
	VolError    = "error"    // its creation failed; it may be deleted
	// VolDetaching: still attached, being unplugged from its running VM
	// (OpDisks); detached, and ready, once the guest let it go.
	VolDetaching = "detaching"
)

// Volume is a person's data disk: a qcow2 volume named Volume in the
// libvirt pool Pool of Host, attached to at most one VM (AttachedVM).
// Installation is the database's installation id, also in the volume's
// name (DiskVolumeName), so that nothing removes another installation's.
type Volume struct {
	ID           string     `gorm:"column:id;primaryKey" json:"id"`
	Owner        string     `gorm:"column:owner;not null;uniqueIndex:volumes_owner_name,priority:1" json:"owner"`
	Name         string     `gorm:"column:name;not null;uniqueIndex:volumes_owner_name,priority:2" json:"name"`
	Kind         string     `gorm:"column:kind;not null" json:"kind"`
	SizeBytes    int64      `gorm:"column:size_bytes;not null" json:"size_bytes"`
	Host         string     `gorm:"column:host;not null" json:"host"`
	Pool         string     `gorm:"column:pool;not null" json:"pool"`
	Volume       string     `gorm:"column:volume;not null" json:"volume"`
	AttachedVM   *string    `gorm:"column:attached_vm;index:volumes_attached_vm" json:"attached_vm,omitempty"`
	AttachedAt   *time.Time `gorm:"column:attached_at" json:"attached_at,omitempty"`
	State        string     `gorm:"column:state;not null" json:"state"`
	Error        string     `gorm:"column:error;not null" json:"error,omitempty"`
	Installation string     `gorm:"column:installation;not null" json:"installation"`
	CreatedBy    string     `gorm:"column:created_by;not null" json:"created_by,omitempty"`
	CreatedAt    time.Time  `gorm:"column:created_at;not null" json:"created_at"`
	UpdatedAt    time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
}

func (Volume) TableName() string { return "volumes" }

// Task is a command run in a VM of its own (tasks.go; api.Task): Command is
// its JSON argv, or Script its script; Env a JSON object. TermAt is when
// the runner was asked to stop it (SIGTERM), CancelAt when a person
// cancelled it.
type Task struct {
	ID         string     `gorm:"column:id;primaryKey" json:"id"`
	Owner      string     `gorm:"column:owner;not null;index:tasks_owner,priority:1" json:"owner"`
	Profile    string     `gorm:"column:profile;not null" json:"profile"`
	Command    string     `gorm:"column:command;not null" json:"command,omitempty"`
	Script     string     `gorm:"column:script;not null" json:"script,omitempty"`
	Env        string     `gorm:"column:env;not null" json:"env,omitempty"`
	TimeLimitS int64      `gorm:"column:time_limit_s;not null" json:"time_limit_s"`
	KillWaitS  int64      `gorm:"column:kill_wait_s;not null" json:"kill_wait_s"`
	State      string     `gorm:"column:state;not null;index:tasks_live,where:ended_at IS NULL" json:"state"`
	Reason     string     `gorm:"column:reason;not null" json:"reason,omitempty"`
	ExitCode   *int       `gorm:"column:exit_code" json:"exit_code,omitempty"`
	Signal     *int       `gorm:"column:signal" json:"signal,omitempty"`
	VMID       string     `gorm:"column:vm_id;not null;index:tasks_vm" json:"vm_id"`
	LogBytes   int64      `gorm:"column:log_bytes;not null" json:"log_bytes"`
	CreatedAt  time.Time  `gorm:"column:created_at;not null;index:tasks_owner,priority:2" json:"created_at"`
	UpdatedAt  time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
	StartedAt  *time.Time `gorm:"column:started_at" json:"started_at,omitempty"`
	EndedAt    *time.Time `gorm:"column:ended_at;index:tasks_ended,where:ended_at IS NOT NULL" json:"ended_at,omitempty"`
	TermAt     *time.Time `gorm:"column:term_at" json:"term_at,omitempty"`
	CancelAt   *time.Time `gorm:"column:cancel_at" json:"cancel_at,omitempty"`
	// An array's row has ArraySpec, ArrayCap (0: no cap) and ArrayCount
	// and no VM; an element's ArrayID is its array's, ArrayIndex its index.
	ArrayID    string `gorm:"column:array_id;not null;index:tasks_array,priority:1" json:"array_id,omitempty"`
	ArrayIndex *int   `gorm:"column:array_index;index:tasks_array,priority:2" json:"array_index,omitempty"`
	ArraySpec  string `gorm:"column:array_spec;not null" json:"array_spec,omitempty"`
	ArrayCap   int    `gorm:"column:array_cap;not null" json:"array_cap,omitempty"`
	ArrayCount int    `gorm:"column:array_count;not null" json:"array_count,omitempty"`
	// Retries is how many times a failed attempt is launched again when
	// its end is in RetryOn (comma-separated exit codes, node_fail,
	// boot_fail); Attempt counts the launches from 1.
	Retries int    `gorm:"column:retries;not null" json:"retries,omitempty"`
	RetryOn string `gorm:"column:retry_on;not null" json:"retry_on,omitempty"`
	Attempt int    `gorm:"column:attempt;not null;default:1" json:"attempt"`
	// WarnSignal is sent WarnLeadS before the time limit (WarnedAt: when).
	WarnSignal string     `gorm:"column:warn_signal;not null" json:"warn_signal,omitempty"`
	WarnLeadS  int64      `gorm:"column:warn_lead_s;not null" json:"warn_lead_s,omitempty"`
	WarnedAt   *time.Time `gorm:"column:warned_at" json:"warned_at,omitempty"`
	// StartAt and VMGroup are what a VM made later (an element's, a
	// retry's) gets: the earliest start, the owner's group.
	StartAt *time.Time `gorm:"column:start_at" json:"start_at,omitempty"`
	VMGroup string     `gorm:"column:vm_group;not null" json:"vm_group,omitempty"`
	// LogBase is the bytes of output kept before this attempt.
	LogBase int64 `gorm:"column:log_base;not null" json:"log_base,omitempty"`
	// BootingAt is when this attempt's VM was first seen running: the
	// boot timeout counts from it, across restarts of gpuvmd.
	BootingAt *time.Time `gorm:"column:booting_at" json:"booting_at,omitempty"`
	// InVM is the owner's own VM the task runs in (--in), VMID too;
	// InProfile the profile it had before, which it is put back to; InStep
	// how far its use has come (TaskIn*); InSteps the steps done, one a
	// line; InEnd the state the task ends in once the VM is put back (""
	// from its exit, time limit or cancel).
	InVM      string `gorm:"column:in_vm;not null" json:"in_vm,omitempty"`
	InProfile string `gorm:"column:in_profile;not null" json:"in_profile,omitempty"`
	InStep    string `gorm:"column:in_step;not null" json:"in_step,omitempty"`
	InSteps   string `gorm:"column:in_steps;not null" json:"in_steps,omitempty"`
	InEnd     string `gorm:"column:in_end;not null" json:"in_end,omitempty"`
}

// Steps of a task that runs in its owner's own VM (Task.InStep).
const (
	TaskInSubmitted = ""         // the VM is the task's, nothing done yet
	TaskInResize    = "resize"   // moved to the task's profile
	TaskInStart     = "start"    // started with the task
	TaskInStop      = "stop"     // stopped after the task
	TaskInPutBack   = "put back" // moved back to its own profile
	TaskInDone      = "done"     // the VM is its owner's again
)

func (Task) TableName() string { return "tasks" }

// IsArray reports whether t is an array's own row (no VM, elements).
func (t *Task) IsArray() bool { return t.ArraySpec != "" }

// TaskAttempt is how one attempt of a task that may retry ended.
type TaskAttempt struct {
	TaskID    string     `gorm:"column:task_id;primaryKey" json:"task_id"`
	Attempt   int        `gorm:"column:attempt;primaryKey" json:"attempt"`
	VMID      string     `gorm:"column:vm_id;not null" json:"vm_id"`
	State     string     `gorm:"column:state;not null" json:"state"`
	Reason    string     `gorm:"column:reason;not null" json:"reason"`
	ExitCode  *int       `gorm:"column:exit_code" json:"exit_code,omitempty"`
	Signal    *int       `gorm:"column:signal" json:"signal,omitempty"`
	StartedAt *time.Time `gorm:"column:started_at" json:"started_at,omitempty"`
	EndedAt   time.Time  `gorm:"column:ended_at;not null" json:"ended_at"`
}

func (TaskAttempt) TableName() string { return "task_attempts" }
