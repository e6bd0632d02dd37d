package api

import "time"

// Alert states.
const (
	AlertFiring   = "firing"
	AlertResolved = "resolved"
)

// Alert is one alert of a rule (policy alert blocks) about a subject: a
// GPU ("gpu01/0000:41:00.0"), a VM ("vm/<id>"), the queue ("queue") or a
// backend ("backend/mig"). GET /v1/alerts lists them (admins).
type Alert struct {
	ID      int64  `json:"id"`
	Rule    string `json:"rule"`
	Subject string `json:"subject"`
	// Host is the gpuvmd that raised it; "" for the fleet's queue.
	Host   string `json:"host,omitempty"`
	Metric string `json:"metric"`
	// Value is the metric's value when the alert last changed: the one
	// that keeps it firing, or the one that resolved it.
	Value   float64 `json:"value"`
	Summary string  `json:"summary,omitempty"`
	// State is firing or resolved.
	State      string     `json:"state"`
	StartedAt  time.Time  `json:"started_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// NotifiedAt is when the rule's webhook last took a notification of
	// it.
	NotifiedAt *time.Time `json:"notified_at,omitempty"`
}

// AlertList is the answer to GET /v1/alerts: newest first, by pages.
type AlertList struct {
	Items []Alert `json:"items"`
	// Next is the cursor of the next page (pass it as after); "" on the
	// last page.
	Next string `json:"next,omitempty"`
}

// AlertNotification is the JSON body gpuvmd POSTs to a rule's webhook when
// an alert fires and when it resolves.
type AlertNotification struct {
	// Rule is the alert block's name, Metric what it watches, and Above,
	// Below and DurationSeconds its condition.
	Rule            string   `json:"rule"`
	Metric          string   `json:"metric"`
	Above           *float64 `json:"above,omitempty"`
	Below           *float64 `json:"below,omitempty"`
	DurationSeconds int64    `json:"duration_seconds"`
	// Subject is what the alert is about (see Alert), Host the gpuvmd
	// that sends it.
	Subject string `json:"subject"`
	Host    string `json:"host,omitempty"`
	// State is firing or resolved; Value the metric's value then.
	State   string  `json:"state"`
	Value   float64 `json:"value"`
	Summary string  `json:"summary"`
	// AlertID names the alert in GET /v1/alerts.
	AlertID    int64      `json:"alert_id"`
	StartedAt  time.Time  `json:"started_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// SentAt is when this notification was first sent (retries keep it).
	SentAt time.Time `json:"sent_at"`
}
