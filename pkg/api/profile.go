package api

// Profile is what GET /v1/profiles and GET /v1/profiles/{name} say of a
// profile beside its resolved fields (pkg/config's Profile as JSON, in the
// same object): whether this server can serve it at all.
type Profile struct {
	// Unservable, when set, says in words why no GPU of the hosts that
	// have reported their inventory (and are not down) can ever give the
	// profile ("no GPU here can ever give H100-4C (boards: L40S; …)"): the
	// scheduler's own test, on their GPUs empty. A VM of it is refused at
	// once (POST /v1/vms: 422). Absent when a GPU can give it, when it
	// needs no GPU, and when no host has reported yet (nothing is known).
	Unservable string `json:"unservable,omitempty"`
}
