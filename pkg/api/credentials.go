package api

import "time"

// CredentialsResponse is the answer to POST /v1/vms/{id}/credentials: the
// VM's one-time desktop password and the guest account it belongs to. Only
// the VM's owner gets it, once; gpuvmd then forgets the password (the guest
// keeps only its hash). A second read is 410 (ProblemBase+"credentials-read").
type CredentialsResponse struct {
	VMID string `json:"vm_id"`
	// User is the guest account cloud-init made for the owner.
	User string `json:"user"`
	// Password logs User in on the desktop (RDP) and the console.
	Password string `json:"password"`
	// ReadAt is now: when the password was given out.
	ReadAt time.Time `json:"read_at"`
}
