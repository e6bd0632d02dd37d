package api

import (
	"net/http"
	"time"
)

// ProblemBase prefixes every problem type URI gpuvmd sends; the types are
// stable: "https://gpuvm.dev/problems/not-found" means the same in every
// version.
const ProblemBase = "https://gpuvm.dev/problems/"

// Problem is an error answer of the API: an RFC 9457 problem detail, sent
// as application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the offending request field of a validation error.
	Field string `json:"field,omitempty"`
	// Diagnostics carries configuration diagnostics (reload).
	Diagnostics string `json:"diagnostics,omitempty"`
	// ConfigDiagnostics are the same diagnostics one by one, each with
	// its file, line and column, for a program (the portal) to show.
	ConfigDiagnostics []ConfigDiagnostic `json:"config_diagnostics,omitempty"`
	// ReadAt is when a one-time desktop password was read
	// (credentials-read), for a client to write in the reader's zone.
	ReadAt *time.Time `json:"read_at,omitempty"`
}

// ConfigDiagnostic is one diagnostic of a configuration: an error or a
// warning, where it is (File:Line:Column, when it is in a file) and what
// it says.
type ConfigDiagnostic struct {
	Severity string `json:"severity"` // error or warning
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
}

// ReloadResult is the answer to POST /v1/admin/reload when the new
// configuration is in force.
type ReloadResult struct {
	// Config summarises it: "/etc/gpuvm: 3 files, 12 profiles".
	Config string `json:"config"`
	// Diagnostics are its warnings, rendered; ConfigDiagnostics the same
	// one by one.
	Diagnostics       string             `json:"diagnostics,omitempty"`
	ConfigDiagnostics []ConfigDiagnostic `json:"config_diagnostics,omitempty"`
}

// Error makes a Problem an error: its title and detail.
func (p *Problem) Error() string {
	msg := p.Title
	if msg == "" {
		msg = http.StatusText(p.Status)
	}
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	return msg
}
