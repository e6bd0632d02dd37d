package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"gorm.io/gorm"
)

// InsertUsageRecord records that a VM holds (EndedAt nil) or held a GPU
// device. GPUSeconds is computed by the store for an ended record.
func (s *Store) InsertUsageRecord(ctx context.Context, r *UsageRecord) error {
	switch {
	case r.VMID == "" || r.User == "" || r.GPUAddress == "" || r.Kind == "":
		return fmt.Errorf("insert usage record: %w: vm, user, GPU and kind are required", ErrInvalid)
	case r.Share <= 0 || r.Share > 1:
		return fmt.Errorf("insert usage record: %w: share %g is not in (0, 1]", ErrInvalid, r.Share)
	}
	r.ID = 0
	r.StartedAt = r.StartedAt.UTC().Truncate(time.Microsecond)
	if r.StartedAt.IsZero() {
		r.StartedAt = s.clock()
	}
	r.EndedAt = utcPtr(r.EndedAt)
	r.GPUSeconds = 0
	if r.EndedAt != nil {
		if r.EndedAt.Before(r.StartedAt) {
			return fmt.Errorf("insert usage record: %w: ends before it starts", ErrInvalid)
		}
		r.GPUSeconds = gpuSeconds(r.Share, r.StartedAt, *r.EndedAt)
	}
	err := s.db.WithContext(ctx).Create(r).Error
	return wrap(err, nil, "insert usage record of vm %s", r.VMID)
}

// EndUsageRecords ends every open usage record of a VM at t and computes
// their GPU-seconds. It says how many it ended; ending twice is a no-op.
func (s *Store) EndUsageRecords(ctx context.Context, vmID string, t time.Time) (int, error) {
	t = t.UTC().Truncate(time.Microsecond)
	n := 0
	err := s.Tx(ctx, func(tx *Store) error {
		var open []UsageRecord
		if err := tx.db.Where("vm_id = ? AND ended_at IS NULL", vmID).Find(&open).Error; err != nil {
			return err
		}
		for _, r := range open {
			end := t
			if end.Before(r.StartedAt) {
				end = r.StartedAt
			}
			err := tx.db.Model(&UsageRecord{}).Where("id = ? AND ended_at IS NULL", r.ID).Updates(map[string]any{
				"ended_at":    end,
				"gpu_seconds": gpuSeconds(r.Share, r.StartedAt, end),
			}).Error
			if err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, wrap(err, nil, "end usage records of vm %s", vmID)
	}
	return n, nil
}

func gpuSeconds(share float64, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	return share * to.Sub(from).Seconds()
}

// UserUsage is what a user used in a time range.
type UserUsage struct {
	User       string
	GPUSeconds float64
}

// SumUsageByUser sums GPU-seconds per user over [from, to), counting only the
// part of each record inside the range; records still open count up to now.
// Users are sorted by name. The sum is made in Go from the overlapping
// records, which is portable across both databases' time arithmetic and cheap
// at the scale of one team's usage.
func (s *Store) SumUsageByUser(ctx context.Context, from, to time.Time) ([]UserUsage, error) {
	from, to = from.UTC(), to.UTC()
	if !to.After(from) {
		return nil, fmt.Errorf("sum usage: %w: empty time range", ErrInvalid)
	}
	now := s.clock()
	sums := map[string]float64{}
	var batch []UsageRecord
	err := s.db.WithContext(ctx).
		Where("started_at < ? AND (ended_at IS NULL OR ended_at > ?)", to, from).
		Order("id").
		FindInBatches(&batch, 1000, func(_ *gorm.DB, _ int) error {
			for _, r := range batch {
				end := now
				if r.EndedAt != nil {
					end = *r.EndedAt
				}
				sums[r.User] += gpuSeconds(r.Share, maxTime(r.StartedAt, from), minTime(end, to))
			}
			return nil
		}).Error
	if err != nil {
		return nil, wrap(err, nil, "sum usage from %s to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	out := make([]UserUsage, 0, len(sums))
	for u, v := range sums {
		out = append(out, UserUsage{User: u, GPUSeconds: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
