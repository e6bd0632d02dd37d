package hypervisor

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// inactiveXML is the persistent definition of a domain, with passwords.
func inactiveXML(t *testing.T, c *Conn, uuid string) libvirtxml.Domain {
	t.Helper()
	h, err := c.lookup(testCtx(t), uuid, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	x, err := h.d.GetXMLDesc(libvirt.DOMAIN_XML_SECURE | libvirt.DOMAIN_XML_INACTIVE)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	return d
}

// withoutGPUs is a domain's XML with its hostdevs and balloon left out:
// what ReplaceHostdevs must not change.
func withoutGPUs(t *testing.T, d libvirtxml.Domain) string {
	t.Helper()
	devs := *d.Devices
	devs.Hostdevs, devs.MemBalloon = nil, nil
	d.Devices = &devs
	s, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A stopped domain gets new GPU devices of any kind in place of its own,
// with the rest of its definition (display password, metadata, disks)
// unchanged; libvirt then stores and starts it with them. Asking again for
// the devices it has changes nothing, even while it runs.
func TestReplaceHostdevs(t *testing.T) {
	c := openTest(t)
	mdev := func() []domain.Hostdev {
		return []domain.Hostdev{{Type: domain.HostdevMdev, UUID: randomUUID(), Display: true}}
	}
	vf := []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: []string{"0000:41:01.2"}}}
	whole := []domain.Hostdev{{Type: domain.HostdevPCI, Managed: true, Addresses: []string{"0000:81:00.0", "0000:81:00.1"}}}
	for _, tc := range []struct {
		from, name string
		to         []domain.Hostdev
	}{
		{kindMdev, "mdev", mdev()},
		{kindMdev, "vf", vf},
		{kindVendorVFIO, "vf", vf},
		{kindVendorVFIO, "whole", whole},
		{kindPassthrough, "mdev", mdev()},
		{kindPassthrough, "none", nil},
		{kindNone, "whole", whole},
		{kindWindows, "mdev", mdev()},
	} {
		t.Run(tc.from+" to "+tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			spec := gpuSpec(t, tc.from)
			if _, err := c.Define(ctx, spec); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.Destroy(context.Background(), spec.UUID)
				_ = c.Undefine(context.Background(), spec.UUID)
			})
			// It has run: libvirt has given its devices guest addresses.
			if err := c.Start(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Shutdown(ctx, spec.UUID, 0); err != nil {
				t.Fatal(err)
			}
			before := inactiveXML(t, c, spec.UUID)

			if err := c.ReplaceHostdevs(ctx, spec.UUID, tc.to); err != nil {
				t.Fatal(err)
			}
			after := inactiveXML(t, c, spec.UUID)
			want := spec
			want.Hostdevs = tc.to
			checkHostdevs(t, want, after.Devices.Hostdevs)
			if got := domain.GPUHostdevs(&after); len(tc.to) == 0 && len(got) != 0 {
				t.Errorf("hostdevs left: %+v", got)
			}
			balloon := map[bool]string{true: "none", false: "virtio"}[len(tc.to) > 0]
			if after.Devices.MemBalloon == nil || after.Devices.MemBalloon.Model != balloon {
				t.Errorf("memory balloon %+v, want %s", after.Devices.MemBalloon, balloon)
			}
			if b, a := withoutGPUs(t, before), withoutGPUs(t, after); b != a {
				t.Errorf("the rest of the definition changed:\nbefore %s\nafter  %s", b, a)
			}
			if g := after.Devices.Graphics; len(g) != 1 || g[0].VNC == nil || g[0].VNC.Passwd != "pw123456" {
				t.Errorf("the display password was lost: %+v", g)
			}
			if info, err := c.Lookup(ctx, spec.UUID); err != nil || !reflect.DeepEqual(info.Metadata, spec.Metadata) {
				t.Errorf("metadata %+v, %v", info.Metadata, err)
			}

			if err := c.Start(ctx, spec.UUID); err != nil {
				t.Fatal(err)
			}
			// The same devices again: nothing to do, running or not.
			if err := c.ReplaceHostdevs(ctx, spec.UUID, tc.to); err != nil {
				t.Errorf("the devices it runs with: %v", err)
			}
			if got := inactiveXML(t, c, spec.UUID); !reflect.DeepEqual(domain.GPUHostdevs(&got), domain.GPUHostdevs(&after)) {
				t.Errorf("redefined with the same devices: %+v", domain.GPUHostdevs(&got))
			}
		})
	}
}

// What ReplaceHostdevs refuses, changing nothing: other devices while the
// domain runs, devices that are not valid, a domain that is not gpuvm's or
// is missing.
func TestReplaceHostdevsRefuses(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	spec := gpuSpec(t, kindMdev)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Destroy(context.Background(), spec.UUID)
		_ = c.Undefine(context.Background(), spec.UUID)
	})
	orig := inactiveXML(t, c, spec.UUID)
	unchanged := func(what string) {
		t.Helper()
		got := inactiveXML(t, c, spec.UUID)
		if !reflect.DeepEqual(domain.GPUHostdevs(&got), domain.GPUHostdevs(&orig)) {
			t.Errorf("%s: the devices changed to %+v", what, domain.GPUHostdevs(&got))
		}
	}

	for _, tc := range []struct {
		name string
		hs   []domain.Hostdev
		want string
	}{
		{"bad mdev", []domain.Hostdev{{Type: domain.HostdevMdev, UUID: "nope"}}, `hostdevs[0].uuid: "nope" is not a UUID`},
		{"bad address", []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: []string{"41:00"}}}, "hostdevs[0].addresses[0]"},
		{"twice", []domain.Hostdev{
			{Type: domain.HostdevPCI, Addresses: []string{"0000:41:00.4"}},
			{Type: domain.HostdevPCI, Addresses: []string{"0000:41:00.4"}},
		}, "hostdevs[1].addresses[0]: 0000:41:00.4 is already given as hostdevs[0].addresses[0]"},
		{"unknown type", []domain.Hostdev{{Type: "usb"}}, `hostdevs[0].type: "usb" is neither "mdev" nor "pci"`},
	} {
		err := c.ReplaceHostdevs(ctx, spec.UUID, tc.hs)
		var se *domain.SpecError
		var ve *VMError
		if !errors.As(err, &se) || !errors.As(err, &ve) || ve.VM != spec.Name || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a spec error naming %q", tc.name, err, tc.want)
		}
		unchanged(tc.name)
	}

	if err := c.Start(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	err := c.ReplaceHostdevs(ctx, spec.UUID, []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: []string{"0000:41:00.4"}}})
	if err == nil || !strings.Contains(err.Error(), "the domain is running: its GPU devices change only while it is shut off") {
		t.Errorf("running domain: %v", err)
	}
	unchanged("running")

	if err := c.ReplaceHostdevs(ctx, randomUUID(), nil); !IsNotFound(err) {
		t.Errorf("missing domain: %v", err)
	}
	_, foreign := foreignDomain(t, c, true)
	if err := c.ReplaceHostdevs(ctx, foreign, nil); !errors.Is(err, ErrNotGpuvm) {
		t.Errorf("foreign domain: %v", err)
	}
}
