package api

import "time"

// Profile is what GET /v1/profiles and GET /v1/profiles/{name} say of a
// profile beside its resolved fields (pkg/config's Profile as JSON, in the
// same object): whether this server can serve it at all.
type Profile struct {
	// Unservable, when set, says in words why no GPU of the hosts that
	// have reported their inventory (and are not down) can ever give the
	// profile ("no GPU here can ever give H100-4C (boards: L40S; …)"): the
	// scheduler's own test, on their GPUs empty. A VM of it is refused at
	// once (POST /v1/vms: 422). Absent when a GPU can give it, when it
	// needs no GPU, and when no host has reported yet (nothing is known).
	Unservable string `json:"unservable,omitempty"`
	// Unavailable, when set, says in words why a VM of the profile cannot
	// be made on this server now: what it is made of is missing (its disk
	// image not built or imported, its boot kernel or initrd, its
	// cloud-init template): "its disk image \"desktop\" is not on this
	// server (an admin has to build or import it)". It names no server
	// path. A VM of it is refused at once (POST /v1/vms: 422); it is
	// checked again at each question, so an image built or imported shows
	// at once.
	Unavailable string `json:"unavailable,omitempty"`
	// NextFreeAt (GET /v1/profiles), when none of the profile's GPU is
	// free now, is when one is expected to free up for the caller behind
	// the queue, by the replay of the estimated start (GET /v1/vms/{id}'s
	// estimated_start). Absent when one is free now, or nothing is known,
	// or it is not computed yet for the caller (the first time they ask:
	// estimate_stale is then true, and a question a moment later has it).
	NextFreeAt *time.Time `json:"next_free_at,omitempty"`
	// Free (GET /v1/profiles) is how many VMs of the profile the hosts
	// that are up could place now, counted by the placers one VM after
	// the other. Absent when the profile needs no GPU or no host is known.
	Free *ProfileFree `json:"free,omitempty"`
	// EstimateComputedAt (GET /v1/profiles) is when the state that Free,
	// NextFreeAt and Unservable were computed from was read: gpuvmd
	// computes them once per change of the state, in the background, and
	// every request reads the last computation. Absent when none is done
	// yet.
	EstimateComputedAt *time.Time `json:"estimate_computed_at,omitempty"`
	// EstimateStale is true when the state has changed since, and a new
	// computation is under way.
	EstimateStale bool `json:"estimate_stale,omitempty"`
}

// ProfileFree is how many VMs of a profile the hosts could place.
type ProfileFree struct {
	// VMs could start now, one after the other (at most FreeLimit).
	VMs int `json:"vms"`
	// Total could run at once on the hosts holding nothing, their drained
	// GPUs left out: "23 free of 56" is VMs over Total.
	Total int `json:"total"`
	// ByKind splits VMs by the kind of GPU each would get (mig, vgpu,
	// passthrough): a profile of several kinds may get MIG instances on
	// some GPUs and vGPUs on others.
	ByKind map[string]int `json:"by_kind,omitempty"`
}

// FreeLimit bounds ProfileFree's counts.
const FreeLimit = 999

// Answers of GET /v1/profiles/{name}/admission (Admission.Answer).
const (
	AdmissionStarts  = "starts"  // nothing in the policy keeps it from starting now
	AdmissionWaits   = "waits"   // it would queue until Reason passes
	AdmissionRefused = "refused" // POST /v1/vms would refuse it
	AdmissionUnknown = "unknown" // this server applies no policy it can ask
)

// Admission is the answer to GET /v1/profiles/{name}/admission?hours=N:
// what the sharing policy would say now to the caller's asking for a VM of
// the profile for that many hours: the same check POST /v1/vms makes, with
// nothing made. Capacity is not in it (a free GPU now or not): only the
// rules, and whether the profile can ever be served.
type Admission struct {
	Profile string `json:"profile"`
	Hours   int    `json:"hours"`
	// Answer is starts, waits, refused or unknown.
	Answer string `json:"answer"`
	// Reason is the policy's words when it waits or is refused ("quota:
	// user ann: runs 2 of 2 VMs", the window that forbids the lease).
	Reason string `json:"reason,omitempty"`
	// Quota is the caller's limits in force; a limit that is absent is
	// none.
	Quota Quota `json:"quota"`
	// Budgets are the periods of the caller's GPU-hour budgets now: the
	// GPU-hours used in one so far are GET /v1/usage from its start (the
	// check also counts what running VMs will hold until their lease
	// ends).
	Budgets []Budget `json:"budgets"`
	// Window is the policy's time window in force now, if any.
	Window *AdmissionWindow `json:"window,omitempty"`
}

// Quota is a user's limits as the policy in force sets them (its user's,
// else its groups' loosest, else the defaults); nil: no limit.
type Quota struct {
	VMs       *int    `json:"vms,omitempty"`    // VMs at once
	GPUs      *int    `json:"gpus,omitempty"`   // whole GPUs at once
	Slices    *int    `json:"slices,omitempty"` // vGPUs and MIG instances at once
	GPUMemory *uint64 `json:"gpu_memory,omitempty"`
	// GPU-hour budgets, in the policy's timezone (days from midnight,
	// weeks from Monday, months from the 1st).
	GPUHoursPerDay   *float64 `json:"gpu_hours_per_day,omitempty"`
	GPUHoursPerWeek  *float64 `json:"gpu_hours_per_week,omitempty"`
	GPUHoursPerMonth *float64 `json:"gpu_hours_per_month,omitempty"`
}

// Budget is the calendar period of one GPU-hour budget.
type Budget struct {
	Unit     string    `json:"unit"` // day, week or month
	GPUHours float64   `json:"gpu_hours"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
}

// AdmissionWindow is a time window of the policy in force now.
type AdmissionWindow struct {
	Name string `json:"name"`
	// Classes are the scheduling classes that may start in it.
	Classes []string `json:"classes"`
	// Start and End are this occurrence of the window.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Allows says whether the profile's class may start in it.
	Allows bool `json:"allows"`
}

// SSHKeys is the body and answer of PUT and GET /v1/users/{name}/ssh-keys:
// the public keys a user keeps for new VMs (the portal fills its form with
// them). At most 64, each one line of at most 16 KiB.
type SSHKeys struct {
	Keys []string `json:"keys"`
}
