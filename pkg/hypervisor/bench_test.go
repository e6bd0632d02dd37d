package hypervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// BenchmarkLifecycle defines, starts, destroys and undefines a vGPU domain
// (mdev with display, the XML of package domain) on the test driver through
// pkg/hypervisor: deadlines, ownership checks, state reads and logging
// included. Compare with BenchmarkLifecycleBare.
func BenchmarkLifecycle(b *testing.B) {
	c := openTest(b)
	ctx := context.Background()
	spec := gpuSpec(b, kindMdev)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Define(ctx, spec); err != nil {
			b.Fatal(err)
		}
		if err := c.Start(ctx, spec.UUID); err != nil {
			b.Fatal(err)
		}
		if err := c.Destroy(ctx, spec.UUID); err != nil {
			b.Fatal(err)
		}
		if err := c.Undefine(ctx, spec.UUID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLifecycleBare does the same with the same XML through bare
// libvirt-go calls: the floor pkg/hypervisor adds to.
func BenchmarkLifecycleBare(b *testing.B) {
	c := openTest(b)
	spec := gpuSpec(b, kindMdev)
	xml, err := domain.XML(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.lv.DomainDefineXMLFlags(xml, libvirt.DOMAIN_DEFINE_VALIDATE)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Create(); err != nil {
			b.Fatal(err)
		}
		if err := d.Destroy(); err != nil {
			b.Fatal(err)
		}
		if err := d.Undefine(); err != nil {
			b.Fatal(err)
		}
		_ = d.Free()
	}
}

// BenchmarkBuildXML is the pure-Go part: validating a spec and writing its
// domain XML.
func BenchmarkBuildXML(b *testing.B) {
	spec := gpuSpec(b, kindMdev)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := domain.XML(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiskSnapshotDesktop: the disk snapshot and restore of a stopped
// VM of the desktop image (qemu-img on its overlay, as SnapshotDisk and
// RevertDisk run them), the overlay holding GPUVM_BENCH_OVERLAY_MIB
// (default 1024) of the VM's own writes, then 256 MiB written after the
// snapshot and thrown away by the restore. The image is the desktop
// build's: $GPUVM_DESKTOP_CACHE, else where make test keeps it as root
// (/var/cache/gpuvm/desktop) or make desktop-image in the checkout
// (test/guest/desktop/cache): skipped without one. Reports snapshot-ms and
// restore-ms.
func BenchmarkDiskSnapshotDesktop(b *testing.B) {
	dirs := []string{"/var/cache/gpuvm/desktop", filepath.Join("..", "..", "test", "guest", "desktop", "cache")}
	if d := os.Getenv("GPUVM_DESKTOP_CACHE"); d != "" {
		dirs = []string{d}
	}
	image := ""
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "desktop.qcow2")); err == nil {
			image = filepath.Join(d, "desktop.qcow2")
			break
		}
	}
	if image == "" {
		b.Skipf("no desktop image in %q (make desktop-image)", dirs)
	}
	for _, bin := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Skipf("%s not installed", bin)
		}
	}
	mib := 1024
	if v := os.Getenv("GPUVM_BENCH_OVERLAY_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("GPUVM_BENCH_OVERLAY_MIB=%q: want a positive number of MiB", v)
		}
		mib = n
	}
	ctx := context.Background()
	run := func(name string, args ...string) {
		b.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	var snap, restore time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		overlay := filepath.Join(b.TempDir(), "vm.qcow2")
		run("qemu-img", "create", "-q", "-f", "qcow2", "-b", image, "-F", "qcow2", overlay)
		run("qemu-io", "-c", fmt.Sprintf("write -P 0xab 0 %dM", mib), overlay)
		b.StartTimer()
		t0 := time.Now()
		if err := qemuImg(ctx, "snapshot", "-c", "gpuvm-bench", overlay); err != nil {
			b.Fatal(err)
		}
		snap += time.Since(t0)
		b.StopTimer()
		run("qemu-io", "-c", "write -P 0xcd 0 256M", overlay)
		b.StartTimer()
		t0 = time.Now()
		if err := qemuImg(ctx, "snapshot", "-a", "gpuvm-bench", overlay); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
	}
	b.ReportMetric(float64(snap.Milliseconds())/float64(b.N), "snapshot-ms")
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
}
