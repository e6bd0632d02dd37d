package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrCredentialRead: the VM's one-time desktop password was read already.
// It matches ErrConflict; the error's text says when.
var ErrCredentialRead = fmt.Errorf("%w: the desktop password was already read", ErrConflict)

// CredentialReadError is ErrCredentialRead with when it was read.
type CredentialReadError struct{ ReadAt time.Time }

func (e *CredentialReadError) Error() string {
	return fmt.Sprintf("the desktop password was already read, at %s (it is shown once)", e.ReadAt.UTC().Format(time.RFC3339))
}

// Is makes a CredentialReadError match ErrCredentialRead (and ErrConflict).
func (e *CredentialReadError) Is(target error) bool {
	return target == ErrCredentialRead || target == ErrConflict
}

// GetVMCredential is the VM's credential row, with the password emptied: what
// a seed needs (the login and the hash). A VM without one is ErrNotFound.
func (s *Store) GetVMCredential(ctx context.Context, vmID string) (*VMCredential, error) {
	var cr VMCredential
	if err := s.db.WithContext(ctx).Where("vm_id = ?", vmID).Take(&cr).Error; err != nil {
		return nil, wrap(err, nil, "get the credential of vm %s", vmID)
	}
	cr.Password = ""
	cr.ReadAt = utcPtr(cr.ReadAt)
	return &cr, nil
}

// TakeVMCredential returns the VM's credential with its password and, in
// the same transaction, forgets the password and records who read it and
// when: the password is given out once. A second read is a
// *CredentialReadError (ErrCredentialRead); a VM without a credential is
// ErrNotFound. Of two concurrent reads exactly one gets the password.
func (s *Store) TakeVMCredential(ctx context.Context, vmID, by string) (*VMCredential, error) {
	var out *VMCredential
	err := s.Tx(ctx, func(tx *Store) error {
		var cr VMCredential
		if err := tx.db.Where("vm_id = ?", vmID).Take(&cr).Error; err != nil {
			return wrap(err, nil, "get the credential of vm %s", vmID)
		}
		if cr.ReadAt != nil {
			return &CredentialReadError{ReadAt: cr.ReadAt.UTC()}
		}
		now := tx.clock()
		res := tx.db.Model(&VMCredential{}).Where("vm_id = ? AND read_at IS NULL", vmID).
			Updates(map[string]any{"password": "", "read_at": now, "read_by": by})
		if res.Error != nil {
			return wrap(res.Error, nil, "mark the credential of vm %s read", vmID)
		}
		if res.RowsAffected != 1 {
			return &CredentialReadError{ReadAt: now.UTC()}
		}
		cr.ReadAt, cr.ReadBy = &now, by
		out = &cr
		return nil
	})
	if err != nil {
		var read *CredentialReadError
		if errors.As(err, &read) {
			return nil, read
		}
		return nil, err
	}
	return out, nil
}

// forgetCredential empties the password of a VM's credential (a deleted VM):
// the hash stays, read_at stays empty (nobody read it).
func (s *Store) forgetCredential(vmID string) error {
	return s.db.Model(&VMCredential{}).Where("vm_id = ? AND password <> ''", vmID).Update("password", "").Error
}

// CredentialsReadAt is when the one-time password of each of the VMs was
// read, for those whose was: one query for a page of VMs.
func (s *Store) CredentialsReadAt(ctx context.Context, vmIDs []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(vmIDs) == 0 {
		return out, nil
	}
	var rows []VMCredential
	err := s.db.WithContext(ctx).Select("vm_id", "read_at").Where("vm_id IN ? AND read_at IS NOT NULL", vmIDs).Find(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "read when the VMs' desktop passwords were read")
	}
	for _, r := range rows {
		out[r.VMID] = r.ReadAt.UTC()
	}
	return out, nil
}
