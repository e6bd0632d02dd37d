package hypervisor

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

func TestRebootAndForceOff(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := c.Events(ectx)
	if err != nil {
		t.Fatal(err)
	}
	spec := gpuSpec(t, kindMdev)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.ForceOff(context.Background(), spec.UUID)
		_ = c.Undefine(context.Background(), spec.UUID)
	})

	// Stopped: nothing to reboot.
	err = c.Reboot(ctx, spec.UUID)
	var ve *VMError
	if !errors.Is(err, ErrNotRunning) || !errors.As(err, &ve) || ve.VM != spec.Name || ve.Op != "reboot" {
		t.Errorf("reboot of a stopped domain: %v", err)
	}

	if err := c.Start(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if err := c.Reboot(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, spec.UUID); err != nil || st != StateRunning {
		t.Errorf("after reboot: %v, %v", st, err)
	}

	if err := c.ForceOff(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, spec.UUID); err != nil || st != StateShutoff {
		t.Errorf("after force off: %v, %v", st, err)
	}
	if err := c.ForceOff(ctx, spec.UUID); err != nil {
		t.Errorf("forcing off a stopped domain: %v", err)
	}
	// Defined (twice: then given its empty PCIe root ports), started,
	// whatever the reboot makes, then destroyed.
	var got []Event
	for len(got) == 0 || got[len(got)-1].Detail != "destroyed" {
		got = append(got, nextEvent(t, events, spec.UUID))
	}
	if got[0].Type != EventDefined || got[1].Type != EventDefined || got[1].Detail != "updated" || got[2].Type != EventStarted || got[len(got)-1].Type != EventStopped {
		t.Errorf("events %+v", got)
	}

	missing := randomUUID()
	if err := c.Reboot(ctx, missing); !IsNotFound(err) {
		t.Errorf("reboot of a missing domain: %v", err)
	}
	if err := c.ForceOff(ctx, missing); err != nil {
		t.Errorf("force off of a missing domain: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)

	withNIC := gpuSpec(t, kindNone)
	withNIC.Network = domain.Network{Name: "default", MAC: "52:54:00:AB:CD:EF"}
	bare := gpuSpec(t, kindNone)
	for _, s := range []domain.Spec{withNIC, bare} {
		if _, err := c.Define(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.ForceOff(context.Background(), s.UUID); _ = c.Undefine(context.Background(), s.UUID) })
	}

	// Stopped: no addresses, no error.
	if a, err := c.Addresses(ctx, withNIC.UUID); a != nil || err != nil {
		t.Errorf("stopped: %v, %v", a, err)
	}
	for _, s := range []domain.Spec{withNIC, bare} {
		if err := c.Start(ctx, s.UUID); err != nil {
			t.Fatal(err)
		}
	}
	// The test driver makes up a lease for every NIC.
	a, err := c.Addresses(ctx, withNIC.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 1 || a[0].Source != SourceLease || a[0].MAC != "52:54:00:ab:cd:ef" || !a[0].IP.Is4() || a[0].Prefix != 24 || a[0].Interface == "" {
		t.Errorf("addresses %+v", a)
	}
	t.Logf("test driver lease: %+v (%s)", a, a[0])
	// No NIC: no lease, and the agent has nothing either.
	if a, err := c.Addresses(ctx, bare.UUID); len(a) != 0 || err != nil {
		t.Errorf("no NIC: %v, %v", a, err)
	}

	// An agent that is not there is not an error; other failures are.
	for _, tt := range []struct {
		code    libvirt.ErrorNumber
		wantErr bool
	}{
		{libvirt.ERR_AGENT_UNRESPONSIVE, false},   // "QEMU guest agent is not connected"
		{libvirt.ERR_ARGUMENT_UNSUPPORTED, false}, // no agent channel
		{libvirt.ERR_OPERATION_INVALID, false},    // stopped meanwhile
		{libvirt.ERR_INTERNAL_ERROR, true},
	} {
		c.testHook = func(op string) error {
			if op == "interface addresses (agent)" {
				return libvirt.Error{Code: tt.code, Message: "injected " + tt.code.Error()}
			}
			return nil
		}
		a, err := c.Addresses(ctx, bare.UUID)
		c.testHook = nil
		if tt.wantErr {
			var ve *VMError
			if !errors.As(err, &ve) || ve.VM != bare.Name || !strings.Contains(err.Error(), "guest agent") {
				t.Errorf("agent failing with %v: %v; want an error naming the VM", tt.code, err)
			}
		} else if a != nil || err != nil {
			t.Errorf("agent failing with %v: %v, %v; want nothing", tt.code, a, err)
		}
	}
	// The leases are read first; their failure is an error.
	c.testHook = func(op string) error {
		if op == "interface addresses (lease)" {
			return libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR, Message: "injected lease failure"}
		}
		return nil
	}
	_, err = c.Addresses(ctx, withNIC.UUID)
	c.testHook = nil
	if err == nil || !strings.Contains(err.Error(), withNIC.Name) || !strings.Contains(err.Error(), "injected lease failure") {
		t.Errorf("lease failure: %v", err)
	}

	if _, err := c.Addresses(ctx, randomUUID()); !IsNotFound(err) {
		t.Errorf("missing domain: %v", err)
	}
}

func TestConvertAddresses(t *testing.T) {
	in := []libvirt.DomainInterface{
		{Name: "lo", Hwaddr: "00:00:00:00:00:00", Addrs: []libvirt.DomainIPAddress{
			{Type: libvirt.IP_ADDR_TYPE_IPV4, Addr: "127.0.0.1", Prefix: 8},
			{Type: libvirt.IP_ADDR_TYPE_IPV6, Addr: "::1", Prefix: 128},
		}},
		{Name: "eth1", Hwaddr: "52:54:00:00:00:02", Addrs: []libvirt.DomainIPAddress{
			{Type: libvirt.IP_ADDR_TYPE_IPV4, Addr: "10.0.0.9", Prefix: 99}, // prefix clamped
		}},
		{Name: "eth0", Hwaddr: "52:54:00:AA:BB:CC", Addrs: []libvirt.DomainIPAddress{
			{Type: libvirt.IP_ADDR_TYPE_IPV6, Addr: "fe80::5054:ff:feaa:bbcc", Prefix: 64}, // link-local
			{Type: libvirt.IP_ADDR_TYPE_IPV6, Addr: "2001:db8::5", Prefix: 64},
			{Type: libvirt.IP_ADDR_TYPE_IPV4, Addr: "192.168.122.5", Prefix: 24},
			{Type: libvirt.IP_ADDR_TYPE_IPV4, Addr: "169.254.3.4", Prefix: 16}, // link-local
			{Type: libvirt.IP_ADDR_TYPE_IPV4, Addr: "not an address", Prefix: 24},
		}},
	}
	got := convertAddresses(in, SourceAgent)
	want := []Address{
		{Interface: "eth0", MAC: "52:54:00:aa:bb:cc", IP: netip.MustParseAddr("192.168.122.5"), Prefix: 24, Source: SourceAgent},
		{Interface: "eth0", MAC: "52:54:00:aa:bb:cc", IP: netip.MustParseAddr("2001:db8::5"), Prefix: 64, Source: SourceAgent},
		{Interface: "eth1", MAC: "52:54:00:00:00:02", IP: netip.MustParseAddr("10.0.0.9"), Prefix: 32, Source: SourceAgent},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if s := want[0].String(); s != "192.168.122.5/24" {
		t.Errorf("String = %q", s)
	}
	if convertAddresses(nil, SourceLease) != nil {
		t.Error("no interfaces should give nil")
	}
}
