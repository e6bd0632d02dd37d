package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// auditPruneInterval is how often gpuvmd deletes the audit entries older
// than server.audit.retention.
const auditPruneInterval = time.Hour

// auditPruner applies the audit log's retention: at start, then every
// interval. On a fleet every node prunes the shared table; a delete of what
// another node deleted already deletes nothing.
type auditPruner struct {
	st *store.Store
	// retention is server.audit.retention in force (a reload changes it);
	// 0 keeps entries forever.
	retention func() time.Duration
	every     time.Duration
	log       *slog.Logger
}

// once deletes the entries past retention.
func (p *auditPruner) once(ctx context.Context) {
	keep := p.retention()
	if keep <= 0 {
		return
	}
	before := p.st.Now().Add(-keep)
	n, err := p.st.PruneAudit(ctx, before)
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.Error("audit retention: could not delete old entries; retried in an hour", "before", before, "err", err)
	case n > 0:
		p.log.Info("audit retention: deleted old entries", "count", n, "before", before, "retention", keep)
	}
}

// run prunes until ctx ends.
func (p *auditPruner) run(ctx context.Context) {
	p.once(ctx)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.once(ctx)
		}
	}
}
