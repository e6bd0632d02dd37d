package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

func TestOpenClose(t *testing.T) {
	c := openTest(t)
	if !strings.EqualFold(c.Driver(), "test") || c.URI() != testURI {
		t.Errorf("driver %q uri %q", c.Driver(), c.URI())
	}
	if !c.Alive(testCtx(t)) {
		t.Error("connection not alive")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestOpenBadURI(t *testing.T) {
	ctx := testCtx(t)
	_, err := Open(ctx, "nonsense:///nowhere", testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "nonsense:///nowhere") {
		t.Fatalf("err = %v, want one naming the URI", err)
	}
}

// TestLifecycle runs every kind of GPU domain through define, start,
// shutdown, start, destroy and undefine, with the XML package domain builds.
func TestLifecycle(t *testing.T) {
	c := openTest(t)
	for _, kind := range gpuKinds {
		t.Run(kind, func(t *testing.T) {
			ctx := testCtx(t)
			spec := gpuSpec(t, kind)
			info, err := c.Define(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != spec.Name || info.UUID != spec.UUID || info.State != StateShutoff || !reflect.DeepEqual(info.Metadata, spec.Metadata) {
				t.Errorf("defined: %+v", info)
			}
			// What libvirt stored holds the hostdevs as built.
			x, err := c.XML(ctx, spec.UUID, false)
			if err != nil {
				t.Fatal(err)
			}
			var d libvirtxml.Domain
			if err := d.Unmarshal(x); err != nil {
				t.Fatal(err)
			}
			checkHostdevs(t, spec, d.Devices.Hostdevs)
			if d.Type != "qemu" {
				t.Errorf("type %q", d.Type)
			}

			if err := c.Start(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx, spec.UUID); err != nil {
				t.Errorf("starting a running domain: %v", err)
			}
			if st, err := c.State(ctx, spec.UUID); err != nil || st != StateRunning {
				t.Errorf("state %v, %v", st, err)
			}
			if err := c.Undefine(ctx, spec.UUID); err == nil || !strings.Contains(err.Error(), spec.Name) || !strings.Contains(err.Error(), "shut it down first") {
				t.Errorf("undefine while running: %v", err)
			}
			graceful, err := c.Shutdown(ctx, spec.UUID, 5*time.Second)
			if err != nil || !graceful {
				t.Errorf("shutdown = %v, %v", graceful, err)
			}
			if err := c.Start(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			if err := c.Destroy(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			if err := c.Destroy(ctx, spec.UUID); err != nil {
				t.Errorf("destroying a stopped domain: %v", err)
			}
			if err := c.Undefine(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			if err := c.Undefine(ctx, spec.UUID); err != nil {
				t.Errorf("undefining a missing domain: %v", err)
			}
			if _, err := c.Lookup(ctx, spec.UUID); !IsNotFound(err) {
				t.Errorf("lookup after undefine: %v", err)
			}
		})
	}
}

func checkHostdevs(t *testing.T, spec domain.Spec, hs []libvirtxml.DomainHostdev) {
	t.Helper()
	want := 0
	for _, h := range spec.Hostdevs {
		if h.Type == domain.HostdevMdev {
			want++
		} else {
			want += len(h.Addresses)
		}
	}
	if len(hs) != want {
		t.Fatalf("%d hostdevs in libvirt's XML, want %d", len(hs), want)
	}
	i := 0
	for _, h := range spec.Hostdevs {
		switch h.Type {
		case domain.HostdevMdev:
			m := hs[i].SubsysMDev
			if m == nil || m.Source.Address.UUID != h.UUID || m.Model != "vfio-pci" || m.Display != "on" || m.RamFB != "on" {
				t.Errorf("mdev hostdev as stored: %+v", m)
			}
			i++
		case domain.HostdevPCI:
			for _, a := range h.Addresses {
				p := hs[i].SubsysPCI
				want, _ := domain.ParsePCIAddress(a)
				got := domain.PCIAddress{Domain: *p.Source.Address.Domain, Bus: *p.Source.Address.Bus, Slot: *p.Source.Address.Slot, Function: *p.Source.Address.Function}
				managed := map[bool]string{true: "yes", false: "no"}[h.Managed]
				if got != want || hs[i].Managed != managed {
					t.Errorf("PCI hostdev as stored: %s managed=%q, want %s managed=%q", got, hs[i].Managed, want, managed)
				}
				i++
			}
		}
	}
}

// foreignDomain defines a domain gpuvm did not make, with bare libvirt
// calls, optionally with metadata in another namespace.
func foreignDomain(t *testing.T, c *Conn, withOtherMetadata bool) (name, uuid string) {
	t.Helper()
	name, uuid = uniqueName(t, "foreign"), randomUUID()
	meta := ""
	if withOtherMetadata {
		meta = `<metadata><app:vm xmlns:app="https://example.com/other/1"><app:id>x</app:id></app:vm></metadata>`
	}
	x := fmt.Sprintf(`<domain type="test"><name>%s</name><uuid>%s</uuid>%s<memory unit="MiB">64</memory><os><type>hvm</type></os></domain>`, name, uuid, meta)
	d, err := c.lv.DomainDefineXML(x)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Free()
	t.Cleanup(func() {
		if d, err := c.lv.LookupDomainByUUIDString(uuid); err == nil {
			_ = d.Destroy()
			_ = d.Undefine()
			_ = d.Free()
		}
	})
	return name, uuid
}

func TestListAndForeignDomains(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	fname, fuuid := foreignDomain(t, c, false)
	_, ouuid := foreignDomain(t, c, true)

	var mine []domain.Spec
	for _, kind := range []string{kindMdev, kindPassthrough} {
		s := gpuSpec(t, kind)
		if _, err := c.Define(ctx, s); err != nil {
			t.Fatal(err)
		}
		mine = append(mine, s)
		t.Cleanup(func() { _ = c.Undefine(context.Background(), s.UUID) })
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]Info{}
	for _, i := range list {
		seen[i.UUID] = i
		if i.Name == "test" || i.UUID == fuuid || i.UUID == ouuid {
			t.Errorf("List returned a domain gpuvm does not own: %s", i.Name)
		}
	}
	for _, s := range mine {
		i, ok := seen[s.UUID]
		if !ok {
			t.Errorf("List misses %s", s.Name)
			continue
		}
		if i.Metadata.VMID != s.Metadata.VMID || i.Metadata.Owner != "alice <a&b>" {
			t.Errorf("%s: metadata %+v", s.Name, i.Metadata)
		}
	}

	// Nothing gpuvm does touches someone else's domain.
	for _, uuid := range []string{fuuid, ouuid} {
		ops := map[string]func() error{
			"lookup":    func() error { _, err := c.Lookup(ctx, uuid); return err },
			"start":     func() error { return c.Start(ctx, uuid) },
			"destroy":   func() error { return c.Destroy(ctx, uuid) },
			"shutdown":  func() error { _, err := c.Shutdown(ctx, uuid, time.Second); return err },
			"undefine":  func() error { return c.Undefine(ctx, uuid) },
			"console":   func() error { _, err := c.Console(ctx, uuid); return err },
			"delete":    func() error { return c.DeleteVM(ctx, uuid, time.Second) },
			"reboot":    func() error { return c.Reboot(ctx, uuid) },
			"forceoff":  func() error { return c.ForceOff(ctx, uuid) },
			"address":   func() error { _, err := c.Addresses(ctx, uuid); return err },
			"cloudinit": func() error { _, err := c.CloudInitStatus(ctx, uuid); return err },
			"cleanup":   func() error { return c.CleanupVM(ctx, uuid, "", "p") },
			"redefine": func() error {
				s := gpuSpec(t, kindNone)
				s.UUID = uuid
				_, err := c.Define(ctx, s)
				return err
			},
		}
		for op, f := range ops {
			if err := f(); !errors.Is(err, ErrNotGpuvm) {
				t.Errorf("%s of a foreign domain: err = %v, want ErrNotGpuvm", op, err)
			}
		}
	}
	d, err := c.lv.LookupDomainByUUIDString(fuuid)
	if err != nil {
		t.Fatalf("foreign domain %s is gone: %v", fname, err)
	}
	x, _ := d.GetXMLDesc(0)
	_ = d.Free()
	if strings.Contains(x, domain.Namespace) {
		t.Error("foreign domain was redefined with gpuvm metadata")
	}
}

func TestErrorsNameTheVM(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)

	missing := randomUUID()
	err := c.Start(ctx, missing)
	var ve *VMError
	if !errors.As(err, &ve) || ve.VM != missing || ve.Op != "start" || !IsNotFound(err) {
		t.Errorf("start of a missing domain: %v", err)
	}
	if strings.Contains(err.Error(), "virError(") {
		t.Errorf("raw binding error shown to people: %v", err)
	}

	bad := gpuSpec(t, kindMdev)
	bad.Graphics.Password = "much-too-long"
	_, err = c.Define(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), bad.Name) || !strings.Contains(err.Error(), "at most 8") {
		t.Errorf("bad spec: %v", err)
	}

	// A name libvirt refuses: taken by another domain.
	first := gpuSpec(t, kindNone)
	if _, err := c.Define(ctx, first); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Undefine(context.Background(), first.UUID) })
	second := gpuSpec(t, kindNone)
	second.Name = first.Name
	_, err = c.Define(ctx, second)
	if !errors.As(err, &ve) || ve.VM != first.Name || ve.Op != "define" || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("name clash: %v", err)
	}
	if _, err := c.Lookup(ctx, second.UUID); !IsNotFound(err) {
		t.Errorf("second domain exists after a refused define: %v", err)
	}

	if _, err := c.Lookup(ctx, "not-a-uuid"); err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Errorf("lookup by a bad UUID: %v", err)
	}
}

// TestEveryCallHasADeadline blocks every libvirt call and checks that each
// public method returns with the context's error, in time.
func TestEveryCallHasADeadline(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	if err := c.EnsurePool(ctx, uniqueName(t, "pool"), dir); err != nil {
		t.Fatal(err)
	}
	spec := gpuSpec(t, kindMdev)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Undefine(context.Background(), spec.UUID) })

	release := make(chan struct{})
	var mu sync.Mutex
	ops := map[string]bool{}
	c.testHook = func(op string) error {
		mu.Lock()
		ops[op] = true
		mu.Unlock()
		<-release
		return nil
	}
	defer func() { c.testHook = nil; close(release) }()

	u := spec.UUID
	calls := map[string]func(context.Context) error{
		"Define":       func(ctx context.Context) error { _, err := c.Define(ctx, spec); return err },
		"Lookup":       func(ctx context.Context) error { _, err := c.Lookup(ctx, u); return err },
		"LookupByName": func(ctx context.Context) error { _, err := c.LookupByName(ctx, spec.Name); return err },
		"State":        func(ctx context.Context) error { _, err := c.State(ctx, u); return err },
		"List":         func(ctx context.Context) error { _, err := c.List(ctx); return err },
		"Start":        func(ctx context.Context) error { return c.Start(ctx, u) },
		"Shutdown":     func(ctx context.Context) error { _, err := c.Shutdown(ctx, u, time.Second); return err },
		"Destroy":      func(ctx context.Context) error { return c.Destroy(ctx, u) },
		"Undefine":     func(ctx context.Context) error { return c.Undefine(ctx, u) },
		"Console":      func(ctx context.Context) error { _, err := c.Console(ctx, u); return err },
		"XML":          func(ctx context.Context) error { _, err := c.XML(ctx, u, true); return err },
		"EnsurePool":   func(ctx context.Context) error { return c.EnsurePool(ctx, "p", dir) },
		"DeletePool":   func(ctx context.Context) error { return c.DeletePool(ctx, "p") },
		"CreateOverlay": func(ctx context.Context) error {
			_, err := c.CreateOverlay(ctx, Overlay{Pool: "p", Name: "v", Base: "/b", BaseFormat: "raw", SizeBytes: 1})
			return err
		},
		"UploadVolume": func(ctx context.Context) error { _, err := c.UploadVolume(ctx, "p", "v", []byte("x")); return err },
		"DeleteVolume": func(ctx context.Context) error { return c.DeleteVolume(ctx, "p", "v") },
		"VolumeExists": func(ctx context.Context) error { _, err := c.VolumeExists(ctx, "p", "v"); return err },
		"Volumes":      func(ctx context.Context) error { _, err := c.Volumes(ctx, "p"); return err },
		"Events":       func(ctx context.Context) error { _, err := c.Events(ctx); return err },
		"CreateVM": func(ctx context.Context) error {
			_, err := c.CreateVM(ctx, VMRequest{Spec: gpuSpec(t, kindNone)})
			return err
		},
		"DeleteVM":  func(ctx context.Context) error { return c.DeleteVM(ctx, u, time.Second) },
		"Reboot":    func(ctx context.Context) error { return c.Reboot(ctx, u) },
		"ForceOff":  func(ctx context.Context) error { return c.ForceOff(ctx, u) },
		"Addresses": func(ctx context.Context) error { _, err := c.Addresses(ctx, u); return err },
		"CleanupVM": func(ctx context.Context) error { return c.CleanupVM(ctx, u, spec.Name, "p") },
		"Accel":     func(ctx context.Context) error { _, err := c.Accel(ctx); return err },
		"Alive": func(ctx context.Context) error {
			if c.Alive(ctx) {
				return errors.New("alive while blocked")
			}
			return context.DeadlineExceeded
		},
	}
	for name, f := range calls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := f(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the deadline", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("returned after %v", d)
			}
		})
	}
	mu.Lock()
	if !ops["lookup domain"] || !ops["lookup pool"] {
		t.Errorf("hook saw no domain or pool calls: %v", ops)
	}
	mu.Unlock()

	// The connection's own cap applies without a context deadline.
	c2 := openTest(t, WithCallTimeout(50*time.Millisecond))
	c2.testHook = c.testHook
	start := time.Now()
	if _, err := c2.List(context.Background()); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may still complete") {
		t.Errorf("List with the call timeout: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("call cap took %v", d)
	}
	c2.testHook = nil
}

func TestEvents(t *testing.T) {
	c := openTest(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	events, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, fuuid := foreignDomain(t, c, false)
	spec := gpuSpec(t, kindVendorVFIO)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if d, err := c.lv.LookupDomainByUUIDString(fuuid); err == nil {
		_ = d.Create()
		_ = d.Destroy()
		_ = d.Free()
	}
	if err := c.Destroy(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if err := c.Undefine(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	// Defined twice: then given its empty PCIe root ports for data disks
	// (a q35 domain, once libvirt has given its devices their addresses).
	want := []EventType{EventDefined, EventDefined, EventStarted, EventStopped, EventUndefined}
	var got []EventType
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-events:
			if ev.UUID == fuuid {
				t.Errorf("event of a foreign domain delivered: %+v", ev)
				continue
			}
			if ev.UUID != spec.UUID {
				continue // another test's domain
			}
			if ev.Name != spec.Name || ev.VMID != spec.Metadata.VMID {
				t.Errorf("event %+v", ev)
			}
			got = append(got, ev.Type)
			if ev.Type == EventStopped && ev.Detail != "destroyed" {
				t.Errorf("stop detail %q", ev.Detail)
			}
		case <-timeout:
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	cancel()
	for range events { // closed once ctx ends
	}
}

func TestAccelOnTestDriver(t *testing.T) {
	c := openTest(t)
	a, err := c.Accel(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if a.Type != domain.TypeQEMU || !a.Emulated || a.Reason == "" {
		t.Errorf("test driver accel = %+v, want a software-emulation fallback with a reason", a)
	}
	forced := openTest(t, WithDomainType(domain.TypeKVM))
	if a, err := forced.Accel(testCtx(t)); err != nil || a.Type != domain.TypeKVM || a.Emulated {
		t.Errorf("forced kvm = %+v, %v", a, err)
	}
}

func TestStorage(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	pool := uniqueName(t, "pool")
	for i := 0; i < 2; i++ { // idempotent
		if err := c.EnsurePool(ctx, pool, dir); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = c.DeletePool(context.Background(), pool) })
	if err := c.EnsurePool(ctx, pool, filepath.Join(dir, "elsewhere")); err == nil || !strings.Contains(err.Error(), pool) {
		t.Errorf("pool at another directory: %v", err)
	}
	if err := c.EnsurePool(ctx, "bad/name", dir); err == nil {
		t.Error("bad pool name accepted")
	}

	// A qcow2 base: its size is read from the header.
	base := filepath.Join(t.TempDir(), "base.qcow2")
	hdr := make([]byte, 512)
	copy(hdr, "QFI\xfb")
	hdr[24+4] = 0x40 // 1 GiB at offset 24, big-endian
	if err := os.WriteFile(base, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	f, size, err := imageInfo(base)
	if err != nil || f != domain.FormatQCOW2 || size != 1<<30 {
		t.Errorf("imageInfo = %v %d %v", f, size, err)
	}
	if _, err := c.CreateOverlay(ctx, Overlay{Pool: pool, Name: "vm.qcow2", Base: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateOverlay(ctx, Overlay{Pool: pool, Name: "vm.qcow2", Base: base}); err == nil || !strings.Contains(err.Error(), "vm.qcow2") {
		t.Errorf("second overlay of the same name: %v", err)
	}
	if _, err := c.CreateOverlay(ctx, Overlay{Pool: pool, Name: "x.qcow2", Base: "/no/such/base.qcow2"}); err == nil || !strings.Contains(err.Error(), "base image") {
		t.Errorf("missing base: %v", err)
	}

	iso, err := cloudinit.Seed(cloudinit.Config{InstanceID: "i", Hostname: "h", User: "u"}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.UploadVolume(ctx, pool, "seed.iso", iso)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != len(iso) {
		t.Errorf("seed file: %d bytes, %v", len(b), err)
	}
	names, err := c.Volumes(ctx, pool)
	if err != nil || len(names) != 2 {
		t.Errorf("volumes %v, %v", names, err)
	}
	for _, v := range []string{"seed.iso", "vm.qcow2"} {
		for i := 0; i < 2; i++ { // idempotent
			if err := c.DeleteVolume(ctx, pool, v); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := c.VolumeExists(ctx, pool, v); ok || err != nil {
			t.Errorf("%s exists after delete: %v", v, err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("seed file left behind: %v", err)
	}
	if err := c.DeleteVolume(ctx, "no-such-pool", "x"); err != nil {
		t.Errorf("delete from a missing pool: %v", err)
	}
}

// TestCreateVMRollback makes each step of CreateVM fail in turn and checks
// that the error names the VM and the step, and that nothing is left.
func TestCreateVMRollback(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	pool := uniqueName(t, "pool")
	if err := c.EnsurePool(ctx, pool, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeletePool(context.Background(), pool) })
	base := filepath.Join(t.TempDir(), "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	request := func(kind string) VMRequest {
		s := gpuSpec(t, kind)
		s.Disks = nil
		return VMRequest{
			Spec: s, Pool: pool, BaseImage: base,
			Seed: &cloudinit.Config{InstanceID: s.UUID, Hostname: "vm-1", User: "alice"},
		}
	}

	tests := []struct {
		failAt string // libvirt call that fails
		step   string // step the error names
	}{
		{"create volume", "create disk overlay"},
		{"upload volume", "upload cloud-init seed"},
		{"define domain", "define"},
		{"start domain", "start"},
	}
	for _, tt := range tests {
		t.Run(tt.failAt, func(t *testing.T) {
			req := request(kindMdev)
			injected := fmt.Errorf("injected failure of %q", tt.failAt)
			var once sync.Once
			c.testHook = func(op string) error {
				var err error
				if op == tt.failAt {
					once.Do(func() { err = injected })
				}
				return err
			}
			defer func() { c.testHook = nil }()
			_, err := c.CreateVM(ctx, req)
			var ve *VMError
			if !errors.As(err, &ve) || ve.VM != req.Spec.Name || ve.Op != tt.step || !errors.Is(err, injected) {
				t.Fatalf("err = %v; want a VMError naming %q and step %q wrapping the cause", err, req.Spec.Name, tt.step)
			}
			if !strings.Contains(err.Error(), "rolled back") && !strings.Contains(err.Error(), "nothing to roll back") {
				t.Errorf("error does not tell about the rollback: %v", err)
			}
			c.testHook = nil
			assertNothingLeft(t, c, pool, dir, req)
		})
	}

	t.Run("success and delete", func(t *testing.T) {
		req := request(kindPassthrough)
		info, err := c.CreateVM(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != StateRunning || len(info.Metadata.Volumes) != 2 || info.Metadata.Volumes[0].Name != OverlayName(req.Spec.Name) {
			t.Errorf("created: %+v", info)
		}
		// A retry of the same request is safe.
		if _, err := c.CreateVM(ctx, req); err != nil {
			t.Errorf("retry: %v", err)
		}
		x, _ := c.XML(ctx, req.Spec.UUID, false)
		for _, want := range []string{OverlayName(req.Spec.Name), SeedName(req.Spec.Name), `device="cdrom"`, `managed="yes"`} {
			if !strings.Contains(strings.ReplaceAll(x, "'", `"`), want) {
				t.Errorf("domain XML lacks %s", want)
			}
		}
		if err := c.DeleteVM(ctx, req.Spec.UUID, time.Second); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, c, pool, dir, req)
		if err := c.DeleteVM(ctx, req.Spec.UUID, time.Second); err != nil {
			t.Errorf("second delete: %v", err)
		}
	})

	t.Run("name taken", func(t *testing.T) {
		first := request(kindNone)
		if _, err := c.CreateVM(ctx, first); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.DeleteVM(context.Background(), first.Spec.UUID, time.Second) }()
		second := request(kindNone)
		second.Spec.Name = first.Spec.Name
		_, err := c.CreateVM(ctx, second)
		if err == nil || !strings.Contains(err.Error(), "taken by another domain") {
			t.Fatalf("err = %v", err)
		}
		// The first VM's volumes are untouched.
		for _, v := range []string{OverlayName(first.Spec.Name), SeedName(first.Spec.Name)} {
			if ok, _ := c.VolumeExists(ctx, pool, v); !ok {
				t.Errorf("%s of the first VM is gone", v)
			}
		}
	})

	t.Run("bad seed", func(t *testing.T) {
		req := request(kindNone)
		req.Seed.Hostname = "bad_host"
		_, err := c.CreateVM(ctx, req)
		if err == nil || !strings.Contains(err.Error(), req.Spec.Name) || !strings.Contains(err.Error(), "hostname") {
			t.Fatalf("err = %v", err)
		}
		assertNothingLeft(t, c, pool, dir, req)
	})

	t.Run("missing base image", func(t *testing.T) {
		req := request(kindNone)
		req.BaseImage = "/no/such/image.qcow2"
		_, err := c.CreateVM(ctx, req)
		if err == nil || !strings.Contains(err.Error(), req.Spec.Name) || !strings.Contains(err.Error(), "/no/such/image.qcow2") {
			t.Fatalf("err = %v", err)
		}
		assertNothingLeft(t, c, pool, dir, req)
	})
}

func assertNothingLeft(t *testing.T, c *Conn, pool, dir string, req VMRequest) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := c.Lookup(ctx, req.Spec.UUID); !IsNotFound(err) {
		t.Errorf("domain left: %v", err)
	}
	if d, err := c.lv.LookupDomainByName(req.Spec.Name); err == nil {
		_ = d.Free()
		t.Errorf("a domain called %s is left", req.Spec.Name)
	} else if !isCode(err, libvirt.ERR_NO_DOMAIN) {
		t.Errorf("lookup by name: %v", err)
	}
	for _, v := range []string{OverlayName(req.Spec.Name), SeedName(req.Spec.Name)} {
		if ok, err := c.VolumeExists(ctx, pool, v); ok || err != nil {
			t.Errorf("volume %s left: %v", v, err)
		}
		if _, err := os.Stat(filepath.Join(dir, v)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("file %s left: %v", v, err)
		}
	}
}

// test:///default reports libvirt's version and its own hypervisor version
// (0.0.2), not QEMU's.
func TestVersionsTestDriver(t *testing.T) {
	c := openTest(t)
	v, err := c.Versions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.EqualFold(v.Driver, "test") || v.Library < 1000000 || v.Hypervisor != 2 {
		t.Errorf("%+v", v)
	}
}
