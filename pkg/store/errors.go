package store

import (
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// Errors of the store. Every error a method returns wraps one of these (or a
// driver error) with what was being done: test with errors.Is.
var (
	// ErrNotFound: no such row (or, for a foreign key, no such parent).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row changed since it was read (optimistic
	// concurrency), a unique name is taken, or the row is in a state that
	// does not allow the change.
	ErrConflict = errors.New("conflict")
	// ErrSlotTaken: a GPU slot asked for is held by a live allocation, or
	// the GPU is in use in another mode. Nothing of the claim was written.
	ErrSlotTaken = errors.New("gpu slot taken")
	// ErrSchemaTooNew: the database was migrated by a newer gpuvmd.
	ErrSchemaTooNew = errors.New("database schema is too new")
	// ErrInvalid: an argument the store cannot use (a bad cursor, a claim
	// without a GPU, ...).
	ErrInvalid = errors.New("invalid argument")
	// ErrInvalidToken: the token is unknown, expired or revoked. The
	// wrapped text says which, for logs; never show it to the caller.
	ErrInvalidToken = errors.New("invalid token")
)

// More precise conflicts; each also matches ErrConflict.
var (
	// ErrNameTaken: a live VM (or a token of the user) already has the name.
	ErrNameTaken = fmt.Errorf("%w: name taken", ErrConflict)
	// ErrIdempotencyKeyUsed: the user already sent a request with this
	// idempotency key; read it with GetIdempotencyKey and answer as before.
	ErrIdempotencyKeyUsed = fmt.Errorf("%w: idempotency key already used", ErrConflict)
)

// SchemaTooNewError is the error of a database whose schema is newer than this
// binary's; it matches ErrSchemaTooNew.
type SchemaTooNewError struct {
	Database int // version the database is at
	Known    int // newest version this binary knows
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema is at version %d, this gpuvmd knows up to %d: upgrade gpuvmd", e.Database, e.Known)
}

func (e *SchemaTooNewError) Is(target error) bool { return target == ErrSchemaTooNew }

// wrap describes a failed operation, translating gorm's errors to the store's:
// no row → ErrNotFound, a missing parent → ErrNotFound, a duplicate key → dup
// (ErrConflict when nil).
func wrap(err error, dup error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case errors.Is(err, gorm.ErrForeignKeyViolated):
		return fmt.Errorf("%s: %w (a referenced row does not exist)", what, ErrNotFound)
	case errors.Is(err, gorm.ErrDuplicatedKey):
		if dup == nil {
			dup = ErrConflict
		}
		return fmt.Errorf("%s: %w", what, dup)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}
