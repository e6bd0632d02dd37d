package api

import "time"

// ReservationGPU is a GPU need booked without a profile: Count devices of
// it, one per VM.
type ReservationGPU struct {
	// Kind is mig, vgpu or passthrough.
	Kind string `json:"kind"`
	// Model restricts the boards: a full name or a family ("H100", "L40S").
	Model string `json:"model,omitempty"`
	// Type is the MIG profile ("3g.40gb") or the vGPU type ("L40S-12Q");
	// none for passthrough.
	Type string `json:"type,omitempty"`
}

// Recurrence repeats a reservation: weekly on some weekdays, or daily, at
// the first occurrence's wall-clock times in the server's policy time
// zone (a 14:00 lab stays at 14:00 across daylight-saving changes), until
// a date.
type Recurrence struct {
	// Freq is weekly (the default) or daily.
	Freq string `json:"freq,omitempty"`
	// Days are a weekly reservation's weekdays: mon, tue, wed, thu, fri,
	// sat, sun (empty: the first occurrence's). The first occurrence is on
	// one of them.
	Days []string `json:"days,omitempty"`
	// Until: no occurrence starts at or after it (at most a year after the
	// start).
	Until time.Time `json:"until"`
	// RRule may replace Freq and Days: RFC 5545 text of the form
	// "FREQ=WEEKLY;BYDAY=TU,TH" or "FREQ=DAILY", with an optional
	// ";UNTIL=20260630T000000Z" when Until is not given. Answers carry
	// both.
	RRule string `json:"rrule,omitempty"`
}

// CreateReservationRequest is the body of POST /v1/reservations: book GPU
// capacity ahead, for Count VMs of a profile or Count devices of a GPU
// need (one of Profile and GPU), from Start to End, once or repeated.
// Unknown fields are refused.
type CreateReservationRequest struct {
	Profile string          `json:"profile,omitempty"`
	GPU     *ReservationGPU `json:"gpu,omitempty"`
	// Count is how many VMs (of the profile) or devices (of the GPU need)
	// are booked: 1 (the default) to 1000, and at most the policy's
	// reservations.max_vms.
	Count int       `json:"count,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Recurrence, when set, repeats the booking.
	Recurrence *Recurrence `json:"recurrence,omitempty"`
	// Owner is whom the capacity is for: a user ("ann") or a group
	// ("group:students"). Default: the caller; anyone else: admins only.
	Owner string `json:"owner,omitempty"`
	// Note says what it is for (at most 500 characters).
	Note string `json:"note,omitempty"`
}

// Occurrence is one stretch of time a reservation holds its capacity.
type Occurrence struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Reservation is GPU capacity booked ahead.
type Reservation struct {
	ID int64 `json:"id"`
	// Owner is whom the capacity is for: "ann", or "group:students".
	Owner   string          `json:"owner"`
	Profile string          `json:"profile,omitempty"`
	GPU     *ReservationGPU `json:"gpu,omitempty"`
	Count   int             `json:"count"`
	// Start and End are the first occurrence.
	Start      time.Time   `json:"start"`
	End        time.Time   `json:"end"`
	Recurrence *Recurrence `json:"recurrence,omitempty"`
	Note       string      `json:"note,omitempty"`
	// CreatedBy is who booked it (an admin may book for others).
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	// Timezone is the IANA name of the zone whose wall-clock times a
	// recurrence keeps.
	Timezone string `json:"timezone"`
	// Next are the occurrences not over yet, at most 5, earliest first
	// (none: the reservation is over).
	Next []Occurrence `json:"next"`
}

// ReservationList is the answer to GET /v1/reservations, by start.
type ReservationList struct {
	Items []Reservation `json:"items"`
}

// WarningReservation is the kind of vm.warning given to a VM whose lease
// runs into GPU capacity reserved for someone else: ahead, and when the
// reservation starts and the VM is deleted to free it.
const WarningReservation = "reservation"

// ReservationCapacity is the answer to GET /v1/reservations/capacity: how
// many VMs of a profile a booking of each slot of [From, To) could get (the
// GPUs less the reservations made and the VMs whose leases run into the
// slot), and the caller's booking rules.
type ReservationCapacity struct {
	Profile     string    `json:"profile"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	StepSeconds int64     `json:"step_seconds"`
	// Timezone is the IANA name of the policy's time zone.
	Timezone string `json:"timezone"`
	// Most is the most a slot counts: a slot whose Free is Most may give
	// more.
	Most int `json:"most"`
	// Unavailable, when set, says why no GPU here can ever give the
	// profile (every slot's Free is 0).
	Unavailable string            `json:"unavailable,omitempty"`
	Rules       ReservationRules  `json:"rules"`
	Slots       []ReservationSlot `json:"slots"`
}

// ReservationSlot is one slot of a ReservationCapacity.
type ReservationSlot struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Free is how many VMs of the profile a booking of this slot alone
	// could get; 0 for a slot over (Past).
	Free int  `json:"free"`
	Past bool `json:"past,omitempty"`
}

// ReservationRules are the policy's booking rules as they bind the caller
// (an admin books held to the capacity only: no limit).
type ReservationRules struct {
	// MayBook says whether the caller may book the profile; WhyNot says
	// why not.
	MayBook bool   `json:"may_book"`
	WhyNot  string `json:"why_not,omitempty"`
	// NotOffered says that the policy has no reservations block: booking
	// ahead is not offered to anyone but admins (who book for others).
	NotOffered bool `json:"not_offered,omitempty"`
	// MaxAheadSeconds, MaxLengthSeconds, MaxVMs and MaxActive are the
	// limits (0: none): how far ahead a booking may start, how long it
	// lasts, how many VMs it is for, how many an owner holds at once.
	MaxAheadSeconds  int64 `json:"max_ahead_seconds"`
	MaxLengthSeconds int64 `json:"max_length_seconds"`
	MaxVMs           int   `json:"max_vms"`
	MaxActive        int   `json:"max_active"`
}
