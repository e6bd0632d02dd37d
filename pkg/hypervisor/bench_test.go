package hypervisor

import (
	"context"
	"testing"

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
