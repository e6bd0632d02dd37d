package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func virtiofsWarnings(t *testing.T, st *store.Store, vmID string) []api.VMWarningPayload {
	t.Helper()
	ns, err := notices(context.Background(), st, vmID)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.VMWarningPayload
	for _, n := range ns {
		if n.Kind == api.WarningVirtiofs {
			out = append(out, n)
		}
	}
	return out
}

// A running VM whose virtiofs daemon is gone (its pid file names a process
// the process table no longer has) is marked and its owner told, once;
// one whose daemon lives is left alone. The pid files and the process table
// are a temp dir; the domain is the test driver's.
func TestVirtiofsDaemonDeath(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	root := t.TempDir()
	dirs := homes.LibvirtDirs{StateDir: filepath.Join(root, "run"), LibDir: filepath.Join(root, "lib"), Proc: filepath.Join(root, "proc")}
	newOrch := func() *Orchestrator {
		return New(Config{Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg }, Host: "test-host",
			DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log, Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second},
			WithLibvirtDirs(dirs))
	}
	o := newOrch()
	dead, _ := e.submit("ann", "l40s-seat", "dead")
	live, _ := e.submit("bob", "l40s-seat", "live")
	o.Drain(ctx)
	pidFile := func(vmID, alias string, pid int) {
		info, err := e.hv.Lookup(ctx, vmID)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.hv.DomainID(ctx, vmID)
		if err != nil || id <= 0 {
			t.Fatalf("domain id of %s: %d, %v", vmID, id, err)
		}
		short := strconv.Itoa(id) + "-" + info.Name[:min(20, len(info.Name))]
		writeFile(t, filepath.Join(dirs.LibDir, "domain-"+short, alias+"-fs.pid"), strconv.Itoa(pid)+"\n")
	}
	pidFile(dead.ID, "fs0", 4242) // no /proc/4242
	pidFile(live.ID, "fs0", 5151)
	writeFile(t, filepath.Join(dirs.Proc, "5151", "comm"), "virtiofsd\n")
	writeFile(t, filepath.Join(dirs.Proc, "5151", "stat"), "5151 (virtiofsd) S 1")

	for range 2 {
		if _, err := o.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := e.vm(dead.ID)
	if got.State != store.VMRunning || !strings.HasPrefix(got.StateReason, VirtiofsReasonPrefix) ||
		!strings.Contains(got.StateReason, "process 4242 is gone") || !strings.Contains(got.StateReason, "gpuvm stop dead") ||
		!strings.Contains(got.StateReason, "safe on the host") {
		t.Fatalf("dead VM: %s %q", got.State, got.StateReason)
	}
	ws := virtiofsWarnings(t, e.st, dead.ID)
	if len(ws) != 1 || ws[0].Action != api.NoticeNone || ws[0].Reason != got.StateReason {
		t.Fatalf("warnings %+v", ws)
	}
	if l := e.vm(live.ID); strings.HasPrefix(l.StateReason, VirtiofsReasonPrefix) || len(virtiofsWarnings(t, e.st, live.ID)) != 0 {
		t.Fatalf("live VM marked: %q", l.StateReason)
	}
	// A gpuvmd started again does not say it twice.
	if _, err := newOrch().Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := virtiofsWarnings(t, e.st, dead.ID); len(ws) != 1 {
		t.Fatalf("after a restart: %d warnings", len(ws))
	}
	// The live one's daemon dies too (its pid taken by another program).
	writeFile(t, filepath.Join(dirs.Proc, "5151", "comm"), "bash\n")
	if _, err := o.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := virtiofsWarnings(t, e.st, live.ID); len(ws) != 1 || !strings.Contains(ws[0].Reason, "5151 is now bash") {
		t.Fatalf("live VM after its daemon died: %+v", ws)
	}
}

// Between reconciles (an hour apart here), the watch finds a dead daemon
// within its interval once homes are configured.
func TestVirtiofsWatchBetweenReconciles(t *testing.T) {
	e := newEnv(t, "l40sx4")
	e.cfg.Server.Storage.Homes.Root = t.TempDir()
	root := t.TempDir()
	dirs := homes.LibvirtDirs{StateDir: filepath.Join(root, "run"), LibDir: filepath.Join(root, "lib"), Proc: filepath.Join(root, "proc")}
	o := New(Config{Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg }, Host: "test-host",
		DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log, Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
		ReconcileEvery: time.Hour, VirtiofsCheck: 20 * time.Millisecond},
		WithLibvirtDirs(dirs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vm, _ := e.submit("ann", "l40s-seat", "dead")
	o.Drain(ctx)
	info, err := e.hv.Lookup(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.hv.DomainID(ctx, vm.ID)
	if err != nil || id <= 0 {
		t.Fatalf("domain id: %d, %v", id, err)
	}
	writeFile(t, filepath.Join(dirs.LibDir, "domain-"+strconv.Itoa(id)+"-"+info.Name[:min(20, len(info.Name))], "fs0-fs.pid"), "4242\n")
	done := make(chan struct{})
	go func() { defer close(done); o.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(e.vm(vm.ID).StateReason, VirtiofsReasonPrefix) {
		if time.Now().After(deadline) {
			t.Fatalf("not marked by the watch: %q", e.vm(vm.ID).StateReason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ws := virtiofsWarnings(t, e.st, vm.ID); len(ws) != 1 {
		t.Fatalf("warnings %+v", ws)
	}
}

// The portal recognises the reason by its start: both say the same.
func TestPortalKnowsVirtiofsReason(t *testing.T) {
	b, err := os.ReadFile("../portal/assets/pages/vms.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "'"+VirtiofsReasonPrefix+"'") {
		t.Fatalf("pages/vms.js does not name %q", VirtiofsReasonPrefix)
	}
}
