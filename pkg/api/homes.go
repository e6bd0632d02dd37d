package api

// Home is a person's home on this server (server.storage.homes): the
// directory every VM of theirs whose profile has a home mounts.
type Home struct {
	User string `json:"user"`
	// Exists is false when the home has not been made yet (no VM of the
	// person has needed it) or was deleted.
	Exists bool `json:"exists"`
	// Dir is its directory on the host (admins only).
	Dir string `json:"dir,omitempty"`
	// HomeHost is the node the person's home lives on (where it was first
	// made: the node their VMs that mount it are placed on when it can
	// serve them); absent while none is recorded. In a fleet it may be
	// another node than the one answering, whose directory (Exists, Dir)
	// is then not that home.
	HomeHost string `json:"home_host,omitempty"`
	// UsedBytes, QuotaBytes, Enforcement and Note are as the home quotas
	// last read them (absent before the first reading).
	UsedBytes   *uint64 `json:"used_bytes,omitempty"`
	QuotaBytes  *uint64 `json:"quota_bytes,omitempty"`
	Enforcement string  `json:"enforcement,omitempty"`
	Note        string  `json:"note,omitempty"`
	// Mount is where it appears in a Linux guest.
	Mount string `json:"mount"`
}

// HomeList is the answer to GET /v1/homes: the caller's home, or for an
// admin every home under the homes' root.
type HomeList struct {
	Homes []Home `json:"homes"`
}
