package store

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm/clause"
)

// DrainGPU marks a GPU of a host as drained: it takes no new allocations,
// and what it holds keeps running. Draining a drained GPU updates the
// reason and keeps the original time.
func (s *Store) DrainGPU(ctx context.Context, d *GPUDrain) error {
	if strings.TrimSpace(d.Host) == "" || strings.TrimSpace(d.GPUAddress) == "" {
		return fmt.Errorf("drain gpu: %w: host and gpu address are required", ErrInvalid)
	}
	d.CreatedAt = s.clock()
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "host"}, {Name: "gpu_address"}},
		DoUpdates: clause.AssignmentColumns([]string{"reason", "drained_by"}),
	}).Create(d).Error
	if err == nil {
		s.touchHosts()
	}
	return wrap(err, nil, "drain gpu %s on %s", d.GPUAddress, d.Host)
}

// UndrainGPU lets a drained GPU take allocations again; it reports whether
// the GPU was drained.
func (s *Store) UndrainGPU(ctx context.Context, host, gpuAddress string) (bool, error) {
	res := s.db.WithContext(ctx).Where("host = ? AND gpu_address = ?", host, gpuAddress).Delete(&GPUDrain{})
	if res.Error != nil {
		return false, wrap(res.Error, nil, "undrain gpu %s on %s", gpuAddress, host)
	}
	s.touchHosts()
	return res.RowsAffected > 0, nil
}

// ListGPUDrains lists the drained GPUs of a host (every host when host is
// empty), by host and address.
func (s *Store) ListGPUDrains(ctx context.Context, host string) ([]GPUDrain, error) {
	q := s.db.WithContext(ctx).Order("host, gpu_address")
	if host != "" {
		q = q.Where("host = ?", host)
	}
	var out []GPUDrain
	err := q.Find(&out).Error
	return out, wrap(err, nil, "list drained gpus")
}
