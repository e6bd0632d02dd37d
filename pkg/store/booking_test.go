package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Two bookings for the last capacity at once: the booking lock and the
// re-check in the transaction let exactly one through, on both drivers.
// Each check counts the reservations there are; the capacity is one.
func TestBookReservationConcurrent(t *testing.T) {
	ctx := context.Background()
	errFull := errors.New("full")
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		start := d.clock.Now().Add(time.Hour)
		// A second connection pool, as a second gpuvmd would have
		// (PostgreSQL); SQLite shares the file.
		other := d.open(t)
		const rounds = 10
		for round := range rounds {
			owners := []string{fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			checks := make(chan struct{}, 2)
			for i, st := range []*Store{s, other} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := &Reservation{OwnerKind: OwnerUser, Owner: owners[i], GPUKind: gpu.KindPassthrough, Count: 1,
						StartAt: start.Add(time.Duration(round) * 24 * time.Hour), EndAt: start.Add(time.Duration(round)*24*time.Hour + time.Hour)}
					errs[i] = st.BookReservation(ctx, r, func(tx *Store) error {
						checks <- struct{}{}
						var n int64
						if err := tx.db.Table("reservations").Where("start_at = ?", r.StartAt).Count(&n).Error; err != nil {
							return err
						}
						time.Sleep(20 * time.Millisecond) // let the other reach its check
						if n >= 1 {
							return errFull
						}
						return nil
					})
				}()
			}
			wg.Wait()
			if len(checks) != 2 {
				t.Fatalf("round %d: %d checks ran", round, len(checks))
			}
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, errFull):
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if won != 1 {
				t.Fatalf("round %d: %d bookings won, want 1 (%v)", round, won, errs)
			}
		}
		if n := count(t, s, "reservations"); n != rounds {
			t.Errorf("%d reservations, want %d", n, rounds)
		}
	})
}

// A refused check writes nothing; a stamp changes with every reservation
// made or cancelled and every allocation claimed.
func TestBookingStamp(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		now := d.clock.Now()
		s0, err := s.BookingStamp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := &Reservation{OwnerKind: OwnerUser, Owner: "ann", Profile: "p", Count: 1, StartAt: now.Add(time.Hour), EndAt: now.Add(2 * time.Hour)}
		refused := errors.New("no")
		if err := s.BookReservation(ctx, r, func(*Store) error { return refused }); !errors.Is(err, refused) || r.ID != 0 {
			t.Fatalf("refused: %v, id %d", err, r.ID)
		}
		if s1, _ := s.BookingStamp(ctx); s1 != s0 || count(t, s, "reservations") != 0 {
			t.Fatalf("a refused booking changed something: %v → %v", s0, s1)
		}
		if err := s.BookReservation(ctx, r, func(*Store) error { return nil }); err != nil || r.ID == 0 || r.Version != 1 {
			t.Fatalf("book: %v %+v", err, r)
		}
		s2, _ := s.BookingStamp(ctx)
		if s2.Reservations == s0.Reservations || s2.Allocations != s0.Allocations {
			t.Errorf("after a booking: %v → %v", s0, s2)
		}
		r.Note = "changed"
		if err := s.UpdateReservation(ctx, r); err != nil {
			t.Fatal(err)
		}
		s3, _ := s.BookingStamp(ctx)
		if s3.Reservations == s2.Reservations {
			t.Errorf("an update left the stamp: %v", s3)
		}
		mustUser(t, s, "ann")
		vm := mustVM(t, s, "ann", "v")
		if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{{Host: "h", GPUAddress: "0000:41:00.0", Backend: string(gpu.KindPassthrough), Kind: gpu.KindPassthrough}}); err != nil {
			t.Fatal(err)
		}
		s4, _ := s.BookingStamp(ctx)
		if s4.Allocations == s3.Allocations || s4.Reservations != s3.Reservations {
			t.Errorf("after a claim: %v → %v", s3, s4)
		}
		if err := s.DeleteReservation(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		if s5, _ := s.BookingStamp(ctx); s5.Reservations == s4.Reservations {
			t.Errorf("a cancel left the stamp: %v", s5)
		}
		if err := s.LockBookings(ctx); err == nil {
			t.Error("LockBookings outside a transaction")
		}
		// Bad reservations are refused before any check.
		bad := &Reservation{OwnerKind: "team", Owner: "x", Profile: "p", Count: 1, StartAt: now, EndAt: now.Add(time.Hour)}
		called := false
		if err := s.BookReservation(ctx, bad, func(*Store) error { called = true; return nil }); !errors.Is(err, ErrInvalid) || called {
			t.Errorf("bad owner kind: %v, check called %v", err, called)
		}
	})
}

// VisibleTo keeps a user's own reservations, their groups' and those they
// made.
func TestReservationsVisibleTo(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		now := d.clock.Now()
		mk := func(kind, owner, by string) {
			r := &Reservation{OwnerKind: kind, Owner: owner, Profile: "p", Count: 1, StartAt: now.Add(time.Hour), EndAt: now.Add(2 * time.Hour), CreatedBy: by}
			if err := s.CreateReservation(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		mk(OwnerUser, "ann", "ann")
		mk(OwnerUser, "bob", "bob")
		mk(OwnerGroup, "lab", "admin")
		mk(OwnerGroup, "other", "admin")
		mk(OwnerUser, "cara", "ann") // booked by ann (an admin once) for cara
		rs, err := s.ListReservations(ctx, ReservationFilter{VisibleTo: "ann", VisibleGroups: []string{"lab"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			got = append(got, r.OwnerKind+":"+r.Owner)
		}
		if fmt.Sprint(got) != "[user:ann group:lab user:cara]" {
			t.Errorf("ann sees %v", got)
		}
		if rs, _ := s.ListReservations(ctx, ReservationFilter{VisibleTo: "dan"}); len(rs) != 0 {
			t.Errorf("dan sees %d", len(rs))
		}
	})
}
