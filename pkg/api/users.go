package api

import "time"

// CreateUserRequest is the body of POST /v1/users (admins). Unknown fields
// are refused.
type CreateUserRequest struct {
	// Name is the user's name: lower-case letters, digits and dashes,
	// starting with a letter, at most 63 characters.
	Name string `json:"name"`
	// Admin makes the user an admin.
	Admin bool `json:"admin,omitempty"`
	// Groups are the user's groups (created when they do not exist).
	Groups []string `json:"groups,omitempty"`
}

// User is a person who may ask for VMs. GET /v1/whoami answers the caller.
type User struct {
	Name   string   `json:"name"`
	Admin  bool     `json:"admin"`
	Groups []string `json:"groups"`
	// Memberships are Groups with where each comes from: "local" (an
	// admin put the user in it) or the directory ("ldap", "oidc"), which
	// refreshes them at every sign-in.
	Memberships []GroupMembership `json:"memberships"`
	// Source is where the user comes from: "local" (made by an admin),
	// "ldap" or "oidc" (made at the first sign-in).
	Source string `json:"source,omitempty"`
	// DisabledAt is when the directory's sync found the user gone: its
	// tokens are refused, its VMs kept.
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	// CreatedAt is absent in answers about a user the server did not
	// read from its database.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// UserList is the answer to GET /v1/users, by name.
type UserList struct {
	Items []User `json:"items"`
}

// CreateTokenRequest is the body of POST /v1/users/{name}/tokens. At most
// one of ExpiresInHours and ExpiresAt; neither: the token does not expire.
type CreateTokenRequest struct {
	// Name tells the user's tokens apart ("laptop", "ci"): 1 to 64
	// letters, digits, '.', '_', '@' or '-'. A live token of the user may
	// not have the same name.
	Name           string     `json:"name"`
	ExpiresInHours int        `json:"expires_in_hours,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

// Token states.
const (
	TokenActive  = "active"
	TokenExpired = "expired"
	TokenRevoked = "revoked"
)

// Token is an API token as listed: never the token itself nor its hash.
type Token struct {
	ID   int64  `json:"id"`
	User string `json:"user"`
	Name string `json:"name"`
	// Prefix is the token's first characters, to recognise it by.
	Prefix string `json:"prefix"`
	// State is active, expired or revoked.
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// TokenList is the answer to GET /v1/users/{name}/tokens, newest first.
type TokenList struct {
	Items []Token `json:"items"`
}

// CreatedToken is the answer (201) to POST /v1/users/{name}/tokens: the
// only time the token itself is shown.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// GroupMembership is one group of a user and where it comes from.
type GroupMembership struct {
	Group  string `json:"group"`
	Source string `json:"source"`
}

// LoginRequest is the body of POST /v1/login: a directory account's name
// and password.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// LoginResponse is the answer of a sign-in: the secret of a session (it
// starts with gvs_), sent as Authorization: Bearer TOKEN until it expires
// or POST /v1/logout ends it, and who it is for. ExpiresAt slides: each
// use moves it to server.auth.session_ttl from then, up to NotAfter.
type LoginResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	NotAfter  time.Time `json:"not_after"`
	User      User      `json:"user"`
}

// OIDCTokenRequest is the body of POST /v1/auth/oidc/token: the one-time
// code that a loopback sign-in (gpuvm login --sso without the device
// grant) brought to the CLI's redirect URI, and the PKCE verifier whose
// S256 challenge the CLI gave GET /v1/auth/oidc/start.
type OIDCTokenRequest struct {
	Code         string `json:"code"`
	CodeVerifier string `json:"code_verifier"`
}

// DeviceLoginResponse is the answer of POST /v1/auth/oidc/device: open
// VerificationURI (or VerificationURIComplete, which holds the code) on
// any device and type UserCode, then poll POST /v1/auth/oidc/device/poll
// with ID until ExpiresAt.
type DeviceLoginResponse struct {
	ID                      string    `json:"id"`
	UserCode                string    `json:"user_code"`
	VerificationURI         string    `json:"verification_uri"`
	VerificationURIComplete string    `json:"verification_uri_complete,omitempty"`
	ExpiresAt               time.Time `json:"expires_at"`
	// Interval is the seconds to wait between two polls.
	Interval int `json:"interval"`
}

// DevicePollRequest is the body of POST /v1/auth/oidc/device/poll.
type DevicePollRequest struct {
	ID string `json:"id"`
}

// DevicePending is the answer (202) of a poll before the person has
// finished at the provider.
type DevicePending struct {
	Status string `json:"status"` // "pending"
}

// AuthMethods are the ways of signing in that a server offers (GET
// /v1/auth/methods), for a sign-in page to show.
type AuthMethods struct {
	// Password: POST /v1/login with a directory account (LDAP).
	Password bool `json:"password"`
	// OIDC: GET /v1/auth/oidc/start (browsers) and POST
	// /v1/auth/oidc/device (the CLI).
	OIDC bool `json:"oidc"`
	// OIDCName names the provider for a "Sign in with …" button
	// (server.auth.oidc.display_name); "" without OIDC.
	OIDCName string `json:"oidc_name,omitempty"`
	// OIDCDevice: the provider offers the device authorization grant
	// (POST /v1/auth/oidc/device); without it the CLI signs in by a
	// loopback redirect (GET /v1/auth/oidc/start with redirect_uri). False
	// while the provider cannot be discovered.
	OIDCDevice bool `json:"oidc_device"`
	// Token: bearer tokens of users made in gpuvm are accepted (local
	// auth on); break-glass admins' are accepted always.
	Token bool `json:"token"`
	// Simulated: some GPU server of the installation is simulated, no
	// real GPU (host { simulate = "…" }), for the sign-in page's badge.
	// It says only that; which servers, GET /v1/session's
	// simulated_hosts says to those signed in.
	Simulated bool `json:"simulated,omitempty"`
	// Contact is whom to ask about this server (server.contact: a name
	// and email, or a URL); "" when the configuration names nobody.
	Contact string `json:"contact,omitempty"`
}
