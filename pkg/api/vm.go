package api

import "time"

// MaxRequestBytes bounds the body of every JSON request the API reads.
const MaxRequestBytes = 1 << 20

// CreateVMRequest is the body of POST /v1/vms. Unknown fields are refused.
type CreateVMRequest struct {
	// Profile names the profile the VM is made from.
	Profile string `json:"profile"`
	// Name is the VM's name, unique among the owner's live VMs: lower-case
	// letters, digits and dashes, starting with a letter, at most 63
	// characters. Empty: "<profile>-<random>".
	Name string `json:"name,omitempty"`
	// Hours is the lease: 0 means the profile's default; more than the
	// profile's maximum is refused.
	Hours int `json:"hours,omitempty"`
	// SSHKeys are public keys for the guest's user (cloud-init).
	SSHKeys []string `json:"ssh_keys,omitempty"`
	// StartAt, when set, is the earliest time the VM is placed (RFC 3339):
	// in the future, at most 30 days ahead. Until then the VM is queued
	// with the reason "starts at <time>".
	StartAt *time.Time `json:"start_at,omitempty"`
	// Volumes names the caller's data disks (names or IDs) to attach to
	// the VM: each ready and attached to no other VM (docs/volumes.md).
	Volumes []string `json:"volumes,omitempty"`
	// Shares names the admin-declared shares (GET /v1/shares) to mount in
	// the VM, besides those its profile mounts always: at most 16, each
	// one the owner may mount.
	Shares []string `json:"shares,omitempty"`
}

// VM is a GPU virtual machine as the API shows it.
type VM struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	Profile string `json:"profile"`
	// PreviousProfile is the profile the VM had before its last resize
	// (ActionResize): a resize to it is the way back. Empty: never resized.
	PreviousProfile string `json:"previous_profile,omitempty"`
	// State is queued, allocating, creating, running, stopping, stopped,
	// deleting, deleted or failed.
	State string `json:"state"`
	// Phase says what is being done now ("allocating GPU", "preparing
	// disk"); a running VM is "booting" until its guest is up, then
	// "ready" (see PhaseBooting).
	Phase string `json:"phase,omitempty"`
	// Reason says why the VM is in its state: why it is queued ("no GPU
	// has room for MIG 3g.40gb now", "quota: user ann: runs 2 of 2 VMs",
	// "GPU 0000:41:00.0 is drained (fan)"), why it failed.
	Reason string `json:"reason,omitempty"`
	Host   string `json:"host,omitempty"`
	// HostState is the state of the VM's node (gpuvm hosts): up,
	// draining (it takes no new VMs), or down (its heartbeat stopped: the
	// VM is host-down, kept as it is until the node returns, and nothing
	// can be done to it meanwhile). Absent while the VM is on no node.
	HostState string `json:"host_state,omitempty"`

	// HomeHost is the node its owner's home lives on (server.storage.homes:
	// the node where it was first made), for a VM whose profile mounts the
	// home; absent for one that mounts none, or while the owner has no
	// home yet. Worked out at each read, never stored with the VM.
	HomeHost string `json:"home_host,omitempty"`
	// AwayFromHome is true when the VM is on another node than HomeHost
	// (in a fleet, placed where its home's node could not serve it): the
	// home it mounts is a second directory on its own node, without the
	// files of the home on HomeHost.
	AwayFromHome bool `json:"away_from_home,omitempty"`

	GPUs      []VMGPU    `json:"gpus,omitempty"`
	Hours     int        `json:"hours"`
	LeaseEnd  *time.Time `json:"lease_end,omitempty"`
	StartAt   *time.Time `json:"start_at,omitempty"` // earliest placement (create's start_at)
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`

	// SSHHostKeys are the public halves of the SSH host keys gpuvm made
	// for the guest and put in its cloud-init seed before it booted
	// ("ssh-ed25519 AAAA… gpuvm-<id>"): 'gpuvm ssh' trusts them and no
	// other, so its first connection is verified without a question.
	// Absent for a VM without a seed (no cloud_init block, a Windows
	// guest) or made by a gpuvmd before them. Never a private key.
	SSHHostKeys []string `json:"ssh_host_keys,omitempty"`
	// Addresses are the guest's IP addresses, read live from the
	// hypervisor: GET /v1/vms/{id} of a running VM only (never in lists);
	// absent while the guest has none or the hypervisor did not answer in
	// time.
	Addresses []VMAddress `json:"addresses,omitempty"`
	// Console says how to open the display of a running VM that has one:
	// GET /v1/vms/{id} only (never in lists).
	Console *VMConsole `json:"console,omitempty"`
	// Desktop is how people reach the VM's desktop, from its profile's
	// desktop block: rdp, sunshine or dcv (a server in the guest, through
	// a tunnel: gpuvm desktop), or vnc/spice (the display console). Set on
	// GET /v1/vms/{id} of a running VM.
	Desktop string `json:"desktop,omitempty"`
	// Access says what the VM offers people, from its profile: the
	// portal and the CLI offer exactly this. In every answer (lists too);
	// absent when the VM's profile no longer exists.
	Access *VMAccess `json:"access,omitempty"`
	// Shares are the shares mounted in the VM (its profile's and those
	// asked for) and the owner's mode of each as the policy says now; the
	// access is checked again at each start.
	Shares []VMShare `json:"shares,omitempty"`

	// Capabilities say what can be done to the VM's state — a disk
	// snapshot, a memory snapshot, suspend, live migration — each with the
	// reason in words, from its profile (GPU kind, disk, virtiofs
	// filesystems), its host's libvirt and QEMU and what the NVIDIA driver
	// reports (pkg/capability). GET /v1/vms/{id} only (never in lists).
	Capabilities *VMCapabilities `json:"capabilities,omitempty"`

	// DriverChanges are the announced changes of the hosts' NVIDIA vGPU
	// manager still ahead that concern this VM (one of a vGPU profile,
	// time-sliced or MIG-backed, running or stopped): its guest driver must
	// then be one the new manager supports. The next first; GET
	// /v1/vms/{id} only (never in lists).
	DriverChanges []VMDriverChange `json:"driver_changes,omitempty"`

	// QueuePosition is the VM's place in the queue while it is queued and
	// ranked (1 = next), as the last scheduling round saw it; absent
	// otherwise (not queued, or waiting for its start time or for a GPU
	// this server can never give).
	QueuePosition int `json:"queue_position,omitempty"`

	// EstimatedStart is when a queued VM is predicted to start: gpuvmd
	// replays the queue, the running leases and the reservations forward
	// through the scheduler (pkg/estimate). GET /v1/vms/{id} of a queued
	// VM only; absent when no start can be predicted (the note says why).
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
	// EstimatedStartUncertain is true when something likely may move the
	// estimate (leases that may be extended, later requests the queue
	// order puts first, a preemption it counts on, a start over a day
	// ahead); set with EstimatedStart.
	EstimatedStartUncertain *bool `json:"estimated_start_uncertain,omitempty"`
	// EstimatedStartNote says in words what the estimate rests on and
	// what makes it uncertain ("uncertain: leases may be extended; when 2
	// running VMs' leases end"), or why there is none.
	EstimatedStartNote string `json:"estimated_start_note,omitempty"`
	// EstimateComputedAt is when the replay the estimate comes from read
	// the state: gpuvmd replays the queue once per change (a VM made,
	// started or ended, a lease extended, a reservation, a host's GPUs or
	// state, the configuration), in the background, and every request
	// reads the last replay. Set with EstimatedStart or its note.
	EstimateComputedAt *time.Time `json:"estimate_computed_at,omitempty"`
	// EstimateStale is true when the state has changed since that replay
	// and a new one is being computed: the estimate may move when it is
	// done (ask again in a moment).
	EstimateStale bool `json:"estimate_stale,omitempty"`
}

// States of a VM (VM.State). The lifecycle owns the transitions (see
// docs); a deleted VM frees its name.
const (
	VMQueued     = "queued"
	VMAllocating = "allocating"
	VMCreating   = "creating"
	VMRunning    = "running"
	VMStopping   = "stopping"
	VMStopped    = "stopped"
	VMDeleting   = "deleting"
	VMDeleted    = "deleted"
	VMFailed     = "failed"
)

// VMStates are the states of a VM in the order of its lifecycle.
var VMStates = []string{VMQueued, VMAllocating, VMCreating, VMRunning, VMStopping, VMStopped, VMDeleting, VMDeleted, VMFailed}

// Phases of a running VM: "booting" from the moment its domain starts until
// its guest is up — it has an IP address (from the DHCP leases of its
// network, or its guest agent) — or the boot timeout passes; then "ready"
// (with the reason "the guest reported no address within 5m" after a
// timeout).
const (
	PhaseBooting = "booting"
	PhaseReady   = "ready"
)

// Phases of a VM in the other states (VM.Phase): what it waits for, or the
// step under way.
const (
	PhaseQueued         = "waiting for a GPU"          // queued: for a GPU to start on
	PhaseStartAt        = "waiting for its start time" // queued: asked for ahead
	PhaseAllocating     = "allocating GPU"             // allocating: its devices are made
	PhasePreparingDisk  = "preparing disk"             // creating: its disk and domain are made
	PhaseShuttingDown   = "shutting down"              // stopping
	PhaseStarting       = "starting"                   // stopped: a start is under way
	PhaseRemovingDomain = "removing domain"            // deleting
)

// VMAccess is what a VM offers people (VM.Access), from its profile.
type VMAccess struct {
	// Desktop is the protocol of the desktop people work on: rdp,
	// sunshine or dcv (a server in the guest: gpuvm desktop), vnc or spice
	// (the display console, when the profile's desktop block names it,
	// the vGPU draws on it, or the guest is Windows); absent when the VM
	// has none (its display, if any, is only the boot console).
	Desktop string `json:"desktop,omitempty"`
	// Console is the display's protocol, vnc or spice (gpuvm console, the
	// browser console); absent when the VM has no display.
	Console string `json:"console,omitempty"`
	// SSH: the guest has a network, and gpuvm ssh reaches it through
	// gpuvmd (once it has an address).
	SSH bool `json:"ssh"`
	// Tunnels: gpuvmd's tunnels reach the guest's ports (gpuvm tunnel).
	Tunnels bool `json:"tunnels"`
	// Password: the VM has a one-time desktop password that its owner
	// reads once (POST /v1/vms/{id}/credentials: gpuvm credentials, the
	// portal's Show password once): its profile's guest uses it. False
	// when the profile makes none (the route answers 409), and for a
	// Sunshine desktop with credentials = "vm", whose password gpuvm
	// desktop --pin reads itself.
	Password bool `json:"password"`
	// PasswordReadAt is when the one-time desktop password was read
	// (Password is then false: there is none left to read).
	PasswordReadAt *time.Time `json:"password_read_at,omitempty"`
}

// VMCapabilities are what can be done to a VM's state (VM.Capabilities).
type VMCapabilities struct {
	// DiskSnapshot: a disk-only snapshot of the qcow2 system disk, whatever
	// the GPU; quiesced through the guest agent when it answers, else
	// crash-consistent.
	DiskSnapshot Capability `json:"disk_snapshot"`
	// MemorySnapshot: a snapshot with the VM's memory (RAM) and device
	// state.
	MemorySnapshot Capability `json:"memory_snapshot"`
	// Suspend: the VM's memory and device state saved to disk and the VM
	// stopped, to resume where it was (managed save).
	Suspend Capability `json:"suspend"`
	// LiveMigration: moved to another host while it runs.
	LiveMigration Capability `json:"live_migration"`
	// Basis says what the answers rest on: the host's libvirt and QEMU,
	// and the NVIDIA driver's answer ("libvirt 9.0.0, QEMU 7.2.0; NVIDIA
	// driver: the simulated host's NVML reports vGPU migration support").
	Basis string `json:"basis"`
}

// Capability is one thing that can or cannot be done, and why.
type Capability struct {
	Can bool `json:"can"`
	// Reason says why in words ("a passthrough GPU cannot be suspended:
	// its state cannot be saved", "QEMU 7.2 is older than 8.1, which VFIO
	// migration needs").
	Reason string `json:"reason"`
}

// VMAddress is an IP address of a running VM's guest.
type VMAddress struct {
	// IP is the address: "192.168.122.5", "2001:db8::5".
	IP string `json:"ip"`
	// Prefix is the length of its network prefix (24 for a /24).
	Prefix int `json:"prefix"`
	// Interface names the interface: the host's tap device ("vnet3") for
	// a lease, the guest's own name ("eth0") for the agent.
	Interface string `json:"interface,omitempty"`
	MAC       string `json:"mac,omitempty"` // lower case
	// Source is where it was learnt: "lease" (the DHCP leases of the
	// VM's libvirt network) or "agent" (the QEMU guest agent).
	Source string `json:"source"`
}

// VMConsole says how to open a running VM's display. It holds no
// credential: TicketURL gives a one-time ticket to the caller.
type VMConsole struct {
	Protocol string `json:"protocol"` // vnc or spice
	// TicketURL is GET /v1/vms/{id}/console (bearer token): a one-time
	// ticket with the websocket and browser URLs (a ConsoleResponse).
	TicketURL string `json:"ticket_url"`
	// VVURL is GET /v1/vms/{id}/console.vv (bearer token): a virt-viewer
	// connection file.
	VVURL string `json:"vv_url"`
}

// VMGPU is one GPU device a VM holds.
type VMGPU struct {
	Address string `json:"address"` // PCI address of the physical GPU
	Kind    string `json:"kind"`    // vgpu, mig or passthrough
	// Type is the vGPU type ("L40S-12Q") or the MIG profile ("3g.40gb").
	Type string `json:"type,omitempty"`
	// Placement is the MIG instance's start slice.
	Placement *int `json:"placement,omitempty"`
	// Device is the device's ID (mdev UUID, VF or GPU address) once made.
	Device string `json:"device,omitempty"`
	// License is a vGPU's NVIDIA licence state as its guest's driver last
	// reported it to the host (in GET /v1/vms/{id} only, from the last 10
	// minutes of samples): VGPULicensed, VGPUGrace (unlicensed, still
	// unrestricted) or VGPUUnlicensed (restricted); absent when not known.
	License string `json:"license,omitempty"`
}

// vGPU licence states (VMGPU.License).
const (
	VGPULicensed   = "licensed"
	VGPUGrace      = "grace"
	VGPUUnlicensed = "unlicensed"
)

// Console is where a VM's display listens (ConsoleResponse.Direct).
type Console struct {
	Protocol string `json:"protocol"` // vnc or spice
	Host     string `json:"host"`
	Port     int    `json:"port"`
}

// States of an operation (Operation.State).
const (
	OpPending = "pending"
	OpRunning = "running"
	OpDone    = "done"
	OpFailed  = "failed"
)

// Operation is a change to a VM that takes time: creation, deletion.
type Operation struct {
	ID   string `json:"id"`
	VMID string `json:"vm_id"`
	Kind string `json:"kind"` // create, delete, ...
	// State is pending, running, done or failed.
	State      string     `json:"state"`
	Step       string     `json:"step,omitempty"`
	Error      string     `json:"error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CreateVMResponse is the answer (202) to POST /v1/vms.
type CreateVMResponse struct {
	VM        VM        `json:"vm"`
	Operation Operation `json:"operation"`
}

// OperationResponse is the answer (202) to DELETE /v1/vms/{id}.
type OperationResponse struct {
	Operation Operation `json:"operation"`
}

// VMList is one page of GET /v1/vms, oldest first.
type VMList struct {
	Items []VM `json:"items"`
	// Next is the cursor of the next page (?after=Next); empty on the last.
	Next string `json:"next,omitempty"`
}
