package store

import (
	"context"
	"fmt"
	"time"
)

func (r *Reservation) check() error {
	switch {
	case r.OwnerKind != OwnerUser && r.OwnerKind != OwnerGroup:
		return fmt.Errorf("%w: reservation owner kind %q (want %q or %q)", ErrInvalid, r.OwnerKind, OwnerUser, OwnerGroup)
	case r.Owner == "":
		return fmt.Errorf("%w: reservation without an owner", ErrInvalid)
	case r.Profile == "" && r.GPUKind == "":
		return fmt.Errorf("%w: reservation needs a profile or a GPU kind", ErrInvalid)
	case r.Count < 1:
		return fmt.Errorf("%w: reservation count %d", ErrInvalid, r.Count)
	case !r.EndAt.After(r.StartAt):
		return fmt.Errorf("%w: reservation ends before it starts", ErrInvalid)
	}
	r.StartAt = r.StartAt.UTC().Truncate(time.Microsecond)
	r.EndAt = r.EndAt.UTC().Truncate(time.Microsecond)
	r.RepeatUntil = utcPtr(r.RepeatUntil)
	return nil
}

// CreateReservation books GPUs ahead. The store sets ID, Version and the
// timestamps; policy decides beforehand whether the booking is allowed.
func (s *Store) CreateReservation(ctx context.Context, r *Reservation) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("create reservation: %w", err)
	}
	now := s.clock()
	r.ID, r.Version, r.CreatedAt, r.UpdatedAt = 0, 1, now, now
	err := s.db.WithContext(ctx).Create(r).Error
	return wrap(err, nil, "create reservation of %s %q", r.OwnerKind, r.Owner)
}

// GetReservation finds a reservation by ID.
func (s *Store) GetReservation(ctx context.Context, id int64) (*Reservation, error) {
	var r Reservation
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return nil, wrap(err, nil, "get reservation %d", id)
	}
	return &r, nil
}

// ReservationFilter selects reservations. A zero From or To leaves that end of
// the window open.
type ReservationFilter struct {
	OwnerKind string
	Owner     string
	// VisibleTo, when set, keeps the reservations this user may see: their
	// own, those of their groups (VisibleGroups) and those they made.
	VisibleTo     string
	VisibleGroups []string
	// From and To select reservations that may have an occurrence in
	// [From, To): the first one overlaps it, or it repeats past From.
	From, To time.Time
}

// ListReservations lists reservations by start, then ID.
func (s *Store) ListReservations(ctx context.Context, f ReservationFilter) ([]Reservation, error) {
	q := s.db.WithContext(ctx)
	if f.OwnerKind != "" {
		q = q.Where("owner_kind = ?", f.OwnerKind)
	}
	if f.Owner != "" {
		q = q.Where("owner = ?", f.Owner)
	}
	if f.VisibleTo != "" {
		groups := append([]string{""}, f.VisibleGroups...) // IN () is not SQL
		q = q.Where("((owner_kind = ? AND owner = ?) OR (owner_kind = ? AND owner IN ?) OR created_by = ?)",
			OwnerUser, f.VisibleTo, OwnerGroup, groups, f.VisibleTo)
	}
	if !f.To.IsZero() {
		q = q.Where("start_at < ?", f.To.UTC())
	}
	if !f.From.IsZero() {
		from := f.From.UTC()
		q = q.Where("(end_at > ? OR (rrule <> '' AND (repeat_until IS NULL OR repeat_until > ?)))", from, from)
	}
	var rs []Reservation
	err := q.Order("start_at, id").Find(&rs).Error
	return rs, wrap(err, nil, "list reservations")
}

// UpdateReservation writes a reservation back if it is still at r.Version
// (optimistic concurrency; else ErrConflict) and bumps r.Version.
func (s *Store) UpdateReservation(ctx context.Context, r *Reservation) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("update reservation %d: %w", r.ID, err)
	}
	err := s.Tx(ctx, func(tx *Store) error {
		now := tx.clock()
		res := tx.db.Model(&Reservation{}).Where("id = ? AND version = ?", r.ID, r.Version).Updates(map[string]any{
			"owner_kind":   r.OwnerKind,
			"owner":        r.Owner,
			"profile":      r.Profile,
			"gpu_kind":     r.GPUKind,
			"gpu_model":    r.GPUModel,
			"gpu_type":     r.GPUType,
			"gpu_count":    r.Count,
			"start_at":     r.StartAt,
			"end_at":       r.EndAt,
			"rrule":        r.RRule,
			"repeat_until": r.RepeatUntil,
			"note":         r.Note,
			"updated_at":   now,
			"version":      r.Version + 1,
		})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var cur Reservation
			if err := tx.db.Select("id", "version").Where("id = ?", r.ID).Take(&cur).Error; err != nil {
				return err
			}
			return fmt.Errorf("%w: reservation is at version %d, not %d", ErrConflict, cur.Version, r.Version)
		}
		r.Version++
		r.UpdatedAt = now
		return nil
	})
	return wrap(err, nil, "update reservation %d", r.ID)
}

// DeleteReservation deletes a reservation.
func (s *Store) DeleteReservation(ctx context.Context, id int64) error {
	res := s.db.WithContext(ctx).Where("id = ?", id).Delete(&Reservation{})
	if res.Error == nil && res.RowsAffected == 0 {
		return fmt.Errorf("delete reservation %d: %w", id, ErrNotFound)
	}
	return wrap(res.Error, nil, "delete reservation %d", id)
}
