package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// seedVMs inserts n VMs of 10 owners directly (without their operations and
// events), a second apart in groups of 4, a tenth of them deleted.
func seedVMs(b testing.TB, s *Store, n int) {
	b.Helper()
	for i := range 10 {
		mustUser(b, s, fmt.Sprint("user", i))
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	vms := make([]VM, 0, n)
	for i := range n {
		id, _ := uuid.NewV7()
		state := VMRunning
		switch i % 10 {
		case 0:
			state = VMDeleted
		case 1, 2:
			state = VMQueued
		}
		created := t0.Add(time.Duration(i/4) * time.Second)
		vms = append(vms, VM{ID: id.String(), Name: fmt.Sprint("vm", i), Owner: fmt.Sprint("user", i%10),
			Profile: "render-l40s", State: state, Host: "gpu01", Hours: 8, CreatedAt: created, UpdatedAt: created, Version: 1})
	}
	if err := s.db.CreateInBatches(vms, 500).Error; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkListVMs: one page of 50 out of 10,000 VMs.
func BenchmarkListVMs(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			d := newTestDB(b, driver)
			s := d.open(b)
			seedVMs(b, s, 10_000)
			// A cursor half-way through.
			var mid string
			f := VMFilter{Limit: 50}
			for range 100 {
				p, err := s.ListVMs(ctx, f)
				if err != nil {
					b.Fatal(err)
				}
				f.After, mid = p.Next, p.Next
			}
			cases := []struct {
				name string
				f    VMFilter
			}{
				{"first-page", VMFilter{Limit: 50}},
				{"middle-page", VMFilter{Limit: 50, After: mid}},
				{"owner", VMFilter{Owner: "user3", Limit: 50, After: mid}},
				{"state-queued", VMFilter{States: []string{VMQueued}, Limit: 50, After: mid}},
				// The longest page (the admin's queue, a person's VMs).
				{"page-of-1000", VMFilter{States: []string{VMQueued}, Limit: 1000}},
			}
			for _, c := range cases {
				b.Run(c.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						p, err := s.ListVMs(ctx, c.f)
						if err != nil || len(p.VMs) != min(c.f.Limit, 1000) {
							b.Fatalf("%d VMs, %v", len(p.VMs), err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkClaimAllocation: a new claim (one MIG slice on a fresh slot), a
// claim refused because the slot is taken, and a claim followed by its
// release.
func BenchmarkClaimAllocation(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			d := newTestDB(b, driver)
			s := d.open(b)
			mustUser(b, s, "alice")
			vm := mustVM(b, s, "alice", "bench")
			b.Run("claim", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					c := mig(fmt.Sprintf("0000:%02x:%02x.0", i/(8*256)%256, i/8%256), i%8, 1)
					c.Host = fmt.Sprint("h", i/(8*256*256))
					if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{c}); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("taken", func(b *testing.B) {
				taken := whole("0000:ff:00.0")
				if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{taken}); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{taken}); !errors.Is(err, ErrSlotTaken) {
						b.Fatal(err)
					}
				}
			})
			other := mustVM(b, s, "alice", "cycle")
			b.Run("claim+release", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.ClaimAllocation(ctx, other.ID, []SlotClaim{mig("0000:fe:00.0", 4, 4)}); err != nil {
						b.Fatal(err)
					}
					if _, err := s.ReleaseAllocations(ctx, other.ID); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCreateVM: what a create writes (the VM, its operation, its event,
// an idempotency key) with 0, 3,000 and 10,000 VMs recorded already: it
// should not grow with them (issue #26).
func BenchmarkCreateVM(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		for _, n := range []int{0, 3_000, 10_000} {
			b.Run(fmt.Sprintf("%s/%d", driver, n), func(b *testing.B) {
				d := newTestDB(b, driver)
				s := d.open(b)
				seedVMs(b, s, max(n, 1))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					vm := &VM{Name: fmt.Sprint("new", i), Owner: fmt.Sprint("user", i%10), Profile: "render-l40s", Hours: 8}
					key := &IdempotencyKey{User: vm.Owner, Key: fmt.Sprint("k", i), RequestHash: "h"}
					if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: vm.Owner, IdempotencyKey: key}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCreateVMConcurrent: creates from 8 clients at once, each with its
// audit entry, as the API makes them. What they share is the database's
// writer on SQLite and, on PostgreSQL, whatever orders the events.
func BenchmarkCreateVMConcurrent(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			d := newTestDB(b, driver)
			s := d.open(b)
			seedVMs(b, s, 1_000)
			const clients = 8
			var n atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
						vm := &VM{Name: fmt.Sprint("par", i), Owner: fmt.Sprint("user", i%10), Profile: "render-l40s", Hours: 8}
						audit := &AuditEntry{User: vm.Owner, Action: "vm.create", Outcome: "ok", Status: 201}
						if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: vm.Owner, Audit: audit}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// BenchmarkQueueReads: what every dispatch round and every scrape of
// /metrics read of a queue of 4,000 among 20,000 VMs (seedVMs): SetQueue
// of an unchanged queue (an idle round writes nothing), the queue's length
// and wait, and the VMs by state.
func BenchmarkQueueReads(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			d := newTestDB(b, driver)
			s := d.open(b)
			seedVMs(b, s, 20_000)
			page, err := s.ListVMs(ctx, VMFilter{States: []string{VMQueued}, Limit: 1000})
			if err != nil {
				b.Fatal(err)
			}
			var queued []string
			for f := (VMFilter{States: []string{VMQueued}, Limit: 1000}); ; {
				for _, vm := range page.VMs {
					queued = append(queued, vm.ID)
				}
				if page.Next == "" {
					break
				}
				f.After = page.Next
				if page, err = s.ListVMs(ctx, f); err != nil {
					b.Fatal(err)
				}
			}
			entries := make(map[string]QueueEntry, len(queued))
			for i, id := range queued {
				entries[id] = QueueEntry{Position: i + 1, Phase: "queued", Reason: "waiting for a GPU"}
			}
			if _, err := s.SetQueue(ctx, entries); err != nil {
				b.Fatal(err)
			}
			b.Run("SetQueue-unchanged", func(b *testing.B) {
				for b.Loop() {
					if n, err := s.SetQueue(ctx, entries); err != nil || n != 0 {
						b.Fatal(n, err)
					}
				}
			})
			b.Run("GetQueueStats", func(b *testing.B) {
				for b.Loop() {
					if q, err := s.GetQueueStats(ctx, time.Now()); err != nil || q.Length != len(queued) {
						b.Fatal(q, err)
					}
				}
			})
			b.Run("CountVMsByState", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.CountVMsByState(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkEvents: what ordering the events costs their writers and
// readers: a transaction of one event (a create's), one of 1,000 (a
// dispatch round moving a queue), and a watcher's read of what is new.
func BenchmarkEvents(b *testing.B) {
	ctx := context.Background()
	for _, driver := range drivers {
		b.Run(driver+"/one-event-tx", func(b *testing.B) {
			s := newTestDB(b, driver).open(b)
			for b.Loop() {
				if err := s.AppendEvent(ctx, &Event{Type: "vm.state", VMID: "vm", Owner: "ann"}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(driver+"/1000-event-tx", func(b *testing.B) {
			s := newTestDB(b, driver).open(b)
			for b.Loop() {
				err := s.Tx(ctx, func(tx *Store) error {
					for range 1000 {
						if err := tx.appendEvent(ctx, &Event{Type: "vm.queue", VMID: "vm", Owner: "ann"}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(driver+"/read-new", func(b *testing.B) {
			s := newTestDB(b, driver).open(b)
			var last int64
			for b.Loop() {
				if err := s.AppendEvent(ctx, &Event{Type: "vm.state"}); err != nil {
					b.Fatal(err)
				}
				es, err := s.ListEventsSince(ctx, last, EventFilter{})
				if err != nil || len(es) != 1 {
					b.Fatalf("%d new events, %v; want 1", len(es), err)
				}
				last = es[0].ID
			}
		})
	}
}
