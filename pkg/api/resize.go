package api

// ActionResize is POST /v1/vms/{id}/actions/resize: a stopped VM moves to
// another profile's GPU and size (vCPUs, memory) in one operation, keeping
// its disk. The VM must be stopped (409 naming its state); the profile
// must exist (404), be open to the VM's owner (403 naming the rule) and be
// admitted by the sharing policy as a new VM of it would be (403 naming the
// rule); it must keep the VM's disk: the same image, a disk size no
// smaller (422, field profile). Nothing changes on a refusal.
//
// With dry_run the answer (200) is the plan alone: what changes, whether
// the image's NVIDIA guest driver suits the new GPU, which NVIDIA licence
// the new kind needs. Otherwise the answer (202) carries the plan, the VM
// and the resize operation: the worker redefines the domain with the new
// vCPUs and memory (its new GPU device is made at its next start, as every
// start makes one), then records the new profile and the one it had
// (VM.PreviousProfile); a failure leaves the VM, its domain and its
// allocations as they were. Resizing to PreviousProfile is the way back.
const ActionResize = "resize"

// ResizeVMRequest is the body of POST /v1/vms/{id}/actions/resize.
type ResizeVMRequest struct {
	// Profile is the profile the VM moves to.
	Profile string `json:"profile"`
	// DryRun asks for the plan only: nothing is changed or queued.
	DryRun bool `json:"dry_run,omitempty"`
}

// ResizeSide is one side of a resize: a profile and what it gives.
type ResizeSide struct {
	Profile string `json:"profile"`
	// Kind is the kind of GPU device (vgpu, mig, passthrough, any), empty
	// for a profile without a GPU; GPU says which: the vGPU type, the MIG
	// profile, the model of a whole GPU.
	Kind   string `json:"kind,omitempty"`
	GPU    string `json:"gpu,omitempty"`
	VCPUs  int    `json:"vcpus"`
	Memory uint64 `json:"memory"`
	// Licences lists what NVIDIA licence the GPU needs in the guest.
	Licences []LicenceNeed `json:"licences,omitempty"`
}

// LicenceNeed is the NVIDIA licence one kind of device needs (the facts
// are pkg/licensing's, with NVIDIA's pages cited there).
type LicenceNeed struct {
	Kind string `json:"kind"`
	// Products: any one of them licenses the device; empty: none needed.
	Products []string `json:"products"`
	Driver   string   `json:"driver,omitempty"`
	Why      string   `json:"why"`
	Source   string   `json:"source"`
}

// Guest-driver verdicts of a resize plan.
const (
	DriverOK        = "ok"         // the image's guest driver suits the host's vGPU manager
	DriverMismatch  = "mismatch"   // it does not: the vGPU will not work
	DriverUnknown   = "unknown"    // it could not be checked (no declared driver, no host range)
	DriverNotNeeded = "not_needed" // no vGPU: a whole GPU or none
)

// ResizePlan is the guidance a resize gives before any change.
type ResizePlan struct {
	VM   string     `json:"vm"`
	From ResizeSide `json:"from"`
	To   ResizeSide `json:"to"`
	// Driver is a DriverOK, DriverMismatch, DriverUnknown or
	// DriverNotNeeded verdict on the VM image's NVIDIA guest driver and the
	// target's host; DriverDetail says it in words.
	Driver       string `json:"driver"`
	DriverDetail string `json:"driver_detail"`
	// Disk says what becomes of the disk: kept, with its image.
	Disk string `json:"disk"`
	// Wait is what in the sharing policy keeps the VM from starting on the
	// new profile now (it is admitted: it would queue); empty when nothing.
	Wait string `json:"wait,omitempty"`
	// Snapshot advises a snapshot before the change (POST
	// /v1/vms/{id}/snapshots); the way back is a resize to From.Profile.
	Snapshot string `json:"snapshot"`
}

// ResizeVMResponse answers a resize: the plan, and, unless it was a dry
// run, the VM as it was accepted and its resize operation.
type ResizeVMResponse struct {
	Plan      ResizePlan `json:"plan"`
	VM        *VM        `json:"vm,omitempty"`
	Operation *Operation `json:"operation,omitempty"`
}
