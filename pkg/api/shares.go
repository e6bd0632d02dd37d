package api

// VMShare is one share of a VM (VM.Shares).
type VMShare struct {
	Name string `json:"name"`
	// Mode is rw or ro: how the owner may mount it now; "" when they no
	// longer may (the next start leaves it out).
	Mode string `json:"mode"`
	// Mount is where the guest mounts it.
	Mount string `json:"mount"`
	// Enforcement says how ro is enforced: on the host, through a
	// read-only bind mount the virtiofs daemon serves.
	Enforcement string `json:"enforcement,omitempty"`
}

// Share is an admin-declared share as GET /v1/shares lists it.
type Share struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Mode is rw or ro, the caller's; "" for an admin's view of a share
	// they may not mount themselves.
	Mode string `json:"mode"`
	// Rule is the rule that gives the caller the mode ("read_only:
	// group:students").
	Rule  string `json:"rule,omitempty"`
	Mount string `json:"mount"`
	// Path is the host directory; admins only.
	Path string `json:"path,omitempty"`
	// Available is false when the share's directory is missing on this
	// host, or when it is read-only for the caller and read-only cannot
	// be enforced here (gpuvmd is not root): Unavailable says which. A VM
	// with it does not start.
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
	// Enforcement says how ro is enforced ("host read-only bind mount").
	Enforcement string `json:"enforcement,omitempty"`
	// QuotaBytes is the share's quota (absent: none); UsedBytes,
	// QuotaEnforcement ("project" or "none") and QuotaNote are as the
	// quotas last read them (absent before the first reading).
	QuotaBytes       *uint64 `json:"quota_bytes,omitempty"`
	UsedBytes        *uint64 `json:"used_bytes,omitempty"`
	QuotaEnforcement string  `json:"quota_enforcement,omitempty"`
	QuotaNote        string  `json:"quota_note,omitempty"`
}

// ShareList is the answer of GET /v1/shares.
type ShareList struct {
	Shares []Share `json:"shares"`
}
