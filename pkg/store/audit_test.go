package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// auditFixture appends, a minute apart from 09:00, entries of ann and bob
// on two VMs and a token, and returns them as stored (oldest first).
func auditFixture(t *testing.T, s *Store) []AuditEntry {
	t.Helper()
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	rows := []AuditEntry{
		{User: "ann", TokenID: 1, Source: "192.0.2.7", Action: "vm.create", Target: "vm/ann/box", VMID: "v1", Outcome: AuditOK, Status: 202, RequestID: "r1"},
		{User: "ann", TokenID: 1, Action: "vm.stop", Target: "vm/ann/box", VMID: "v1", Outcome: AuditOK, Status: 202},
		{User: "bob", TokenID: 2, Action: "vm.delete", Target: "vm/ann/box", Outcome: AuditRefused, Status: 404, Detail: `no VM "box"`},
		{User: "ann", TokenID: 1, Action: "token.create", Target: "user/ann/token/3", Outcome: AuditOK, Status: 201},
		{User: "bob", TokenID: 2, Action: "vm.create", Target: "vm/bob/big", VMID: "v2", Outcome: AuditFailed, Status: 500},
		{User: "ann", Action: "console.open", Target: "vm/ann/box", VMID: "v1", Outcome: AuditOK, Status: 101},
		{Action: "vmx.odd", Outcome: AuditRefused, Status: 401}, // "vm." must not match it
	}
	for i := range rows {
		rows[i].CreatedAt = base.Add(time.Duration(i) * time.Minute)
		if err := s.AppendAudit(context.Background(), &rows[i]); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if rows[i].ID == 0 {
			t.Fatalf("append %d: no ID", i)
		}
	}
	return rows
}

// sameAudit: the same entry, its time in any location.
func sameAudit(a, b AuditEntry) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.CreatedAt = b.CreatedAt
	return a == b
}

func TestAppendAudit(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		e := &AuditEntry{ID: 99, User: "ann", Action: "vm.create", Outcome: AuditOK, Status: 202}
		before := s.Now()
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
		if e.ID == 99 || e.ID == 0 || !e.CreatedAt.After(before) || !e.CreatedAt.Before(s.Now()) {
			t.Errorf("stored as %+v: want a new ID and the store's clock", e)
		}
		for _, bad := range []AuditEntry{{Outcome: AuditOK}, {Action: "vm.create"}, {Action: "vm.create", Outcome: "maybe"}} {
			if err := s.AppendAudit(ctx, &bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("append %+v: %v, want ErrInvalid", bad, err)
			}
		}
		got, _, err := s.ListAudit(ctx, AuditFilter{})
		if err != nil || len(got) != 1 || !sameAudit(got[0], *e) {
			t.Fatalf("read back %+v, %v; want %+v", got, err, *e)
		}
		// Append only: the table refuses updates, whoever asks.
		err = s.db.Exec("UPDATE audit_log SET outcome = ? WHERE id = ?", AuditRefused, e.ID).Error
		if err == nil {
			t.Fatal("an audit entry was updated")
		}
		if got, _, _ := s.ListAudit(ctx, AuditFilter{}); got[0].Outcome != AuditOK {
			t.Errorf("after a refused update: %+v", got[0])
		}
	})
}

func TestListAudit(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		rows := auditFixture(t, s)
		at := func(i int) time.Time { return rows[i].CreatedAt }
		tests := []struct {
			name string
			f    AuditFilter
			want []int // indexes into rows, newest first
		}{
			{"all", AuditFilter{}, []int{6, 5, 4, 3, 2, 1, 0}},
			{"user", AuditFilter{User: "ann"}, []int{5, 3, 1, 0}},
			{"vm", AuditFilter{VMID: "v1"}, []int{5, 1, 0}},
			{"exact action", AuditFilter{Action: "vm.create"}, []int{4, 0}},
			{"action prefix", AuditFilter{Action: "vm."}, []int{4, 2, 1, 0}},
			{"prefix is no wildcard", AuditFilter{Action: "v%."}, nil},
			{"action of no entry", AuditFilter{Action: "vm"}, nil},
			{"from", AuditFilter{From: at(4)}, []int{6, 5, 4}},
			{"to excludes", AuditFilter{To: at(2)}, []int{1, 0}},
			{"range and user", AuditFilter{User: "bob", From: at(1), To: at(5)}, []int{4, 2}},
			{"after", AuditFilter{After: rows[3].ID}, []int{2, 1, 0}},
			{"after and filter", AuditFilter{After: rows[3].ID, User: "ann"}, []int{1, 0}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, next, err := s.ListAudit(ctx, tc.f)
				if err != nil {
					t.Fatal(err)
				}
				var ids, want []int64
				for _, e := range got {
					ids = append(ids, e.ID)
				}
				for _, i := range tc.want {
					want = append(want, rows[i].ID)
				}
				if !slices.Equal(ids, want) || next != 0 {
					t.Errorf("ids %v next %d, want %v and no next page", ids, next, want)
				}
			})
		}
		if _, _, err := s.ListAudit(ctx, AuditFilter{After: -1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("negative cursor: %v", err)
		}
	})
}

// Pages of every size cover the filtered entries exactly once, newest
// first, and entries appended meanwhile do not shift them.
func TestListAuditPages(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		auditFixture(t, s)
		for _, f := range []AuditFilter{{}, {User: "ann"}, {Action: "vm."}} {
			for size := 1; size <= 8; size++ {
				t.Run(fmt.Sprintf("%+v/%d", f, size), func(t *testing.T) {
					all, _, err := s.ListAudit(ctx, f)
					if err != nil || len(all) < 3 {
						t.Fatalf("%d entries, %v", len(all), err)
					}
					var seen []AuditEntry
					p := f
					p.Limit = size
					for pages := 0; ; pages++ {
						if pages > len(all) {
							t.Fatal("paging does not end")
						}
						page, next, err := s.ListAudit(ctx, p)
						if err != nil {
							t.Fatal(err)
						}
						if len(page) > size {
							t.Fatalf("page of %d, limit %d", len(page), size)
						}
						seen = append(seen, page...)
						if pages == 0 {
							// A newer entry does not change the following pages.
							if err := s.AppendAudit(ctx, &AuditEntry{User: "ann", Action: "vm.start", Outcome: AuditOK}); err != nil {
								t.Fatal(err)
							}
						}
						if next == 0 {
							break
						}
						p.After = next
					}
					if !slices.Equal(seen, all) {
						t.Errorf("pages of %d: %d entries, want %d", size, len(seen), len(all))
					}
				})
			}
		}
	})
}

func TestListAuditLimits(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		for i := range MaxAuditPage + 1 {
			if err := s.AppendAudit(ctx, &AuditEntry{Action: "vm.stop", Outcome: AuditOK, Status: 202, Target: fmt.Sprint("vm/", i)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ limit, want int }{{0, DefaultAuditPage}, {-3, DefaultAuditPage}, {5, 5}, {MaxAuditPage + 50, MaxAuditPage}} {
			got, next, err := s.ListAudit(ctx, AuditFilter{Limit: tc.limit})
			if err != nil || len(got) != tc.want || next != got[len(got)-1].ID {
				t.Errorf("limit %d: %d entries, next %d, %v; want %d and a next page", tc.limit, len(got), next, err, tc.want)
			}
		}
	})
}

func TestPruneAudit(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		rows := auditFixture(t, s)
		n, err := s.PruneAudit(ctx, rows[3].CreatedAt)
		if err != nil || n != 3 {
			t.Fatalf("PruneAudit = %d, %v; want 3", n, err)
		}
		left, _, err := s.ListAudit(ctx, AuditFilter{})
		if err != nil || len(left) != 4 || left[len(left)-1].ID != rows[3].ID {
			t.Fatalf("left %+v, %v", left, err)
		}
		if n, err := s.PruneAudit(ctx, rows[3].CreatedAt); err != nil || n != 0 {
			t.Errorf("again: %d, %v", n, err)
		}
	})
}
