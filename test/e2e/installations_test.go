package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// needSystemLibvirt skips unless the real libvirtd may be used (as
// TestRealLibvirtTinyGuest).
func needSystemLibvirt(t *testing.T) *hypervisor.Conn {
	t.Helper()
	if testing.Short() {
		t.Skip("boots guests under QEMU; skipped with -short")
	}
	if os.Getenv("GPUVM_SKIP_SYSTEM_TEST") == "1" {
		t.Skip("GPUVM_SKIP_SYSTEM_TEST=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: qemu:///system, and files QEMU (another user) may read")
	}
	return libvirt(t, systemURI)
}

// orphans lists what the world's gpuvmd reports as orphans, by kind.
func (w *world) orphans() (string, map[string][]api.Orphan) {
	w.t.Helper()
	list, err := w.cl.Orphans(w.ctx(30 * time.Second))
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string][]api.Orphan{}
	for _, o := range list.Items {
		out[o.Kind] = append(out[o.Kind], o)
	}
	return list.Installation, out
}

// untouched fails when the world's gpuvmd logged that it removed
// something it took for leaked.
func (w *world) untouched() {
	w.t.Helper()
	for _, line := range strings.Split(w.allLogs(), "\n") {
		if strings.Contains(line, "deleting a leaked domain") || strings.Contains(line, "removing a leaked device") {
			w.t.Errorf("gpuvmd removed something: %s", line)
		}
	}
}

// Two gpuvmds with databases of their own — two installations — on one
// real libvirtd, with the same domain prefix and storage pool (a test
// instance pointed at a production host): each creates the tiny guest,
// each is SIGKILLed and restarted in turn, and neither ever touches the
// other's domain or volumes; each reports the other's domain as an orphan
// of another installation, not adoptable. Then each deletes its own VM and
// libvirt is as before.
func TestTwoInstallationsOnOneLibvirtd(t *testing.T) {
	hv := needSystemLibvirt(t)
	tiny := setUpTinyGuest(t, hv)
	a := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: tiny.profiles})
	b := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: tiny.profiles})
	b.prefix = a.prefix // the same names: only the installation tells them apart
	lvBefore := a.libvirtState(hv)

	a.start()
	va := a.create("tiny-mig", "alpha")
	a.waitState(va.ID, client.StateRunning, 3*time.Minute)
	b.start()
	vb := b.create("tiny-mig", "beta")
	b.waitState(vb.ID, client.StateRunning, 3*time.Minute)
	domA, domB := a.domainOf(hv, va.ID), b.domainOf(hv, vb.ID)

	volumes := a.libvirtState(hv).volumes
	if len(volumes) == 0 {
		t.Fatal("the two VMs have no volumes")
	}
	check := func(when string) {
		t.Helper()
		for _, x := range []struct {
			w      *world
			own    api.VM
			other  hypervisor.Info
			theirs string
		}{{a, va, domB, "b"}, {b, vb, domA, "a"}} {
			got := x.w.waitState(x.own.ID, client.StateRunning, time.Minute)
			if got.ID != x.own.ID {
				t.Fatalf("%s: %+v", when, got)
			}
			inst, orphans := x.w.orphans()
			doms := orphans[api.OrphanDomain]
			if len(doms) != 1 || doms[0].UUID != x.other.UUID || doms[0].Adoptable || doms[0].Installation == "" || doms[0].Installation == inst {
				t.Errorf("%s: orphan domains %+v, want only %s's domain %s, of another installation", when, doms, x.theirs, x.other.Name)
			}
			if len(orphans[api.OrphanVolume]) != 0 || len(orphans[api.OrphanDevice]) != 0 {
				t.Errorf("%s: orphans %+v", when, orphans)
			}
		}
		for _, d := range []hypervisor.Info{domA, domB} {
			info, err := hv.Lookup(a.ctx(30*time.Second), d.UUID)
			if err != nil || !info.Active() {
				t.Fatalf("%s: domain %s: %+v, %v", when, d.Name, info, err)
			}
		}
		if got := a.libvirtState(hv).volumes; !slices.Equal(got, volumes) {
			t.Errorf("%s: volumes %v, want the two VMs' %v", when, got, volumes)
		}
	}
	check("both running")
	a.kill()
	a.start()
	check("after A was killed and restarted")
	b.kill()
	b.start()
	check("after B was killed and restarted")
	a.untouched()
	b.untouched()

	a.deleteVM(va.ID)
	if _, err := hv.Lookup(a.ctx(30*time.Second), domB.UUID); err != nil {
		t.Fatalf("A's delete touched B's domain: %v", err)
	}
	b.deleteVM(vb.ID)
	a.sameLibvirt(lvBefore, a.libvirtState(hv))
	a.noErrors()
	b.noErrors()
}

// A backup made while gpuvmd serves (gpuvmd backup), restored later on the
// running host with gpuvmd restore --force: nothing is deleted. The VM
// made after the backup keeps its domain, its volumes and its MIG device
// (the host's ledgers are kept by the restore), all reported as orphans of
// this installation; the domain is adoptable, and adopting it makes it a
// VM again that deletes like any other.
func TestRestoreOlderDatabase(t *testing.T) {
	hv := needSystemLibvirt(t)
	tiny := setUpTinyGuest(t, hv)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: tiny.profiles})
	hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)
	w.start()
	old := w.create("tiny-mig", "old")
	w.waitState(old.ID, client.StateRunning, 3*time.Minute)
	archive := filepath.Join(t.TempDir(), "gpuvm.tar.gz")
	w.gpuvmd("backup", "--to", archive)
	newer := w.create("tiny-mig", "newer")
	w.waitState(newer.ID, client.StateRunning, 3*time.Minute)
	dom := w.domainOf(hv, newer.ID)
	w.stop()
	lvWithBoth, hostWithBoth := w.libvirtState(hv), w.simHost()

	out := w.gpuvmd("restore", "--from", archive, "--force")
	if !strings.Contains(out, "Kept as they were") || !strings.Contains(out, "mig.json") {
		t.Errorf("restore did not keep the host's ledgers:\n%s", out)
	}
	w.start()
	w.waitState(old.ID, client.StateRunning, time.Minute)
	if _, err := w.cl.GetVM(w.ctx(30*time.Second), newer.ID); err == nil {
		t.Fatal("the older database knows the newer VM")
	}
	inst, orphans := w.orphans()
	doms, devs := orphans[api.OrphanDomain], orphans[api.OrphanDevice]
	if len(doms) != 1 || doms[0].UUID != dom.UUID || !doms[0].Adoptable || doms[0].Installation != inst || doms[0].Owner != "admin" {
		t.Fatalf("orphan domains %+v, want the newer VM's, adoptable", doms)
	}
	if len(devs) != 1 || devs[0].VMID != newer.ID {
		t.Fatalf("orphan devices %+v, want the newer VM's MIG device", devs)
	}
	w.sameLibvirt(lvWithBoth, w.libvirtState(hv))
	w.sameHost(hostWithBoth, w.simHost())
	w.untouched()

	adopted, err := w.cl.AdoptOrphan(w.ctx(time.Minute), doms[0].ID, api.AdoptRequest{Owner: "admin", Name: "newer"})
	if err != nil {
		t.Fatal(err)
	}
	if adopted.ID != newer.ID || adopted.State != client.StateRunning || len(adopted.GPUs) != 1 {
		t.Fatalf("adopted %+v", adopted)
	}
	if _, orphans := w.orphans(); len(orphans) != 0 {
		t.Fatalf("orphans after the adoption: %+v", orphans)
	}
	w.deleteVM(newer.ID)
	w.deleteVM(old.ID)
	w.sameLibvirt(lvBefore, w.libvirtState(hv))
	w.sameHost(hostBefore, w.simHost())
	if allocs := w.checkSlots(); len(allocs) != 0 {
		t.Errorf("%d live allocations at the end", len(allocs))
	}
	w.noErrors()
}

// gpuvmd runs a gpuvmd subcommand on the world (its state directory,
// configuration and database) and returns what it printed; it fails the
// test unless it exits 0.
func (w *world) gpuvmd(sub string, args ...string) string {
	w.t.Helper()
	bin, err := daemon.Gpuvmd()
	if err != nil {
		w.t.Fatal(err)
	}
	args = append([]string{sub, "--state-dir", w.state, "--config", w.configDir, "--database", w.database}, args...)
	out, err := exec.CommandContext(w.ctx(2*time.Minute), bin, args...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("gpuvmd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stop stops gpuvmd cleanly (SIGTERM), keeping its logs.
func (w *world) stop() {
	w.t.Helper()
	if err := w.proc.Stop(30 * time.Second); err != nil {
		w.t.Fatalf("gpuvmd did not stop cleanly: %v", err)
	}
	w.keepLogs()
	w.proc, w.cl = nil, nil
}
