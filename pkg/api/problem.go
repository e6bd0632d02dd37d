package api

import "net/http"

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
