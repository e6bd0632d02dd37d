package api

import "time"

// Audit outcomes, from the answer's status: 2xx (and 101, a console or
// tunnel opened) ok, 4xx refused, 5xx failed.
const (
	AuditOK      = "ok"
	AuditRefused = "refused"
	AuditFailed  = "failed"
)

// AuditEntry is one entry of the audit log: a state-changing request, or a
// console or tunnel ticket issued or connection opened. The log is append
// only; no route changes it.
type AuditEntry struct {
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// User is who acted ("" when the request carried no valid
	// credential); TokenID the API token it used (never the token
	// itself), absent for a console or tunnel ticket.
	User    string `json:"user,omitempty"`
	TokenID int64  `json:"token_id,omitempty"`
	// Source is the address the request came from, and what a proxy in
	// front said the client was: "192.0.2.7", "10.0.0.2 (forwarded for
	// 192.0.2.7)".
	Source string `json:"source,omitempty"`
	// Action is what was asked: "vm.create", "vm.stop", "token.create",
	// "console.open", … (README, Audit log).
	Action string `json:"action"`
	// Target is what it was asked of: "vm/OWNER/NAME", "user/NAME",
	// "user/NAME/token/ID", "gpu/ADDRESS", "host/NAME", "reservation/ID",
	// "orphan/ID", "config".
	Target string `json:"target,omitempty"`
	// VMID is the VM acted on, when there is one.
	VMID string `json:"vm_id,omitempty"`
	// Outcome is ok, refused or failed; Status the HTTP status answered
	// (101 for a console or tunnel that opened; 0 for what was no request:
	// a reload on SIGHUP, whose Source is "SIGHUP").
	Outcome string `json:"outcome"`
	Status  int    `json:"status"`
	// Detail says a little more: the problem's detail when refused or
	// failed, a few words on what was done otherwise.
	Detail string `json:"detail,omitempty"`
	// RequestID is the request's X-Request-ID.
	RequestID string `json:"request_id,omitempty"`
}

// AuditList is the answer to GET /v1/admin/audit and GET /v1/audit: newest
// first, by pages.
type AuditList struct {
	Items []AuditEntry `json:"items"`
	// Next is the cursor of the next page (pass it as after); "" on the
	// last page.
	Next string `json:"next,omitempty"`
}
