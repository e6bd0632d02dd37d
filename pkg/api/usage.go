package api

import "time"

// Groupings of GET /v1/usage (the by parameter).
const (
	UsageByUser    = "user"    // the VM's owner
	UsageByGroup   = "group"   // the group the VM was asked for in
	UsageByProfile = "profile" // the gpuvm profile the VM was asked for
	UsageByGPU     = "gpu"     // the GPU held: "host/address"
	UsageByHost    = "host"    // the GPU server
	UsageByVM      = "vm"      // the VM: "owner/name"
)

// UsageGroupings are the values by may take, the default first.
var UsageGroupings = []string{UsageByUser, UsageByGroup, UsageByProfile, UsageByGPU, UsageByHost, UsageByVM}

// UsageReport is the answer to GET /v1/usage: the GPU time held in [From,
// To), grouped. A VM holding a slice of a GPU is charged the slice's share
// of it: a whole GPU 1, a MIG 1g slice of seven 1/7, a vGPU type its
// fraction of the board. A VM still holding its GPU counts up to now.
type UsageReport struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	By   string    `json:"by"`
	// User is set when the report covers one user's VMs only (a user
	// sees only their own).
	User string `json:"user,omitempty"`
	// Rows are by GPU-hours, most first, then by key.
	Rows  []UsageRow `json:"rows"`
	Total UsageRow   `json:"total"`
}

// UsageRow is the GPU time of one key of a grouping.
type UsageRow struct {
	// Key is the user, group, profile, "host/gpu", host or "owner/vm";
	// "-" when the VM had none (no group, say). The total's key is
	// "total".
	Key string `json:"key"`
	// GPUHours is the GPU time held, weighted by share.
	GPUHours float64 `json:"gpu_hours"`
	// MeasuredGPUHours is the part of GPUHours during which the GPU
	// reported its utilisation (samples mapped to the VM).
	MeasuredGPUHours float64 `json:"measured_gpu_hours"`
	// UsedGPUHours is MeasuredGPUHours times the utilisation achieved;
	// IdleGPUHours the rest of MeasuredGPUHours: held but idle, the waste.
	UsedGPUHours float64 `json:"used_gpu_hours"`
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	// Utilization is UsedGPUHours / MeasuredGPUHours, 0..1; null when no
	// sample was measured (unknown, not zero).
	Utilization *float64 `json:"utilization"`
	// VMs counts the VMs charged; Running those still holding a GPU.
	VMs     int `json:"vms"`
	Running int `json:"running"`
}
