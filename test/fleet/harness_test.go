package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	testcluster "github.com/gpuvm/gpuvm/test/internal/cluster"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// envPostgres names a PostgreSQL database the tests may make schemas in
// (pkg/store/testdata/start-postgres.sh prints one; `make unit` sets it).
const envPostgres = "GPUVM_TEST_POSTGRES_DSN"

// Heartbeats of the test fleets: a node silent for timeout is down.
const (
	heartbeat = time.Second
	timeout   = 3 * time.Second
)

func TestMain(m *testing.M) {
	code := m.Run()
	daemon.Cleanup()
	os.Exit(code)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// postgres is the test's database: a fresh schema of $GPUVM_TEST_POSTGRES_DSN;
// the test skips without it.
func postgres(t *testing.T) string {
	t.Helper()
	base := os.Getenv(envPostgres)
	if base == "" {
		t.Skipf("%s is not set: a fleet needs PostgreSQL (as root: export %s=\"$(bash pkg/store/testdata/start-postgres.sh)\")", envPostgres, envPostgres)
	}
	return storetest.SchemaDSN(t, base)
}

// node is one gpuvmd of a test fleet: its own configuration, state
// directory (its simulated GPU server lives there), libvirt (the test
// driver inside gpuvmd) and domain prefix; the database is the fleet's.
type node struct {
	name, preset         string
	configDir, stateDir  string
	prefix               string
	proc                 *daemon.Process
	cl                   *client.Client
	mu                   sync.Mutex
	logs                 []string // of its earlier runs
	startedAt, killedAt  time.Time
	heartbeat, downAfter time.Duration
}

// cluster is a fleet of gpuvmds sharing one PostgreSQL schema.
type cluster struct {
	t     *testing.T
	dsn   string
	nodes []*node
	token string
	st    *store.Store // the test's own view of the database
}

// fleetProfiles are the profiles every node serves: h100-slice fits only
// H100s (a 1g.20gb MIG instance: an A100 40GB has none), a100-slice only
// A100s (1g.5gb: an H100's smallest is 1g.10gb), the L40S types only L40S.
const fleetProfiles = `
profile "h100-slice" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.20gb"
  }
}

profile "a100-slice" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.5gb"
  }
}

profile "l40s-seat" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}

profile "l40s-small" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-2Q"
  }
}
`

// newCluster writes the configuration of nodes (name: simulator preset)
// and starts them one after the other (the first makes the admin).
func newCluster(t *testing.T, dsn string, presets [][2]string) *cluster {
	t.Helper()
	c := &cluster{t: t, dsn: dsn}
	for _, np := range presets {
		n := &node{name: np[0], preset: np[1], configDir: t.TempDir(), stateDir: t.TempDir(),
			prefix: "fl" + randHex(3) + "-", heartbeat: heartbeat, downAfter: timeout}
		cfg := testcluster.Node{Name: n.name, Heartbeat: heartbeat, Timeout: timeout, Profiles: fleetProfiles}
		if err := cfg.WriteConfig(n.configDir); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.proc != nil {
				if err := n.proc.Stop(30 * time.Second); err != nil {
					t.Errorf("%s did not stop cleanly: %v", n.name, err)
				}
				n.keepLogs()
			}
		}
		if t.Failed() {
			for _, n := range c.nodes {
				n.mu.Lock()
				for i, l := range n.logs {
					t.Logf("%s, run %d:\n%s", n.name, i+1, tail(l, 200))
				}
				n.mu.Unlock()
			}
		}
		if c.st != nil {
			c.st.Close()
		}
	})
	for _, n := range c.nodes {
		c.start(n)
	}
	st := storetest.Open(t, store.Config{Driver: store.DriverPostgres, DSN: dsn, Logger: quiet()})
	c.st = st
	return c
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = append([]string{fmt.Sprintf("[%d lines before]", len(ls)-lines)}, ls[len(ls)-lines:]...)
	}
	return strings.Join(ls, "\n")
}

func (c *cluster) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	c.t.Cleanup(cancel)
	return ctx
}

// start starts a node's gpuvmd and gives it an admin client.
func (c *cluster) start(n *node) {
	c.t.Helper()
	if n.proc != nil {
		c.t.Fatalf("%s runs already", n.name)
	}
	p, err := daemon.Start(c.ctx(2*time.Minute), daemon.Config{
		Args: testcluster.Args(n.configDir, n.stateDir, c.dsn, n.preset),
		Env:  []string{"GPUVM_TEST_DOMAIN_PREFIX=" + n.prefix},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	n.proc, n.startedAt = p, time.Now()
	if c.token == "" {
		b, err := os.ReadFile(filepath.Join(n.stateDir, "admin.token"))
		if err != nil {
			c.t.Fatalf("the first node wrote no admin token: %v", err)
		}
		c.token = strings.TrimSpace(string(b))
	}
	cl, err := client.New(p.URL(), c.token)
	if err != nil {
		c.t.Fatal(err)
	}
	cl.PollMin, cl.PollMax = 20*time.Millisecond, 250*time.Millisecond
	n.cl = cl
}

// kill SIGKILLs a node (and its backends), as a power cut would.
func (c *cluster) kill(n *node) {
	c.t.Helper()
	if err := n.proc.Kill(); err != nil {
		c.t.Fatal(err)
	}
	n.killedAt = time.Now()
	n.keepLogs()
	n.proc, n.cl = nil, nil
}

func (n *node) keepLogs() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.logs = append(n.logs, n.proc.Logs())
}

func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// running are the nodes that run.
func (c *cluster) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.proc != nil {
			out = append(out, n)
		}
	}
	return out
}

// hosts is GET /v1/hosts as a node answers it, by name.
func (c *cluster) hosts(via *node) map[string]api.Host {
	c.t.Helper()
	hs, err := via.cl.ListHosts(c.ctx(30 * time.Second))
	if err != nil {
		c.t.Fatalf("hosts via %s: %v", via.name, err)
	}
	out := map[string]api.Host{}
	for _, h := range hs {
		out[h.Name] = h
	}
	return out
}

// leader is the node GET /v1/hosts marks as leading ("" none).
func (c *cluster) leader(via *node) string {
	for name, h := range c.hosts(via) {
		if h.Leader {
			return name
		}
	}
	return ""
}

// vms lists every VM, as a node answers.
func (c *cluster) vms(via *node) map[string]api.VM {
	c.t.Helper()
	list, err := via.cl.ListAllVMs(c.ctx(time.Minute), client.ListVMsOptions{})
	if err != nil {
		c.t.Fatalf("list VMs via %s: %v", via.name, err)
	}
	out := map[string]api.VM{}
	for _, vm := range list {
		out[vm.ID] = vm
	}
	return out
}

// settled reports whether a VM is where it stays without a change in
// capacity: running, or queued saying why.
func settled(vm api.VM) bool {
	return vm.State == client.StateRunning || (vm.State == "queued" && vm.Reason != "")
}

// waitSettled waits until every VM of ids is settled.
func (c *cluster) waitSettled(via *node, ids []string, within time.Duration) map[string]api.VM {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		vms := c.vms(via)
		var waiting []string
		for _, id := range ids {
			if vm, ok := vms[id]; !ok || !settled(vm) {
				waiting = append(waiting, fmt.Sprintf("%s %s (%s)", vm.Name, vm.State, vm.Phase))
			}
		}
		if len(waiting) == 0 {
			return vms
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d VMs not settled after %v: %s", len(waiting), within, strings.Join(waiting[:min(len(waiting), 20)], "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devices are the managed devices a node's simulated host has, by VM.
func (c *cluster) devices(n *node) map[string][]api.Device {
	c.t.Helper()
	inv, err := n.cl.GPUs(c.ctx(30 * time.Second))
	if err != nil {
		c.t.Fatalf("GPUs of %s: %v", n.name, err)
	}
	if !inv.Simulated {
		c.t.Fatalf("%s does not say it is simulated", n.name)
	}
	out := map[string][]api.Device{}
	for _, d := range inv.Devices {
		if d.Managed {
			out[d.VMUUID] = append(out[d.VMUUID], d)
		}
	}
	return out
}

// checkSlots checks the database's invariant and the hosts against it: no
// unit of a GPU is held twice; every live allocation is on its VM's node;
// each running node's simulated host has exactly the devices of the VMs
// placed on it that made them, and none of another node's VMs.
func (c *cluster) checkSlots(vms map[string]api.VM) map[string][]store.Allocation {
	c.t.Helper()
	ctx := c.ctx(time.Minute)
	live, err := c.st.ListLiveAllocations(ctx, "")
	if err != nil {
		c.t.Fatal(err)
	}
	held := map[string]int64{}
	byHost := map[string][]store.Allocation{}
	for _, a := range live {
		keys, err := slotClaim(a).SlotKeys()
		if err != nil {
			c.t.Errorf("allocation %d: %v", a.ID, err)
			continue
		}
		for _, k := range keys {
			unit := a.Host + "/" + a.GPUAddress + "/" + k
			if other, ok := held[unit]; ok {
				c.t.Errorf("slot given twice: %s is held by allocations %d and %d", unit, other, a.ID)
			}
			held[unit] = a.ID
		}
		if vm, ok := vms[a.VMID]; ok && vm.Host != a.Host {
			c.t.Errorf("VM %s is on %q, its allocation %d on %s", vm.Name, vm.Host, a.ID, a.Host)
		}
		byHost[a.Host] = append(byHost[a.Host], a)
	}
	for _, n := range c.running() {
		devs := c.devices(n)
		want := map[string]bool{}
		for _, a := range byHost[n.name] {
			if a.State == store.AllocCreated {
				want[a.VMID] = true
				if len(devs[a.VMID]) != 1 || devs[a.VMID][0].ID != a.DeviceID {
					c.t.Errorf("%s: VM %s holds allocation %d (device %s), the host has %+v", n.name, a.VMID, a.ID, a.DeviceID, devs[a.VMID])
				}
			}
		}
		for id, ds := range devs {
			if !want[id] {
				c.t.Errorf("%s holds devices of VM %s (%s), which no live allocation on it recorded: %+v", n.name, id, vms[id].Host, ds)
			}
		}
	}
	return byHost
}

func slotClaim(a store.Allocation) store.SlotClaim {
	cl := store.SlotClaim{Host: a.Host, GPUAddress: a.GPUAddress, Backend: a.Backend, Kind: a.Kind, Profile: a.Profile,
		PlacementStart: a.PlacementStart, PlacementSize: a.PlacementSize}
	if vf, ok := strings.CutPrefix(a.Slot, "vf:"); ok {
		cl.VF = vf
	}
	if i, ok := strings.CutPrefix(a.Slot, "vgpu:"); ok {
		cl.Index, _ = strconv.Atoi(i)
	}
	return cl
}

// profileNode is the node whose simulated GPUs serve a profile.
var profileNode = map[string]string{"h100-slice": "n1", "a100-slice": "n2", "l40s-seat": "n3"}

// freeFor is how many more of a profile's GPU a node's last heartbeat
// offers.
func freeFor(h api.Host, profile string) int {
	switch profile {
	case "h100-slice":
		return h.Free.MIG["1g.20gb"]
	case "a100-slice":
		return h.Free.MIG["1g.5gb"]
	case "l40s-seat":
		return h.Free.VGPU["L40S-12Q"]
	}
	return 0
}

// noErrors fails on log lines no run should show.
func (c *cluster) noErrors(n *node, allowed ...string) {
	c.t.Helper()
	n.mu.Lock()
	logs := slices.Clone(n.logs)
	n.mu.Unlock()
	if n.proc != nil {
		logs = append(logs, n.proc.Logs())
	}
	for _, l := range strings.Split(strings.Join(logs, "\n"), "\n") {
		if !strings.Contains(l, "level=ERROR") && !strings.Contains(l, "panic") {
			continue
		}
		if !slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(l, a) }) {
			c.t.Errorf("%s logged: %s", n.name, l)
		}
	}
}

// dbLoad measures the load of the fleet on its schema's tables over window
// (PostgreSQL's cumulative statistics): tables read (sequential and index
// scans) and rows written, a second, each table's share beside.
//
// A session flushes its statistics at the end of a transaction at most
// once a second; what it did within that second stays pending until its
// next transaction or, idle, for up to ten seconds (PostgreSQL's
// PGSTAT_IDLE_INTERVAL). A pool's connections, idle since a burst, would
// count the burst's work inside the window: the first reading waits that
// out.
func (c *cluster) dbLoad(window time.Duration) testcluster.Load {
	c.t.Helper()
	read := func() testcluster.Stats {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := testcluster.ReadStats(ctx, c.dsn)
		if err != nil {
			c.t.Fatal(err)
		}
		return s
	}
	time.Sleep(11 * time.Second) // what came before is flushed
	s0 := read()
	time.Sleep(window)
	return testcluster.Diff(s0, read())
}
