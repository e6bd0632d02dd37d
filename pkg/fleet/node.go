// Package fleet coordinates the gpuvmds of several GPU servers that share
// one PostgreSQL database. Every server runs its own gpuvmd (its libvirt,
// its backends, its GPUs); the database is the only thing they share:
//
//   - Leader elects one node with a PostgreSQL advisory lock held by a
//     dedicated session. The leader runs the scheduling cycle over the
//     whole fleet's queue and the work that must happen once (marking
//     silent nodes down, lease and window loops); when its session ends
//     another node takes over within seconds.
//   - Wake-ups travel by LISTEN/NOTIFY (Listener, Node.Notify): the API
//     node tells the fleet of new work, the leader tells a node of a VM
//     it placed there, a node tells the leader of capacity it freed.
//     Polling (the orchestrator's tick) remains the fallback.
//   - Node ties them together for one gpuvmd, and refuses to start a node
//     whose clock is far off the database's or whose name another live
//     node uses.
//
// With SQLite there is no fleet: one gpuvmd is always the leader.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Notification payloads besides node names.
const (
	// ToLeader wakes whichever node leads (it places queued VMs).
	ToLeader = "@leader"
	// Everyone wakes every node.
	Everyone = "*"
	// Events tells every node that one of them committed events: their
	// event streams read them at once rather than at their next poll.
	Events = "@events"
)

// lockClass is the first part of the fleet's advisory lock key ("gpuv").
const lockClass = 0x67707576

// Clock skew between a node and the database: more than ClockWarn is
// logged as an error at every check; more than the heartbeat timeout's
// half (at least ClockRefuse) refuses the node at start, since heartbeats,
// leases and queue times are compared across machines.
const (
	ClockWarn   = time.Second
	ClockRefuse = 2 * time.Second
)

// Config is one node of a fleet.
type Config struct {
	// DSN is the PostgreSQL database (the store's); Store the store on it.
	DSN   string
	Store *store.Store
	// Node is this node's name (the orchestrator's host); APIURL where its
	// API answers (hosts.api_url).
	Node, APIURL string
	// HeartbeatInterval is how often nodes write their heartbeat; a node
	// whose heartbeat is older than HeartbeatTimeout is down.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// Now is this machine's clock (default time.Now), compared with the
	// database's.
	Now func() time.Time
	Log *slog.Logger
}

// Hooks are what a node's loops do; every one may be nil.
type Hooks struct {
	// Wake is called when a notification concerns this node.
	Wake func()
	// HostsDown is called on the leader every heartbeat interval with
	// the nodes that are down now (marked, or silent past the timeout),
	// sorted; it puts their unstarted work back in the queue.
	HostsDown func(ctx context.Context, hosts []string)
	// Leading is called when this node starts or stops leading.
	Leading func(leading bool)
	// Events is called when a node (this one too) committed events, and
	// with Everyone (after the LISTEN session came back, when what was
	// sent meanwhile is lost).
	Events func()
}

// Node is this gpuvmd's membership of the fleet.
type Node struct {
	cfg     Config
	log     *slog.Logger
	channel string
	key     LockKey
	leader  *Leader

	mu      sync.Mutex
	pending map[string]bool // notifications not sent yet
	kick    chan struct{}
	hooks   Hooks
}

// Open joins the fleet: it reads the database's scope (the channel and the
// lock of this fleet), and refuses a node whose clock is off the
// database's by more than the heartbeat timeout allows, or whose name a
// node that is alive at another address uses. Run runs it.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Store == nil || cfg.Store.Driver() != store.DriverPostgres {
		return nil, errors.New("a fleet needs the PostgreSQL database (database { driver = \"postgres\" })")
	}
	if cfg.Node == "" {
		return nil, errors.New("a fleet node needs a name")
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = config.DefaultHeartbeatInterval
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = config.HeartbeatTimeoutIntervals * cfg.HeartbeatInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	db, schema, err := cfg.Store.Scope(ctx)
	if err != nil {
		return nil, fmt.Errorf("join the fleet: %w", err)
	}
	n := &Node{cfg: cfg, log: cfg.Log.With("component", "fleet", "node", cfg.Node), pending: map[string]bool{}, kick: make(chan struct{}, 1)}
	n.channel, n.key = scopeOf(db, schema)
	skew, err := n.clockSkew(ctx)
	if err != nil {
		return nil, fmt.Errorf("join the fleet: %w", err)
	}
	if limit := refuseSkew(cfg.HeartbeatTimeout); skew.abs() > limit {
		return nil, fmt.Errorf("join the fleet: this machine's clock is %s the database's; a node may be off by at most %s "+
			"(heartbeats, leases and queue times are compared across machines): set the clock right (chrony, systemd-timesyncd) and start again",
			skew, limit)
	}
	if skew.abs() > ClockWarn {
		n.log.Error("this machine's clock is off the database's: heartbeats, leases and queue times will be off by as much; set the clock right", "skew", skew.String())
	}
	if err := n.checkName(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// scopeOf is the channel and the lock key of the fleet whose tables are in
// schema of database: fleets in other schemas of the same PostgreSQL
// neither wake nor block it.
func scopeOf(database, schema string) (string, LockKey) {
	h := fnv.New32a()
	h.Write([]byte(database + "\x00" + schema))
	sum := h.Sum32() & 0x7fffffff
	return fmt.Sprintf("gpuvm_work_%08x", sum), LockKey{Class: lockClass, Object: int32(sum)}
}

// Channel is the fleet's LISTEN/NOTIFY channel.
func (n *Node) Channel() string { return n.channel }

// LockKey is the fleet's advisory lock.
func (n *Node) LockKey() LockKey { return n.key }

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Node }

// skew is how far this machine's clock is ahead of the database's
// (negative: behind).
type skew time.Duration

func (s skew) abs() time.Duration { return max(time.Duration(s), -time.Duration(s)) }

func (s skew) String() string {
	d := time.Duration(s).Round(time.Millisecond)
	if d < 0 {
		return (-d).String() + " behind"
	}
	return d.String() + " ahead of"
}

func refuseSkew(timeout time.Duration) time.Duration { return max(timeout/2, ClockRefuse) }

// clockSkew compares this machine's clock with the database's, at the
// middle of the round trip.
func (n *Node) clockSkew(ctx context.Context) (skew, error) {
	before := n.cfg.Now()
	db, err := n.cfg.Store.DatabaseNow(ctx)
	if err != nil {
		return 0, err
	}
	after := n.cfg.Now()
	mid := before.Add(after.Sub(before) / 2)
	return skew(mid.Sub(db)), nil
}

// checkName refuses a name that a node alive at another address uses: its
// heartbeat is younger than the timeout, and it is not down.
func (n *Node) checkName(ctx context.Context) error {
	h, err := n.cfg.Store.GetHost(ctx, n.cfg.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("join the fleet: %w", err)
	}
	now, err := n.cfg.Store.DatabaseNow(ctx)
	if err != nil {
		return fmt.Errorf("join the fleet: %w", err)
	}
	age := now.Sub(h.HeartbeatAt)
	if h.State != store.HostDown && age < n.cfg.HeartbeatTimeout && h.APIURL != n.cfg.APIURL {
		return fmt.Errorf("join the fleet: the node name %q is in use by the gpuvmd at %s, whose last heartbeat is %s old: "+
			"give this node its own name (server { node { name = \"…\" } }), or stop the other one and wait %s",
			n.cfg.Node, h.APIURL, age.Round(time.Millisecond), (n.cfg.HeartbeatTimeout - age).Round(time.Second))
	}
	return nil
}

// IsLeader reports whether this node leads the fleet (false before Start).
func (n *Node) IsLeader() bool { return n.leader != nil && n.leader.IsLeader() }

// Start campaigns once, so that the node knows whether it leads before its
// orchestrator's first round; Run goes on from there.
func (n *Node) Start(ctx context.Context, hooks Hooks) {
	n.hooks = hooks
	n.leader = NewLeader(LeaderConfig{DSN: n.cfg.DSN, Node: n.cfg.Node, Key: n.key, Log: n.cfg.Log,
		Interval: min(time.Second, n.cfg.HeartbeatInterval), OnChange: n.leadingChanged})
	if err := n.leader.Step(ctx); err != nil {
		n.log.Warn("fleet: the first campaign failed; trying again every second", "err", err)
	}
}

func (n *Node) leadingChanged(leading bool) {
	if n.hooks.Leading != nil {
		n.hooks.Leading(leading)
	}
	if leading && n.hooks.Wake != nil {
		n.hooks.Wake() // the queue waits for a leader
	}
}

// Run runs the node's loops until ctx ends: the campaign, the listener,
// the notification sender and the periodic checks (on the leader: nodes
// whose heartbeat stopped). Call Start first.
func (n *Node) Run(ctx context.Context) {
	if n.leader == nil {
		n.Start(ctx, Hooks{})
	}
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(n.leader.Run)
	run((&Listener{DSN: n.cfg.DSN, Channel: n.channel, Name: "gpuvmd-listen/" + n.cfg.Node, Handle: n.handle, Log: n.log}).Run)
	run(n.sendLoop)
	run(n.checkLoop)
	wg.Wait()
}

// handle is the listener's: a notification for this node (or everyone, or
// the leader while this node leads) wakes its workers.
func (n *Node) handle(payload string) {
	if n.hooks.Events != nil && (payload == Events || payload == Everyone) {
		n.hooks.Events()
	}
	if n.hooks.Wake == nil || payload == Events {
		return
	}
	if payload == Everyone || payload == n.cfg.Node || (payload == ToLeader && n.IsLeader()) {
		n.hooks.Wake()
	}
}

// Notify wakes a node of the fleet: a node's name, ToLeader or Everyone.
// It does not wait: notifications are sent by a goroutine, duplicates
// merged; one that cannot be sent is left to the others' polling.
func (n *Node) Notify(to string) {
	if to == "" {
		to = ToLeader
	}
	n.mu.Lock()
	n.pending[to] = true
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Node) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		n.mu.Lock()
		payloads := make([]string, 0, len(n.pending))
		for p := range n.pending {
			payloads = append(payloads, p)
		}
		clear(n.pending)
		n.mu.Unlock()
		slices.Sort(payloads)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cfg.Store.Notify(sctx, n.channel, payloads)
		cancel()
		if err != nil && ctx.Err() == nil {
			n.log.Debug("fleet: a wake-up was not sent; the others' polling finds the work", "to", strings.Join(payloads, ","), "err", err)
		}
	}
}

// checkLoop runs every heartbeat interval: every node watches its clock
// and its name; the leader marks silent nodes down and hands the down
// ones to HostsDown.
func (n *Node) checkLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	lastClock := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(lastClock) >= time.Minute {
			lastClock = time.Now()
			if s, err := n.clockSkew(ctx); err == nil && s.abs() > ClockWarn {
				n.log.Error("this machine's clock is off the database's: heartbeats, leases and queue times are off by as much; set the clock right", "skew", s.String())
			}
		}
		if h, err := n.cfg.Store.GetHost(ctx, n.cfg.Node); err == nil && n.cfg.APIURL != "" && h.APIURL != n.cfg.APIURL {
			n.log.Error("another gpuvmd registered under this node's name: two nodes named alike mix their VMs up; give each its own name (server { node { name = \"…\" } })",
				"this_api_url", n.cfg.APIURL, "other_api_url", h.APIURL)
		}
		if n.IsLeader() {
			if err := n.markDown(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("fleet: checking the nodes' heartbeats failed; trying again", "err", err)
			}
		}
	}
}

// markDown marks the nodes whose heartbeat is older than the timeout down
// and hands every down node to HostsDown.
func (n *Node) markDown(ctx context.Context) error {
	now, err := n.cfg.Store.DatabaseNow(ctx)
	if err != nil {
		return err
	}
	marked, err := n.cfg.Store.MarkHostsDown(ctx, now.Add(-n.cfg.HeartbeatTimeout))
	if err != nil {
		return err
	}
	for _, h := range marked {
		n.log.Warn("node marked down: its heartbeat stopped; its capacity leaves scheduling, its VMs show host-down until it returns", "host", h)
	}
	hosts, err := n.cfg.Store.ListHosts(ctx)
	if err != nil {
		return err
	}
	var down []string
	for _, h := range hosts {
		if h.Name != n.cfg.Node && (h.State == store.HostDown || now.Sub(h.HeartbeatAt) > n.cfg.HeartbeatTimeout) {
			down = append(down, h.Name)
		}
	}
	if len(down) > 0 && n.hooks.HostsDown != nil {
		n.hooks.HostsDown(ctx, down)
	}
	return nil
}

// LeaderName is the node that leads the fleet now, "" when none does (the
// lock is free: a leader just died and the others have not taken it yet).
func (n *Node) LeaderName(ctx context.Context) (string, error) {
	app, err := n.cfg.Store.AdvisoryLockHolder(ctx, n.key.Class, n.key.Object)
	if err != nil {
		return "", err
	}
	name, _ := strings.CutPrefix(app, ApplicationName(""))
	return name, nil
}
