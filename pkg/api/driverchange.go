package api

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// A change of the hosts' NVIDIA vGPU manager that an admin announces ahead
// (docs/snapshots.md, "Before a driver change"): a guest's NVIDIA driver
// must be one the host's vGPU manager supports, so the people whose VMs
// hold a vGPU (time-sliced or MIG-backed) will have to change the driver
// inside them. Until the change, the rules of sharing tell each of them
// once (a vm.warning of kind driver_change) and offer a snapshot of the
// VM's disk first. An announcement is an event of the log (driver.announced,
// driver.withdrawn), whichever node of a fleet took it.

// Event types of the announcements (payload DriverChangeEventPayload).
const (
	EventDriverAnnounced = "driver.announced"
	EventDriverWithdrawn = "driver.withdrawn"
)

// WarningDriverChange: the hosts' vGPU manager changes; change the guest
// driver, a snapshot first (a kind of vm.warning).
const WarningDriverChange = "driver_change"

// DriverChangeRequest is POST /v1/admin/driver-changes.
type DriverChangeRequest struct {
	// Driver is the NVIDIA vGPU manager's version the hosts move to, such
	// as "550.90.07".
	Driver string `json:"driver"`
	// At is when (RFC 3339), ahead: at most a year.
	At time.Time `json:"at"`
	// Note, optional, is one line for the people told (at most
	// MaxDriverChangeNote characters).
	Note string `json:"note,omitempty"`
}

// MaxDriverChangeNote bounds an announcement's note.
const MaxDriverChangeNote = 200

var driverVersionRE = regexp.MustCompile(`^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)

// Problem names what is wrong with r at now: the field and the reason
// ("" when nothing is).
func (r DriverChangeRequest) Problem(now time.Time) (field, msg string) {
	switch {
	case !driverVersionRE.MatchString(r.Driver):
		return "driver", fmt.Sprintf("%q is not an NVIDIA driver version such as 550.90.07", r.Driver)
	case r.At.IsZero():
		return "at", "missing: when the change happens (RFC 3339, such as 2026-12-12T09:00:00Z)"
	case !r.At.After(now):
		return "at", fmt.Sprintf("%s is not ahead: an announcement tells people before the change", r.At.UTC().Format(time.RFC3339))
	case r.At.After(now.AddDate(1, 0, 0)):
		return "at", fmt.Sprintf("%s is more than a year ahead", r.At.UTC().Format(time.RFC3339))
	case utf8.RuneCountInString(r.Note) > MaxDriverChangeNote || strings.IndexFunc(r.Note, unicode.IsControl) >= 0 || !utf8.ValidString(r.Note):
		return "note", fmt.Sprintf("one line of at most %d characters, without control characters", MaxDriverChangeNote)
	}
	return "", ""
}

// DriverChange is an announced change of the hosts' vGPU manager.
type DriverChange struct {
	ID          string     `json:"id"`
	Driver      string     `json:"driver"`
	At          time.Time  `json:"at"`
	Note        string     `json:"note,omitempty"`
	By          string     `json:"by"`
	AnnouncedAt time.Time  `json:"announced_at"`
	WithdrawnAt *time.Time `json:"withdrawn_at,omitempty"`
	WithdrawnBy string     `json:"withdrawn_by,omitempty"`
}

// DriverChangeList is GET /v1/admin/driver-changes: every announcement,
// the next first.
type DriverChangeList struct {
	DriverChanges []DriverChange `json:"driver_changes"`
}

// DriverChangeEventPayload is the payload of driver.announced and
// driver.withdrawn: the announcement, and By who announced or withdrew it.
type DriverChangeEventPayload struct {
	ID     string    `json:"id"`
	Driver string    `json:"driver"`
	At     time.Time `json:"at"`
	Note   string    `json:"note,omitempty"`
	By     string    `json:"by"`
}

// VMDriverChange is an announced driver change as a VM's owner reads it
// (VM.DriverChanges): when, to which driver, the admin's note, and the
// snapshot it offers first (SnapshotLabel, for POST
// /v1/vms/{id}/snapshots; empty when the VM's disk cannot be snapshotted:
// it boots a kernel directly).
type VMDriverChange struct {
	ID            string    `json:"id"`
	Driver        string    `json:"driver"`
	At            time.Time `json:"at"`
	Note          string    `json:"note,omitempty"`
	SnapshotLabel string    `json:"snapshot_label,omitempty"`
}
