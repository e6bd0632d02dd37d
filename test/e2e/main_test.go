// Package e2e drives the real gpuvmd binary as a process, through pkg/client,
// on simulated GPU servers (pkg/host/sim), as issue #5's proof asks:
//
//   - TestVMsOnSimulatedHosts: VMs of every GPU kind on the h100x8 and l40sx4
//     presets reach running with the right hostdev in their domain, and
//     deleting them leaves the simulated host and libvirt as they were.
//   - TestCrashAtEachHook: gpuvmd is SIGKILLed at every step of a create
//     and of a delete, restarted, and must reach the right end state with
//     no leaked device, volume or domain and no slot given twice.
//   - TestCrashDuringDataDiskCreate: gpuvmd is SIGKILLed at each step of a
//     data disk's creation; the next gpuvmd makes it ready, with its one
//     volume in the pool and no orphan.
//   - TestCrashDuringSnapshot: gpuvmd is SIGKILLed at each step of a disk
//     snapshot and of a restore of a stopped VM, its overlay a qcow2 file
//     the real qemu-img works on (no guest boots); the next gpuvmd finishes
//     them: the tag on the disk once, the disk restored.
//   - TestConcurrentCreates: 50 creates at once against 8 free slots, on
//     SQLite and on PostgreSQL.
//   - TestRealLibvirtTinyGuest: the tiny guest booted by a real libvirtd.
//   - TestTinyGuestOnNetwork: the tiny guest on libvirt's NAT network, ready
//     with its address, reached by `gpuvm ssh` and `gpuvm tunnel`.
//   - TestHomeFollowsThePerson: a person's home over virtiofs, written in
//     one VM, on the host once it is deleted, read in the next; another
//     person's VM has its own.
//
// Tests that need a libvirtd (libvirt's test driver hosted by libvirtd,
// test+unix:///default, whose state outlives a killed gpuvmd; or QEMU) skip
// with the reason when it does not answer. They hold libvirtlock shared, so
// that a test binary that restarts libvirtd waits for them.
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
	"github.com/gpuvm/gpuvm/test/internal/libvirtlock"
)

// Libvirt URIs: the test driver inside libvirtd (its state is the daemon's,
// kept while at least one connection is open: this test binary holds one),
// and QEMU.
const (
	testDriverURI  = "test+unix:///default"
	testDriverPool = "default-pool" // the test driver's storage pool
	systemURI      = "qemu:///system"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeLibvirt()
	daemon.Cleanup()
	os.Exit(code)
}

// quiet is the logger of the test's own libvirt connections.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Connections to libvirtd, one per URI for the whole test binary, with the
// libvirtd lock held shared while any is open.
var (
	libvirtMu     sync.Mutex
	libvirtConns  = map[string]*hypervisor.Conn{}
	libvirtSkip   = map[string]string{}
	unlockLibvirt func()
)

// libvirt returns the test binary's connection to uri, or skips the test
// when libvirtd does not answer there.
func libvirt(t *testing.T, uri string) *hypervisor.Conn {
	t.Helper()
	libvirtMu.Lock()
	defer libvirtMu.Unlock()
	if c := libvirtConns[uri]; c != nil {
		return c
	}
	if why, ok := libvirtSkip[uri]; ok {
		t.Skip(why)
	}
	if unlockLibvirt == nil {
		release, err := libvirtlock.Shared()
		if err != nil {
			t.Fatal(err)
		}
		unlockLibvirt = release
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := hypervisor.Open(ctx, uri, quiet(), hypervisor.WithCallTimeout(20*time.Second))
	if err != nil {
		why := fmt.Sprintf("libvirt %s does not answer (as root, scripts/setup-host.sh starts libvirtd): %v", uri, err)
		if os.Geteuid() != 0 {
			why = fmt.Sprintf("libvirt %s needs libvirtd's read-write socket, which is root's: %v", uri, err)
		}
		libvirtSkip[uri] = why
		t.Skip(why)
	}
	libvirtConns[uri] = c
	return c
}

func closeLibvirt() {
	libvirtMu.Lock()
	defer libvirtMu.Unlock()
	for uri, c := range libvirtConns {
		_ = c.Close()
		delete(libvirtConns, uri)
	}
	if unlockLibvirt != nil {
		unlockLibvirt()
		unlockLibvirt = nil
	}
}

// world is what one gpuvmd runs on, across its restarts: a configuration
// directory, a state directory (the simulated host lives there), a
// database, a libvirt URI and the domain prefix that keeps its domains
// apart from every other gpuvmd's on the same libvirtd.
type world struct {
	t                *testing.T
	configDir, state string
	database         string // --database: a SQLite path or a PostgreSQL DSN
	uri, preset      string
	prefix, pool     string
	args             []string // more gpuvmd flags
	proc             *daemon.Process
	cl               *client.Client
	mu               sync.Mutex
	logs             []string // of every gpuvmd run, in order
}

type worldConfig struct {
	preset, uri string
	// pool is the storage pool of disk overlays (server.libvirt.storage_pool).
	pool string
	// profiles is the HCL of the profiles (and images) gpuvmd serves.
	profiles string
	// database is the DSN (default: SQLite in the state directory).
	database string
	// args are more gpuvmd flags ("--boot-timeout", "90s").
	args []string
	// storage is the HCL of the server's storage block ("homes { … }"),
	// none when empty.
	storage string
}

func newWorld(t *testing.T, c worldConfig) *world {
	t.Helper()
	w := &world{t: t, configDir: t.TempDir(), state: t.TempDir(), uri: c.uri, preset: c.preset,
		pool: c.pool, database: c.database, args: c.args, prefix: "e2e" + randHex(4) + "-"}
	if w.database == "" {
		w.database = filepath.Join(w.state, "gpuvm.db")
	}
	if w.pool == "" {
		w.pool = "gpuvm"
	}
	server := fmt.Sprintf("server {\n  libvirt {\n    storage_pool = %q\n  }\n", w.pool)
	if c.storage != "" {
		server += "  storage {\n" + c.storage + "\n  }\n"
	}
	server += "}\n"
	for name, text := range map[string]string{"server.hcl": server, "profiles.hcl": c.profiles} {
		if err := os.WriteFile(filepath.Join(w.configDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if w.proc != nil {
			if err := w.proc.Stop(30 * time.Second); err != nil {
				t.Errorf("gpuvmd did not stop cleanly: %v", err)
			}
			w.keepLogs()
		}
		if t.Failed() {
			w.mu.Lock()
			defer w.mu.Unlock()
			for i, l := range w.logs {
				t.Logf("gpuvmd run %d:\n%s", i+1, l)
			}
		}
	})
	return w
}

// start starts gpuvmd on the world with extra environment (KEY=VALUE) and
// makes w.cl its admin client.
func (w *world) start(env ...string) {
	w.t.Helper()
	if w.proc != nil {
		w.t.Fatal("gpuvmd already runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := daemon.Start(ctx, daemon.Config{
		Args: append([]string{"--config", w.configDir, "--state-dir", w.state, "--database", w.database,
			"--libvirt-uri", w.uri, "--simulate", w.preset}, w.args...),
		Env: append([]string{"GPUVM_TEST_DOMAIN_PREFIX=" + w.prefix}, env...),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.proc = p
	token, err := os.ReadFile(filepath.Join(w.state, "admin.token"))
	if err != nil {
		w.t.Fatalf("gpuvmd wrote no admin token: %v", err)
	}
	cl, err := client.New(p.URL(), strings.TrimSpace(string(token)))
	if err != nil {
		w.t.Fatal(err)
	}
	cl.PollMin, cl.PollMax = 20*time.Millisecond, 250*time.Millisecond
	w.cl = cl
}

func (w *world) keepLogs() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logs = append(w.logs, w.proc.Logs())
}

// kill SIGKILLs gpuvmd (and its plugins).
func (w *world) kill() {
	w.t.Helper()
	if err := w.proc.Kill(); err != nil {
		w.t.Fatal(err)
	}
	w.keepLogs()
	w.proc, w.cl = nil, nil
}

// allLogs is the log of every gpuvmd run so far, the running one too.
func (w *world) allLogs() string {
	w.mu.Lock()
	out := strings.Join(w.logs, "")
	w.mu.Unlock()
	if w.proc != nil {
		out += w.proc.Logs()
	}
	return out
}

// ctx is a context for one step of a test.
func (w *world) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	w.t.Cleanup(cancel)
	return ctx
}

// create asks for a VM and returns it as the API answered.
func (w *world) create(profile, name string) api.VM {
	w.t.Helper()
	resp, err := w.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: profile, Name: name}, "")
	if err != nil {
		w.t.Fatalf("create %s from %s: %v", name, profile, err)
	}
	return resp.VM
}

// waitState waits until the VM is in state, failing on any other settled
// state.
func (w *world) waitState(id, state string, within time.Duration) api.VM {
	w.t.Helper()
	ctx := w.ctx(within)
	for {
		vm, err := w.cl.GetVM(ctx, id)
		if err != nil {
			w.t.Fatalf("waiting for VM %s to be %s: %v", id, state, err)
		}
		if vm.State == state {
			return *vm
		}
		if vm.State == client.StateFailed || (vm.State == client.StateDeleted && state != client.StateDeleted) {
			w.t.Fatalf("VM %s is %s (%s), not %s", id, vm.State, vm.Reason, state)
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("VM %s is %s (phase %q, %s) after %v, not %s", id, vm.State, vm.Phase, vm.Reason, within, state)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// deleteVM deletes a VM and waits until it is deleted and its operation done.
func (w *world) deleteVM(id string) {
	w.t.Helper()
	op, err := w.cl.DeleteVM(w.ctx(30*time.Second), id)
	if err != nil {
		w.t.Fatalf("delete VM %s: %v", id, err)
	}
	w.waitOperation(op.ID, time.Minute)
	w.waitState(id, client.StateDeleted, time.Minute)
}

func (w *world) waitOperation(id string, within time.Duration) api.Operation {
	w.t.Helper()
	op, err := w.cl.WaitOperation(w.ctx(within), id, nil)
	if err != nil {
		w.t.Fatalf("operation %s: %v", id, err)
	}
	if op.State != "done" {
		w.t.Fatalf("operation %s (%s) is %s: %s", id, op.Kind, op.State, op.Error)
	}
	return *op
}

// simHost is the simulated host's whole state, canonically encoded.
func (w *world) simHost() string {
	w.t.Helper()
	h, err := sim.Open(sim.StateDir(w.state, w.preset), w.preset)
	if err != nil {
		w.t.Fatal(err)
	}
	b, err := h.Snapshot()
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// libvirtState is what libvirt holds of this world: its domains (by name)
// and the volumes of its pool named after them.
type libvirtState struct {
	domains map[string]hypervisor.Info
	volumes []string
}

func (w *world) libvirtState(hv *hypervisor.Conn) libvirtState {
	w.t.Helper()
	ctx := w.ctx(30 * time.Second)
	all, err := hv.List(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	s := libvirtState{domains: map[string]hypervisor.Info{}}
	for _, d := range all {
		if strings.HasPrefix(d.Name, w.prefix) {
			s.domains[d.Name] = d
		}
	}
	vols, err := hv.Volumes(ctx, w.pool)
	if err != nil {
		w.t.Fatalf("volumes of pool %s: %v", w.pool, err)
	}
	for _, v := range vols {
		if strings.HasPrefix(v, w.prefix) {
			s.volumes = append(s.volumes, v)
		}
	}
	slices.Sort(s.volumes)
	return s
}

func (s libvirtState) String() string {
	var names []string
	for n, d := range s.domains {
		names = append(names, fmt.Sprintf("%s (vm %s, %s)", n, d.Metadata.VMID, d.State))
	}
	slices.Sort(names)
	return fmt.Sprintf("domains %v, volumes %v", names, s.volumes)
}

// sameLibvirt fails unless libvirt holds what it held before.
func (w *world) sameLibvirt(before, after libvirtState) {
	w.t.Helper()
	if before.String() != after.String() {
		w.t.Errorf("libvirt changed:\nbefore: %s\nafter:  %s", before, after)
	}
}

// sameHost fails unless the simulated host is as it was.
func (w *world) sameHost(before, after string) {
	w.t.Helper()
	if before != after {
		diff := jsonDiff(before, after, 20)
		if len(diff) == 0 {
			diff = []string{"before: " + before, "after:  " + after}
		}
		w.t.Errorf("the simulated host changed:\n%s", strings.Join(diff, "\n"))
	}
}

// inventory is the live inventory gpuvmd serves.
func (w *world) inventory() *api.HostInventory {
	w.t.Helper()
	inv, err := w.cl.GPUs(w.ctx(30 * time.Second))
	if err != nil {
		w.t.Fatal(err)
	}
	return inv
}

// devicesOf lists the managed devices of the inventory by VM.
func devicesOf(inv *api.HostInventory) map[string][]api.Device {
	out := map[string][]api.Device{}
	for _, d := range inv.Devices {
		if d.Managed {
			out[d.VMUUID] = append(out[d.VMUUID], d)
		}
	}
	return out
}

// openStore opens the world's database as gpuvmd does.
func (w *world) openStore() *store.Store {
	w.t.Helper()
	cfg := store.Config{Driver: store.DriverSQLite, DSN: w.database, Logger: quiet()}
	if strings.HasPrefix(w.database, "postgres://") {
		cfg.Driver = store.DriverPostgres
	}
	return storetest.Open(w.t, cfg)
}

// liveStates are the VM states that may hold GPU slots.
var liveStates = []string{"allocating", "creating", "running", "stopping", "stopped", "deleting"}

// checkSlots checks the database's allocations: no unit of a GPU is held by
// two live allocations, the allocation_slots table (whose primary key is
// the invariant) holds exactly the units of the live allocations, and
// every live allocation belongs to a live VM. It returns the live
// allocations.
func (w *world) checkSlots() []store.Allocation {
	w.t.Helper()
	st := w.openStore()
	defer st.Close()
	ctx := w.ctx(time.Minute)
	live, err := st.ListLiveAllocations(ctx, "")
	if err != nil {
		w.t.Fatal(err)
	}
	held := map[string]int64{}
	for _, a := range live {
		keys, err := slotClaim(a).SlotKeys()
		if err != nil {
			w.t.Errorf("allocation %d (%s on %s): %v", a.ID, a.Slot, a.GPUAddress, err)
			continue
		}
		for _, k := range keys {
			unit := a.Host + "/" + a.GPUAddress + "/" + k
			if other, ok := held[unit]; ok {
				w.t.Errorf("slot given twice: %s is held by allocations %d and %d", unit, other, a.ID)
			}
			held[unit] = a.ID
		}
		vm, err := st.GetVM(ctx, a.VMID)
		if err != nil {
			w.t.Errorf("allocation %d: vm %s: %v", a.ID, a.VMID, err)
			continue
		}
		if !slices.Contains(liveStates, vm.State) {
			w.t.Errorf("allocation %d (%s on %s) is live, but its VM %s is %s", a.ID, a.Slot, a.GPUAddress, vm.ID, vm.State)
		}
	}
	rows := w.slotRows()
	inTable := map[string]int64{}
	for _, r := range rows {
		inTable[r.Host+"/"+r.GPUAddress+"/"+r.SlotKey] = r.AllocationID
	}
	if !maps.Equal(held, inTable) {
		w.t.Errorf("allocation_slots holds %v; the live allocations hold %v", inTable, held)
	}
	return live
}

// slotRows reads the allocation_slots table directly (the store keeps it to
// itself).
func (w *world) slotRows() []store.AllocationSlot {
	w.t.Helper()
	var d gorm.Dialector
	if strings.HasPrefix(w.database, "postgres://") {
		d = postgres.Open(w.database)
	} else {
		d = sqlite.Open(w.database + "?_busy_timeout=10000")
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: gormlogger.Discard})
	if err != nil {
		w.t.Fatalf("open the database: %v", err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	var rows []store.AllocationSlot
	if err := db.WithContext(w.ctx(time.Minute)).Find(&rows).Error; err != nil {
		w.t.Fatalf("read allocation_slots: %v", err)
	}
	return rows
}

// slotClaim is the claim an allocation was made from.
func slotClaim(a store.Allocation) store.SlotClaim {
	c := store.SlotClaim{Host: a.Host, GPUAddress: a.GPUAddress, Backend: a.Backend, Kind: a.Kind, Profile: a.Profile,
		PlacementStart: a.PlacementStart, PlacementSize: a.PlacementSize}
	if vf, ok := strings.CutPrefix(a.Slot, "vf:"); ok {
		c.VF = vf
	}
	if i, ok := strings.CutPrefix(a.Slot, "vgpu:"); ok {
		c.Index, _ = strconv.Atoi(i)
	}
	return c
}

// noErrors fails when gpuvmd logged a line that no run of these tests
// should see.
func (w *world) noErrors(allowed ...string) {
	w.t.Helper()
	for _, line := range strings.Split(w.allLogs(), "\n") {
		bad := strings.Contains(line, "database is locked") || strings.Contains(line, "SQLSTATE") ||
			strings.Contains(line, "panic") || strings.Contains(line, "level=ERROR")
		if !bad {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || strings.Contains(line, a)
		}
		if !ok {
			w.t.Errorf("gpuvmd logged: %s", line)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
