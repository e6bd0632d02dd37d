package api

import "time"

// States of a host (Host.State, HostDrainState.State, VM.HostState).
const (
	HostUp       = "up"
	HostDown     = "down"
	HostDraining = "draining"
)

// Host is one gpuvmd of the fleet as GET /v1/hosts shows it.
type Host struct {
	Name string `json:"name"`
	// State is up, down or draining; a host whose heartbeat is older than
	// three heartbeat intervals is down whatever its row says.
	State   string `json:"state"`
	Version string `json:"version,omitempty"`
	// APIURL is where the host's gpuvmd answers (admins only).
	APIURL       string    `json:"api_url,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	HeartbeatAt  time.Time `json:"heartbeat_at"`
	HeartbeatAge float64   `json:"heartbeat_age_seconds"`
	Simulated    bool      `json:"simulated,omitempty"`
	// GPUs is how many GPUs the host has; DrainedGPUs how many of them
	// take no new VMs.
	GPUs        int `json:"gpus"`
	DrainedGPUs int `json:"drained_gpus"`
	// Free is what could still be placed on the host, as its last
	// heartbeat saw it (drained GPUs left out).
	Free Capacity `json:"free"`
	// Leader marks the node that places the fleet's queue and runs its
	// once-only work (one at a time, elected through the database).
	Leader bool `json:"leader,omitempty"`
}

// Capacity summarises free GPU capacity.
type Capacity struct {
	// IdleGPUs are GPUs with no device on them, for any mode (a whole
	// GPU, MIG or vGPU).
	IdleGPUs int `json:"idle_gpus"`
	// VGPU is how many more vGPUs of each type can be made.
	VGPU map[string]int `json:"vgpu,omitempty"`
	// MIG is how many more instances of each MIG profile fit, each
	// profile counted on its own.
	MIG map[string]int `json:"mig,omitempty"`
}

// HostList is the answer to GET /v1/hosts, by name.
type HostList struct {
	Items []Host `json:"items"`
}

// DrainRequest is the body of POST /v1/admin/gpus/{address}/drain; it may
// be empty.
type DrainRequest struct {
	// Reason is shown to users whose VMs wait for the GPU: one line, at
	// most 200 characters.
	Reason string `json:"reason,omitempty"`
}

// HostDrainState is the answer to POST and DELETE
// /v1/admin/hosts/{name}/drain: the node, its state, and what stays on it.
type HostDrainState struct {
	Host string `json:"host"`
	// State is draining after a drain, else up (or down when its
	// heartbeat stopped).
	State string `json:"state"`
	// VMs are the VMs placed on the node that are not deleted: they stay
	// on it. Their disks are local to the node, so gpuvm cannot move them
	// to another; they end when deleted or when their lease ends.
	VMs []string `json:"vms"`
	// Message says it in a sentence.
	Message string `json:"message"`
}

// GPUDrainState is the answer to drain and undrain: the GPU and its drain
// (nil once undrained).
type GPUDrainState struct {
	Host    string `json:"host"`
	Address string `json:"address"`
	Drained *Drain `json:"drained"`
}
