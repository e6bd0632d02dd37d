package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Bookings hold GPU capacity ahead (reservations). A booking is decided on
// what the reservations and the live allocations are; two decided at once
// must not both take the last capacity, and a VM must not be placed on
// capacity booked meanwhile. So every transaction that records a booking or
// claims a VM's slots takes the booking lock first (LockBookings) and
// checks that what it decided on has not changed (BookingStamp): the one
// that comes second sees the other's rows and decides again.

// bookingLock is the PostgreSQL advisory lock of bookings ("gpbk" in
// ASCII). SQLite needs none: the store's transactions are IMMEDIATE on its
// one connection, so a transaction already excludes every other writer.
const bookingLock = 0x6770_626b

// LockBookings takes the booking lock until the end of the transaction s is
// bound to (see Tx). Take it before reading what a booking or a claim is
// checked against.
func (s *Store) LockBookings(ctx context.Context) error {
	if !s.inTx {
		return errors.New("lock bookings: not in a transaction")
	}
	if s.driver != DriverPostgres {
		return nil
	}
	return wrap(s.db.WithContext(ctx).Exec("SELECT pg_advisory_xact_lock(?)", bookingLock).Error, nil, "lock bookings")
}

// BookingStamp fingerprints what bookings and placements are decided on:
// equal stamps mean no reservation was made, changed or cancelled, and no
// allocation was claimed, in between.
type BookingStamp struct {
	Reservations string `json:"reservations"`
	Allocations  string `json:"allocations"`
}

// BookingStamp reads the stamp now.
func (s *Store) BookingStamp(ctx context.Context) (BookingStamp, error) {
	var st BookingStamp
	r, err := s.ReservationsStamp(ctx)
	if err != nil {
		return st, err
	}
	var a struct {
		N   int64
		Max int64
	}
	// Allocation rows are never deleted (a released one stays as history),
	// so a claim always raises the largest ID.
	err = s.db.WithContext(ctx).Raw("SELECT COUNT(*) AS n, COALESCE(MAX(id), 0) AS max FROM allocations WHERE state <> ?", AllocReleased).Scan(&a).Error
	if err != nil {
		return st, wrap(err, nil, "stamp allocations")
	}
	st.Reservations = r
	st.Allocations = fmt.Sprintf("%d/%d", a.N, a.Max)
	return st, nil
}

// ReservationsStamp fingerprints the reservations: it changes when one is
// made, changed or cancelled.
func (s *Store) ReservationsStamp(ctx context.Context) (string, error) {
	var r struct {
		N       int64
		MaxID   int64
		Version int64
	}
	err := s.db.WithContext(ctx).Raw("SELECT COUNT(*) AS n, COALESCE(MAX(id), 0) AS max_id, COALESCE(SUM(version), 0) AS version FROM reservations").Scan(&r).Error
	if err != nil {
		return "", wrap(err, nil, "stamp reservations")
	}
	return fmt.Sprintf("%d/%d/%d", r.N, r.MaxID, r.Version), nil
}

// BookReservation records a reservation if check accepts it: in one
// transaction it takes the booking lock, runs check with the store bound to
// the transaction (check reads through tx, never the outer store), and
// inserts r only when check returns nil. Nothing is written otherwise, and
// check's error is returned as it is. The store sets r's ID, Version and
// timestamps.
func (s *Store) BookReservation(ctx context.Context, r *Reservation, check func(tx *Store) error) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("book reservation: %w", err)
	}
	var checkErr error
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.LockBookings(ctx); err != nil {
			return err
		}
		if checkErr = check(tx); checkErr != nil {
			return checkErr
		}
		now := tx.clock()
		r.ID, r.Version, r.CreatedAt, r.UpdatedAt = 0, 1, now, now
		return tx.db.WithContext(ctx).Create(r).Error
	})
	if checkErr != nil {
		r.ID = 0
		return checkErr
	}
	if err != nil {
		r.ID = 0
	}
	return wrap(err, nil, "book reservation of %s %q", r.OwnerKind, r.Owner)
}

// MayOccurAfter reports whether a reservation may still have an occurrence
// that ends after t: its first does, or it repeats and its repetition has
// not ended (ListReservations' From selects the same).
func (r *Reservation) MayOccurAfter(t time.Time) bool {
	if r.EndAt.After(t) {
		return true
	}
	return r.RRule != "" && (r.RepeatUntil == nil || r.RepeatUntil.After(t))
}
