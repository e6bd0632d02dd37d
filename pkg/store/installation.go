package store

import (
	"context"
	"fmt"
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
