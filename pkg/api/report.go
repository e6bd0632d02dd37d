package api

import (
	"math"
	"strconv"
	"time"
)

// ReportSummary is the answer to GET /v1/reports/summary (admins):
// everything the periodic review report (gpuvm report) shows, computed by
// the server for [From, To).
type ReportSummary struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	GeneratedAt time.Time `json:"generated_at"`
	// Location is the time zone (IANA name) of the weekday × hour
	// heatmaps and of the day and night of the notes.
	Location string `json:"location"`
	// GPUs is the number of GPUs of the fleet (the hosts' last
	// inventories; else the GPUs that were held in the range);
	// CapacityGPUHours is what they offered in the range.
	GPUs             int     `json:"gpus"`
	CapacityGPUHours float64 `json:"capacity_gpu_hours"`
	// Total, ByUser, ByGroup and ByProfile are usage as GET /v1/usage
	// shows it.
	Total     UsageRow   `json:"total"`
	ByUser    []UsageRow `json:"by_user"`
	ByGroup   []UsageRow `json:"by_group"`
	ByProfile []UsageRow `json:"by_profile"`
	// IdleVMs are the VMs that held a GPU for at least an hour measured
	// in the range with a utilisation below IdleBelow (0..1), most idle
	// GPU-hours first (at most 50).
	IdleBelow float64  `json:"idle_below"`
	IdleVMs   []IdleVM `json:"idle_vms"`
	// QueueWaits are the waits of the VMs asked for in the range (or
	// booked to start in it), per profile, by profile; the last row,
	// profile "total", is over all of them.
	QueueWaits []QueueWaitStats `json:"queue_waits"`
	Heatmaps   Heatmaps         `json:"heatmaps"`
	// Notes say in plain language what stands out: day capacity idle
	// while night requests queue (or the reverse), waste, missing
	// samples.
	Notes []string `json:"notes"`
}

// IdleVM is a VM that held a GPU but hardly used it.
type IdleVM struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	Group   string `json:"group,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Running: it still holds its GPU.
	Running          bool    `json:"running"`
	GPUHours         float64 `json:"gpu_hours"`
	MeasuredGPUHours float64 `json:"measured_gpu_hours"`
	IdleGPUHours     float64 `json:"idle_gpu_hours"`
	Utilization      float64 `json:"utilization"`
}

// QueueWaitStats sums up how long the VMs of a profile waited in the
// queue: from when they were asked for (or their booked start) until they
// first ran.
type QueueWaitStats struct {
	Profile string `json:"profile"`
	// Requests counts the VMs; Started those that ran, Waiting those
	// still waiting, Failed those that failed before running, GaveUp
	// those deleted before running.
	Requests int `json:"requests"`
	Started  int `json:"started"`
	Waiting  int `json:"waiting"`
	Failed   int `json:"failed"`
	GaveUp   int `json:"gave_up"`
	// MeanSeconds, P95Seconds and MaxSeconds are over the VMs that
	// started (0 when none did).
	MeanSeconds float64 `json:"mean_seconds"`
	P95Seconds  float64 `json:"p95_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
}

// Heatmaps are weekday × hour-of-day means over the range, in the report's
// Location: [0] is Monday, [6] Sunday; [d][h] the hour from h:00.
type Heatmaps struct {
	// AllocatedGPUs is the mean number of GPUs held (GPU-hours held in
	// that hour of the week, divided by the number of such hours in the
	// range).
	AllocatedGPUs [7][24]float64 `json:"allocated_gpus"`
	// QueuedVMs is the mean number of VMs waiting in the queue.
	QueuedVMs [7][24]float64 `json:"queued_vms"`
	// Utilization is the mean GPU utilisation (0..1) of the held GPUs
	// that reported it; null where none did.
	Utilization [7][24]*float64 `json:"utilization"`
}

// FormatGPUHours writes GPU-hours as every review output does (the notes,
// the HTML report, the portal): "0"; two significant digits under 1
// ("0.034", "0.25"; "<0.001" below that); one decimal under 100 ("3.5");
// whole hours with thousands separated above ("1,234").
func FormatGPUHours(h float64) string {
	switch {
	case h == 0:
		return "0"
	case h < 0.001:
		return "<0.001"
	case h < 1:
		return strconv.FormatFloat(h, 'f', 1-int(math.Floor(math.Log10(h))), 64)
	case h < 100:
		return strconv.FormatFloat(h, 'f', 1, 64)
	}
	s := strconv.FormatFloat(math.Round(h), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
