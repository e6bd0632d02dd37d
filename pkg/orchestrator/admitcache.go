package orchestrator

import (
	"context"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// admitCacheTTL bounds how long an admission's view of what the quotas
// count is kept: what other processes write (a fleet's other nodes) does
// not move this one's store.QuotaGeneration.
const admitCacheTTL = 2 * time.Second

// admitCache is what the last admission read of what the quotas count
// (quotaState for no one in particular: the VMs that hold devices or count
// without one, their owners' groups, the ended usage, the rules' engine),
// kept while nothing it was read from has changed (issue #26: reading it
// again for each of thousands of creates was most of a create's time). A
// queue of creates changes none of it; a placement, a release, a state, a
// user's groups or a new configuration does. Evaluations run under mu:
// the engine is built for one caller at a time.
type admitCache struct {
	mu   sync.Mutex
	st   *state
	cfg  *config.Config
	gen  uint64
	read time.Time // wall clock
}

// withQuotaState calls fn with the state the quotas count now, read again
// when the store's generation, the configuration or admitCacheTTL says it
// may have changed. The state is shared: fn must not change it.
func (dp *dispatcher) withQuotaState(ctx context.Context, cfg *config.Config, now time.Time, fn func(st *state)) error {
	c := &dp.admit
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := dp.st.QuotaGeneration() // before the reads: a change during them is read next time
	if c.st == nil || c.cfg != cfg || c.gen != gen || time.Since(c.read) >= admitCacheTTL || now.Before(c.st.now) {
		st, err := dp.quotaState(ctx, cfg, now, []string{})
		if err != nil {
			c.st = nil
			return err
		}
		c.st, c.cfg, c.gen, c.read = st, cfg, gen, time.Now()
	}
	fn(c.st)
	return nil
}
