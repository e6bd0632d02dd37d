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
	// SimulatedGPUHours is the part of GPUHours held on a simulated GPU
	// server: no GPU measured it, so it is never part of
	// MeasuredGPUHours (the simulator's figures are its own, not a GPU's).
	SimulatedGPUHours float64 `json:"simulated_gpu_hours,omitempty"`
	// TaskGPUHours is the part of GPUHours held by the VMs of tasks
	// (docs/tasks.md): a task's VM is counted as a VM, and this says how
	// much of the row was tasks'.
	TaskGPUHours float64 `json:"task_gpu_hours,omitempty"`
	// Utilization is UsedGPUHours / MeasuredGPUHours, 0..1; null when no
	// sample was measured (unknown, not zero).
	Utilization *float64 `json:"utilization"`
	// VMs counts the VMs charged; Running those still holding a GPU.
	VMs     int `json:"vms"`
	Running int `json:"running"`
}

// UsagePeriods is the answer to GET /v1/usage/periods: one user's GPU time
// in the calendar day, week (from Monday) and month that hold now, in the
// policy's time zone (the periods its GPU-hour quotas count), each against
// its quota, and day by day.
type UsagePeriods struct {
	User string `json:"user"`
	// Timezone is the IANA name of the zone the periods are days of.
	Timezone string      `json:"timezone"`
	Day      UsagePeriod `json:"day"`
	Week     UsagePeriod `json:"week"`
	Month    UsagePeriod `json:"month"`
	// Days are the days from the earlier of the week's and the month's
	// first day to today, earliest first; their Key is the date
	// ("2026-12-01") and they have no quota.
	Days []UsagePeriod `json:"days"`
}

// UsagePeriod is the GPU time of one period: the numbers of a UsageRow
// (Key "day", "week", "month" or a date), the period, and the quota.
type UsagePeriod struct {
	UsageRow
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// QuotaGPUHours is the user's GPU-hour budget for the period
	// (gpu_hours_per_day, _week, _month of the policy that applies to
	// them); null: none.
	QuotaGPUHours *float64 `json:"quota_gpu_hours"`
}
