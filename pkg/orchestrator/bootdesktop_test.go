package orchestrator

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeDesktop answers the dials of the desktop check: refused until it is
// up, and records what was dialled.
type fakeDesktop struct {
	mu     sync.Mutex
	up     bool
	dialed []string
}

func (f *fakeDesktop) dial(ctx context.Context, network, address string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dialed = append(f.dialed, network+" "+address)
	if !f.up {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c1, c2 := net.Pipe()
	c2.Close()
	return c1, nil
}

func (f *fakeDesktop) setUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up = true
}

func (f *fakeDesktop) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.dialed) == 0 {
		return ""
	}
	return f.dialed[len(f.dialed)-1]
}

// A VM whose profile promises a desktop in the guest stays booting, saying
// so, while its guest has an address but the desktop server does not
// answer (cloud-init still setting it up), and is ready once it answers;
// one whose server never answers is ready after three boot timeouts, with
// a reason that says the desktop did not answer. A profile without a
// desktop is ready with the address, as before.
func TestBootWaitsForTheDesktop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		desktop config.Desktop
		comes   bool // the server answers at last
		timeout time.Duration
		dial    string   // the address the check dials
		want    []string // the reasons, in order, after the address came
	}{
		{"rdp that comes up", config.Desktop{Protocol: config.DesktopRDP, Port: 3390, Declared: true}, true, time.Hour, "tcp 192.168.122.7:3390",
			[]string{WaitingDesktopReason("RDP, port 3390"), ""}},
		{"sunshine that never answers", config.Desktop{Protocol: config.DesktopSunshine, Port: 47989, WebPort: 47990, Declared: true}, false, 40 * time.Millisecond, "tcp 192.168.122.7:47984",
			[]string{WaitingDesktopReason("Sunshine, port 47984"), DesktopTimeoutReason("Sunshine, port 47984", 120*time.Millisecond)}},
		{"no desktop", config.Desktop{Protocol: config.DesktopVNC}, false, time.Hour, "", []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			ctx := context.Background()
			e.cfg.Profiles["l40s-seat"].Desktop = tc.desktop
			g := newFakeGuests(e.hv)
			d := &fakeDesktop{}
			o := New(Config{
				Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
				Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
				Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
				Guests: g, BootTimeout: tc.timeout, BootCheck: 10 * time.Millisecond, DialGuest: d.dial,
			})
			vm, _ := e.submit("ann", "l40s-seat", "vm1")
			o.Drain(ctx)
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
			g.give(vm.ID, "192.168.122.7")
			o.life.checkBoots(ctx)
			if len(tc.want) == 1 {
				e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, tc.want[0])
				if got := d.last(); got != "" {
					t.Errorf("dialled %q for a profile without a desktop in the guest", got)
				}
				return
			}
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, tc.want[0])
			if got := d.last(); got != tc.dial {
				t.Errorf("dialled %q, want %q", got, tc.dial)
			}
			o.life.checkBoots(ctx) // nothing changed: the reason is not written again
			if v := e.vm(vm.ID); v.Phase != api.PhaseBooting {
				t.Fatalf("phase %q after a second look", v.Phase)
			}
			if tc.comes {
				d.setUp()
			} else {
				time.Sleep(3 * tc.timeout)
			}
			o.life.checkBoots(ctx)
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, tc.want[1])
			if got := e.phases(vm.ID); len(got) != 3 || got[0] != api.PhaseBooting || got[2] != api.PhaseReady {
				t.Errorf("phases %v, want booting, booting (waiting for the desktop), ready", got)
			}
		})
	}
}

// Booting VMs are looked at together: a guest whose desktop port drops
// packets (the look waits for its dial timeout) does not hold back the
// others. Here the older VM's desktop answers only once the younger one's
// has been dialled: looked at one after the other, the older would wait
// out its dial and stay booting.
func TestBootChecksRunTogether(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	e.cfg.Profiles["l40s-seat"].Desktop = config.Desktop{Protocol: config.DesktopRDP, Port: 3389, Declared: true}
	g := newFakeGuests(e.hv)
	younger := make(chan struct{})
	var once sync.Once
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address == "192.168.122.9:3389" {
			once.Do(func() { close(younger) })
		} else {
			select {
			case <-younger:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	}
	o := New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
		Guests: g, BootTimeout: time.Hour, BootCheck: 10 * time.Millisecond, DialGuest: dial,
	})
	older, _ := e.submit("ann", "l40s-seat", "older")
	o.Drain(ctx)
	time.Sleep(time.Millisecond) // the younger's boot begins later
	young, _ := e.submit("ann", "l40s-seat", "younger")
	o.Drain(ctx)
	g.give(older.ID, "192.168.122.8")
	g.give(young.ID, "192.168.122.9")
	o.life.checkBoots(ctx)
	e.wantPhase(older.ID, store.VMRunning, api.PhaseReady, "")
	e.wantPhase(young.ID, store.VMRunning, api.PhaseReady, "")
}
