package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Installation is the database's installation: which gpuvm it belongs to.
// Every domain, ledger entry and volume gpuvm makes carries its ID, and the
// reconciler removes only what carries it.
func (s *Store) Installation(ctx context.Context) (Installation, error) {
	var inst Installation
	if err := s.db.WithContext(ctx).Take(&inst).Error; err != nil {
		return inst, fmt.Errorf("read the installation ID: %w", err)
	}
	if inst.ID == "" {
		return inst, fmt.Errorf("read the installation ID: the database has none")
	}
	return inst, nil
}

// JoinInstallation makes an empty database part of installation id: for a
// database made anew for an installation whose own was lost, so that the
// installation's domains on the host show as adoptable orphans rather than
// another installation's. It refuses a database that holds any VM, and an
// id that is not a UUID.
func (s *Store) JoinInstallation(ctx context.Context, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return fmt.Errorf("join installation %q: %w: not a UUID", id, ErrInvalid)
	}
	return s.Tx(ctx, func(tx *Store) error {
		var n int64
		if err := tx.db.WithContext(ctx).Model(&VM{}).Count(&n).Error; err != nil {
			return fmt.Errorf("join installation: count VMs: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("join installation %s: %w: the database holds %d VMs of its own installation", id, ErrConflict, n)
		}
		err := tx.db.WithContext(ctx).Model(&Installation{}).Where("singleton = 1").Update("id", strings.ToLower(id)).Error
		if err != nil {
			return fmt.Errorf("join installation %s: %w", id, err)
		}
		return nil
	})
}
