// Package auth holds what the ways of signing in (pkg/auth/ldap, and OIDC
// to come) share: who signed in, and how a refusal reads.
//
// A refusal for bad credentials (an unknown user, a wrong password, an
// ambiguous or malformed name) is a *Refusal, which is ErrInvalidCredentials:
// the API answers all of them the same way, and only its Reason, which
// names the user's case, goes to the audit log. Any other error (the
// directory is unreachable) is about gpuvm, not the user.
package auth

import "errors"

// Identity is who a directory signed in.
type Identity struct {
	// Name is the gpuvm user name: lower case, letters, digits, dashes.
	Name string
	// Source is where the user comes from (store.SourceLDAP, …).
	Source string
	// Admin: the user is in one of the directory's admin groups.
	Admin bool
	// Groups are the user's directory groups, the policy's groups.
	Groups []string
	// UID is the directory's uid for the user (LDAP's uidNumber); 0 for
	// none. It becomes the owner of their home (store.UserUID).
	UID int64
}

// ErrInvalidCredentials is every refusal of a sign-in for the credentials
// given.
var ErrInvalidCredentials = errors.New("invalid credentials")

// Refusal is a refused sign-in and why, for the audit log only.
type Refusal struct {
	Reason string
	// Account is the name of the directory's entry the username matched,
	// when one was found (a wrong password): the sign-in limits count it
	// whatever spelling found it. Never shown to the client.
	Account string
}

func (r *Refusal) Error() string { return "invalid credentials: " + r.Reason }

// Is makes a Refusal ErrInvalidCredentials.
func (r *Refusal) Is(target error) bool { return target == ErrInvalidCredentials }

// Refuse is a Refusal for reason.
func Refuse(reason string) error { return &Refusal{Reason: reason} }

// Change is a user a directory's sync disabled, or enabled again.
type Change struct {
	User     string
	Disabled bool
}
