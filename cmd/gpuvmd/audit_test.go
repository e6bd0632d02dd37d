package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// The pruner deletes the entries older than the retention in force, keeps
// everything with retention 0, and stops with its context.
func TestAuditPruner(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	st := storetest.New(t, storetest.WithClock(clocktest.New(now).Now), storetest.Quiet)
	for _, age := range []time.Duration{500 * 24 * time.Hour, 401 * 24 * time.Hour, 399 * 24 * time.Hour, time.Hour} {
		if err := st.AppendAudit(ctx, &store.AuditEntry{CreatedAt: now.Add(-age), Action: "vm.create", Outcome: store.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() int {
		es, _, err := st.ListAudit(ctx, store.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	var keep atomic.Int64
	p := &auditPruner{st: st, every: time.Millisecond, log: slog.New(slog.DiscardHandler),
		retention: func() time.Duration { return time.Duration(keep.Load()) }}
	p.once(ctx)
	if n := left(); n != 4 {
		t.Fatalf("retention 0 (forever): %d entries left, want 4", n)
	}
	keep.Store(int64(400 * 24 * time.Hour))
	p.once(ctx)
	if n := left(); n != 2 {
		t.Fatalf("400 days: %d entries left, want 2", n)
	}
	// A reload shortens it; the loop applies it on its next round.
	keep.Store(int64(24 * time.Hour))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { p.run(rctx); close(done) }()
	for left() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}
