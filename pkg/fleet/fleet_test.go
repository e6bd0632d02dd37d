package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func openStore(t *testing.T, dsn string) *store.Store {
	t.Helper()
	return storetest.Open(t, store.Config{Driver: store.DriverPostgres, DSN: dsn, Logger: quiet()})
}

// terminate ends the PostgreSQL sessions of an application_name, as a
// lost connection or a database restart would.
func terminate(t *testing.T, dsn, app string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// One of two nodes leads; when its session is killed it stops leading at
// its next check and the other takes over; when it stops, it releases the
// lock at once. LeaderName says who leads.
func TestLeaderElection(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := openStore(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := map[string]*Node{}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	suffix := "-" + randHex() // session names are the whole server's
	for _, name := range []string{"a", "b"} {
		n, err := Open(ctx, Config{DSN: dsn, Store: st, Node: name + suffix, APIURL: "http://" + name, HeartbeatInterval: time.Second, Log: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		n.Start(ctx, Hooks{})
		nctx, ncancel := context.WithCancel(ctx)
		cancels[name] = ncancel
		wg.Add(1)
		go func() { defer wg.Done(); n.Run(nctx) }()
		nodes[name] = n
	}
	defer wg.Wait()
	defer cancel()
	if !nodes["a"].IsLeader() || nodes["b"].IsLeader() {
		t.Fatalf("a leads %v, b leads %v: the first to campaign leads, alone", nodes["a"].IsLeader(), nodes["b"].IsLeader())
	}
	if name, err := nodes["b"].LeaderName(ctx); err != nil || name != "a"+suffix {
		t.Fatalf("LeaderName = %q, %v; want a", name, err)
	}

	// a's session dies: a stops leading, b takes over.
	if n := terminate(t, dsn, ApplicationName("a"+suffix)); n != 1 {
		t.Fatalf("terminated %d sessions of a", n)
	}
	took := waitFor(t, 10*time.Second, "b takes over", func() bool { return nodes["b"].IsLeader() && !nodes["a"].IsLeader() })
	t.Logf("b took over %v after a's session died", took.Round(time.Millisecond))
	if name, _ := nodes["a"].LeaderName(ctx); name != "b"+suffix {
		t.Errorf("LeaderName = %q after the takeover", name)
	}
	// a campaigns again but b keeps the lead.
	time.Sleep(1500 * time.Millisecond)
	if nodes["a"].IsLeader() {
		t.Fatal("two leaders")
	}

	// b stops: it resigns, and a leads within an interval.
	cancels["b"]()
	took = waitFor(t, 5*time.Second, "a takes over from b, which stopped", nodes["a"].IsLeader)
	t.Logf("a took over %v after b stopped", took.Round(time.Millisecond))
	if nodes["b"].IsLeader() {
		t.Error("b still leads after it stopped")
	}
}

// Fleets in two schemas of one database neither share a lock nor a
// channel.
func TestScopesApart(t *testing.T) {
	c1, k1 := scopeOf("gpuvm", "public")
	c2, k2 := scopeOf("gpuvm", "staging")
	c3, k3 := scopeOf("gpuvm", "public")
	if c1 == c2 || k1 == k2 || c1 != c3 || k1 != k3 || k1.Object < 0 || !strings.HasPrefix(c1, "gpuvm_work_") {
		t.Errorf("scopes %s %v / %s %v / %s %v", c1, k1, c2, k2, c3, k3)
	}
}

// Notifications reach the nodes they are for: a node's name, everyone,
// and the leader's (only while it leads). After its session is lost the
// listener comes back and wakes its node once to look for missed work.
func TestNotifications(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := openStore(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	woken := map[string]int{}
	told := map[string]int{} // Events calls
	var wg sync.WaitGroup
	nodes := map[string]*Node{}
	suffix := "-" + randHex() // session names are the whole server's
	for _, name := range []string{"a", "b"} {
		n, err := Open(ctx, Config{DSN: dsn, Store: st, Node: name + suffix, HeartbeatInterval: time.Second, Log: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		n.Start(ctx, Hooks{Wake: func() { mu.Lock(); woken[name]++; mu.Unlock() },
			Events: func() { mu.Lock(); told[name]++; mu.Unlock() }})
		wg.Add(1)
		go func() { defer wg.Done(); n.Run(ctx) }()
		nodes[name] = n
	}
	defer wg.Wait()
	defer cancel()
	count := func(name string) int { mu.Lock(); defer mu.Unlock(); return woken[name] }
	events := func(name string) int { mu.Lock(); defer mu.Unlock(); return told[name] }
	// Each listener wakes its node once when it starts listening.
	waitFor(t, 10*time.Second, "both listen", func() bool { return count("a") >= 1 && count("b") >= 1 })
	time.Sleep(200 * time.Millisecond)
	for _, tc := range []struct {
		to     string
		wakesA bool
		wakesB bool
		events bool // both told of events
	}{
		{"b" + suffix, false, true, false},
		{ToLeader, true, false, false}, // a leads: it campaigned first
		{"", true, false, false},       // "" is the leader too
		{Everyone, true, true, true},
		{"c", false, false, false},
		{Events, false, false, true}, // events wake no worker
	} {
		a0, b0 := count("a"), count("b")
		ea, eb := events("a"), events("b")
		nodes["b"].Notify(tc.to)
		nodes["a"].Notify("b" + suffix) // a marker that everything before it has arrived
		waitFor(t, 5*time.Second, "the marker", func() bool { return count("b") > b0 })
		time.Sleep(100 * time.Millisecond)
		if got := count("a") > a0; got != tc.wakesA {
			t.Errorf("notify %q: a woken %v, want %v", tc.to, got, tc.wakesA)
		}
		if got := count("b") - b0; (got >= 2) != tc.wakesB {
			t.Errorf("notify %q: b woken %d times, want a wake-up besides the marker: %v", tc.to, got, tc.wakesB)
		}
		if got := events("a") > ea && events("b") > eb; got != tc.events {
			t.Errorf("notify %q: both told of events: %v, want %v", tc.to, got, tc.events)
		}
	}

	// The listener's session dies: it reconnects and wakes its node.
	b0 := count("b")
	if n := terminate(t, dsn, "gpuvmd-listen/b"+suffix); n != 1 {
		t.Fatalf("terminated %d listening sessions of b", n)
	}
	waitFor(t, 10*time.Second, "b's listener back", func() bool { return count("b") > b0 })
	a0 := count("a")
	nodes["b"].Notify("a" + suffix)
	waitFor(t, 10*time.Second, "a notified after the reconnection", func() bool { return count("a") > a0 })
}

// A node whose clock is off the database's, or whose name a live node at
// another address uses, is refused with the reason.
func TestOpenRefuses(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := openStore(t, dsn)
	ctx := context.Background()
	if err := st.RegisterHost(ctx, &store.Host{Name: "gpu-01", APIURL: "http://10.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" when it joins
	}{
		{"clock ahead", Config{Node: "gpu-02", Now: func() time.Time { return time.Now().Add(time.Hour) }}, "ahead of the database's"},
		{"clock behind", Config{Node: "gpu-02", Now: func() time.Time { return time.Now().Add(-30 * time.Second) }}, "behind the database's"},
		{"clock a little off", Config{Node: "gpu-02", Now: func() time.Time { return time.Now().Add(1500 * time.Millisecond) }}, ""},
		{"name in use", Config{Node: "gpu-01", APIURL: "http://10.0.0.2:8080"}, `the node name "gpu-01" is in use by the gpuvmd at http://10.0.0.1:8080`},
		{"the same node again", Config{Node: "gpu-01", APIURL: "http://10.0.0.1:8080"}, ""},
		{"no name", Config{}, "needs a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.DSN, cfg.Store, cfg.Log, cfg.HeartbeatInterval = dsn, st, quiet(), 5*time.Second
			_, err := Open(ctx, cfg)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v; want one with %q", err, tc.err)
			}
		})
	}
	// A node down for longer than the timeout leaves its name free.
	if _, err := st.MarkHostsDown(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Config{DSN: dsn, Store: st, Node: "gpu-01", APIURL: "http://10.0.0.2:8080", Log: quiet()}); err != nil {
		t.Errorf("the name of a down node: %v", err)
	}
	// SQLite has no fleet.
	lite := storetest.Open(t, store.Config{DSN: t.TempDir() + "/db", Logger: quiet()})
	defer lite.Close()
	if _, err := Open(ctx, Config{Store: lite, Node: "x"}); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Errorf("a fleet on SQLite: %v", err)
	}
}

// The leader marks nodes silent past the timeout down and hands the down
// ones to HostsDown; a node that beats again is up.
func TestLeaderMarksDown(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := openStore(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, h := range []string{"lead", "quiet", "alive"} {
		if err := st.RegisterHost(ctx, &store.Host{Name: h, APIURL: "http://" + h}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var downs [][]string
	n, err := Open(ctx, Config{DSN: dsn, Store: st, Node: "lead", APIURL: "http://lead", HeartbeatInterval: time.Second, HeartbeatTimeout: 2 * time.Second, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx, Hooks{HostsDown: func(_ context.Context, hosts []string) { mu.Lock(); downs = append(downs, hosts); mu.Unlock() }})
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// "alive" and "lead" beat; "quiet" does not.
	stop := time.After(4 * time.Second)
	for beating := true; beating; {
		select {
		case <-stop:
			beating = false
		case <-time.After(300 * time.Millisecond):
			for _, h := range []string{"alive", "lead"} {
				if err := st.Heartbeat(ctx, h, "{}"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	h, _ := st.GetHost(ctx, "quiet")
	if h.State != store.HostDown {
		t.Errorf("quiet is %s", h.State)
	}
	for _, name := range []string{"alive", "lead"} {
		if h, _ := st.GetHost(ctx, name); h.State != store.HostUp {
			t.Errorf("%s is %s", name, h.State)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(downs) == 0 || strings.Join(downs[len(downs)-1], ",") != "quiet" {
		t.Errorf("HostsDown got %v", downs)
	}
}
