package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/fleet"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// node is this gpuvmd as a node: its name and heartbeat, and, on
// PostgreSQL, its membership of the fleet (nil on SQLite: one server,
// always the leader).
type node struct {
	name              string
	interval, timeout time.Duration
	fleet             *fleet.Node
	log               *slog.Logger
	// events nudges the API's event streams (set once the API exists).
	events atomic.Pointer[func()]
}

// openNode reads the node block (default: the hostname, a heartbeat every
// 15s, down after 45s) and, on PostgreSQL, joins the fleet: a node whose
// name a live node at another address uses, or whose clock is off the
// database's, is refused here, before it does anything.
func openNode(ctx context.Context, o options, cfg *liveConfig, st *store.Store, apiURL string, log *slog.Logger) (*node, error) {
	n := &node{interval: config.DefaultHeartbeatInterval, log: log}
	if cfg != nil {
		s := cfg.Load().Server.Node
		n.name, n.interval, n.timeout = s.Name, s.HeartbeatInterval, s.HeartbeatTimeout
	}
	if n.name == "" {
		n.name, _ = os.Hostname()
		if n.name == "" {
			n.name = "localhost"
		}
	}
	if n.interval <= 0 {
		n.interval = config.DefaultHeartbeatInterval
	}
	if n.timeout <= 0 {
		n.timeout = config.HeartbeatTimeoutIntervals * n.interval
	}
	if st.Driver() != store.DriverPostgres {
		return n, nil
	}
	fl, err := fleet.Open(ctx, fleet.Config{DSN: postgresDSN(o), Store: st, Node: n.name, APIURL: apiURL,
		HeartbeatInterval: n.interval, HeartbeatTimeout: n.timeout, Log: log})
	if err != nil {
		return nil, err
	}
	n.fleet = fl
	log.Info("node of a fleet: the nodes sharing this database place on each other's GPUs", "node", n.name,
		"heartbeat", n.interval, "down_after", n.timeout, "channel", fl.Channel())
	return n, nil
}

// postgresDSN is the PostgreSQL DSN openStore connects to.
func postgresDSN(o options) string {
	if strings.HasPrefix(o.database, "postgres://") || strings.HasPrefix(o.database, "postgresql://") {
		return o.database
	}
	return o.db.dsn
}

// orchestratorFleet is the orchestrator's Fleet: nil on a single server.
func (n *node) orchestratorFleet() orchestrator.Fleet {
	if n.fleet == nil {
		return nil
	}
	return n.fleet
}

// leader says whether this gpuvmd does the fleet's once-only work: nil
// (always) on a single server.
func (n *node) leader() orchestrator.Leader {
	if n.fleet == nil {
		return nil
	}
	return n.fleet
}

// serverFleet is the API's Fleet: nil on a single server.
func (n *node) serverFleet() server.Fleet {
	if n.fleet == nil {
		return nil
	}
	return n.fleet
}

// start campaigns once, so that the orchestrator's first round knows
// whether it leads; run runs the fleet's loops.
func (n *node) start(ctx context.Context, orch *orchestrator.Orchestrator) {
	if n.fleet == nil {
		return
	}
	n.fleet.Start(ctx, fleet.Hooks{
		Wake: orch.Wake,
		Events: func() {
			if f := n.events.Load(); f != nil {
				(*f)()
			}
		},
		HostsDown: func(ctx context.Context, hosts []string) {
			if _, err := orch.RequeueFromDownHosts(ctx, hosts); err != nil && ctx.Err() == nil {
				n.log.Warn("requeueing the unstarted VMs of down nodes failed; trying again", "hosts", hosts, "err", err)
			}
		},
	})
}

// relayEvents carries events across the fleet: each transaction of this
// node that commits events tells the others (merged, by NOTIFY), and what
// the others tell nudges srv's event streams. Their poll of the events
// table is then only the fallback (fleetEventPoll). Nothing on a single
// server.
func (n *node) relayEvents(st *store.Store, nudge func()) {
	if n.fleet == nil {
		return
	}
	n.events.Store(&nudge)
	st.OnEventCommitted(func() { n.fleet.Notify(fleet.Events) })
}

// fleetEventPoll is how often a fleet node's event streams look for the
// events other nodes committed when no notification came (it was lost
// while the LISTEN session was away, say); a single server's streams
// learn of every event at once and poll at the server's default.
const fleetEventPoll = time.Second

// eventPoll is the API's EventPoll: 0 (the default) on a single server.
func (n *node) eventPoll() time.Duration {
	if n.fleet == nil {
		return 0
	}
	return fleetEventPoll
}

func (n *node) run(ctx context.Context) {
	if n.fleet != nil {
		n.fleet.Run(ctx)
	}
}

// publish is what a heartbeat stores: the inventory and the scheduler's
// view of this host's GPUs, which the fleet's leader places by.
func (n *node) publish(orch *orchestrator.Orchestrator) func(gpu.HostInventory) any {
	return func(hi gpu.HostInventory) any {
		spec := orch.HostSpec(hi)
		return orchestrator.HeartbeatInventory{HostInventory: hi, Spec: &spec}
	}
}

// fleetWaker tells this node's workers and every other node of new work
// the API queued (a create, a delete, an action on any node's VM).
type fleetWaker struct {
	local server.Waker
	fleet *fleet.Node
}

func (w fleetWaker) Wake() {
	w.local.Wake()
	w.fleet.Notify(fleet.Everyone)
}

// WakeLeader wakes the fleet's leader alone (server.LeaderWaker): this
// node's workers when it leads, else the leader by notification. A VM
// just queued is the leader's to place; the other nodes' rounds would
// find nothing to do for it.
func (w fleetWaker) WakeLeader() {
	if w.fleet.IsLeader() {
		w.local.Wake()
		return
	}
	w.fleet.Notify(fleet.ToLeader)
}

// waker is the API's Waker.
func (n *node) waker(orch *orchestrator.Orchestrator) server.Waker {
	if n.fleet == nil {
		return orch
	}
	return fleetWaker{local: orch, fleet: n.fleet}
}
