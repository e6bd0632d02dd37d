package api

import "time"

// SessionCookie names the cookie of a web portal session: HttpOnly,
// SameSite=Strict, Secure under TLS. The API takes it in place of a bearer
// token; a state-changing request with it must also carry the session's
// CSRF token in the CSRFHeader header.
const (
	SessionCookie = "gpuvm_session"
	CSRFHeader    = "X-CSRF-Token"
)

// SignInRequest is the body of POST /v1/session: an API token, or a
// directory account's username and password (server.auth.ldap), exchanged
// for a session cookie. Neither is kept by the session.
type SignInRequest struct {
	Token    string `json:"token,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// Session is a web portal session (POST and GET /v1/session).
type Session struct {
	User User `json:"user"`
	// CSRFToken goes in the X-CSRF-Token header of every state-changing
	// request of the session.
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
	// SimulatedHosts names the GPU servers of the installation that are
	// simulated (host { simulate = "…" }: no real GPU is touched), which
	// the portal says on every page (GET /v1/session only).
	SimulatedHosts []string `json:"simulated_hosts,omitempty"`
	// Contact is whom to ask about this server (server.contact), for the
	// portal's "ask your admin"; "" when the configuration names nobody.
	Contact string `json:"contact,omitempty"`
}
