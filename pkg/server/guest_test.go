package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// liveConsoles is a hypervisor whose answers a test sets, and which counts
// the calls.
type liveConsoles struct {
	mu    sync.Mutex
	a     liveAnswers
	calls int
}

// liveAnswers are liveConsoles' answers; hang makes every call wait for its
// context.
type liveAnswers struct {
	addrs   []hypervisor.Address
	addrErr error
	con     domain.Console
	conErr  error
	hang    bool
}

func (l *liveConsoles) enter(ctx context.Context) (bool, error) {
	l.mu.Lock()
	l.calls++
	hang := l.a.hang
	l.mu.Unlock()
	if hang {
		<-ctx.Done()
		return false, fmt.Errorf("libvirt call: %w", ctx.Err())
	}
	return true, nil
}

func (l *liveConsoles) Addresses(ctx context.Context, uuid string) ([]hypervisor.Address, error) {
	if ok, err := l.enter(ctx); !ok {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.addrs, l.a.addrErr
}

func (l *liveConsoles) Console(ctx context.Context, uuid string) (domain.Console, error) {
	if ok, err := l.enter(ctx); !ok {
		return domain.Console{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.con, l.a.conErr
}

// answer sets the answers and zeroes the count.
func (l *liveConsoles) answer(a liveAnswers) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.a, l.calls = a, 0
}

func (l *liveConsoles) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// GET /v1/vms/{id} of a running VM tells its guest's addresses and how to
// open its display, read live from the hypervisor; what fails or hangs is
// left out, within the live timeout; a VM that does not run, a list, or
// another user's VM cost no hypervisor call.
func TestGetVMLiveInfo(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t, storetest.Quiet)
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	vmIn := func(owner, name, state string) *store.VM {
		vm := &store.VM{Name: name, Owner: owner, Profile: "seat", Hours: 1, DisplayPassword: "pw-" + name}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
			t.Fatal(err)
		}
		if state != store.VMQueued {
			var err error
			if vm, err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: state, Phase: api.PhaseReady}); err != nil {
				t.Fatal(err)
			}
		}
		return vm
	}
	box := vmIn("ann", "box", store.VMRunning)
	stopped := vmIn("ann", "idle", store.VMStopped)
	queued := vmIn("ann", "later", store.VMQueued)
	theirs := vmIn("bob", "theirs", store.VMRunning)

	hv := &liveConsoles{}
	srv := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}, Backends: fakeBackends{},
		Store: st, Consoles: hv, Console: ConsoleOptions{LiveTimeout: 200 * time.Millisecond}, Log: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	get := func(path string) (int, api.VM, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer ann-token")
		srv.ServeHTTP(rec, req)
		var vm api.VM
		_ = json.Unmarshal(rec.Body.Bytes(), &vm)
		return rec.Code, vm, rec.Body.String()
	}
	lease := hypervisor.Address{Interface: "vnet3", MAC: "52:54:00:ab:cd:ef", IP: netip.MustParseAddr("192.168.122.5"), Prefix: 24, Source: hypervisor.SourceLease}
	agent6 := hypervisor.Address{Interface: "eth0", IP: netip.MustParseAddr("2001:db8::5"), Prefix: 64, Source: hypervisor.SourceAgent}
	vnc := domain.Console{Protocol: domain.GraphicsVNC, Host: "127.0.0.1", Port: 5901, Password: "s3cretpw"}
	wantAddrs := []api.VMAddress{
		{IP: "192.168.122.5", Prefix: 24, Interface: "vnet3", MAC: "52:54:00:ab:cd:ef", Source: "lease"},
		{IP: "2001:db8::5", Prefix: 64, Interface: "eth0", Source: "agent"},
	}
	wantConsole := &api.VMConsole{Protocol: "vnc",
		TicketURL: "http://example.com/v1/vms/" + box.ID + "/console", VVURL: "http://example.com/v1/vms/" + box.ID + "/console.vv"}

	for _, tc := range []struct {
		name        string
		answers     liveAnswers
		wantAddrs   []api.VMAddress
		wantConsole *api.VMConsole
	}{
		{"both answer", liveAnswers{addrs: []hypervisor.Address{lease, agent6}, con: vnc}, wantAddrs, wantConsole},
		{"no address yet", liveAnswers{con: vnc}, nil, wantConsole},
		{"addresses fail", liveAnswers{addrErr: errors.New("vm box: addresses (DHCP leases): internal error"), con: vnc}, nil, wantConsole},
		{"no display", liveAnswers{addrs: []hypervisor.Address{lease, agent6}, conErr: fmt.Errorf("console: %w", domain.ErrNoConsole)}, wantAddrs, nil},
		{"domain elsewhere", liveAnswers{addrErr: fmt.Errorf("lookup: %w", hypervisor.ErrNotFound), conErr: fmt.Errorf("lookup: %w", hypervisor.ErrNotFound)}, nil, nil},
		{"hypervisor hangs", liveAnswers{hang: true}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hv.answer(tc.answers)
			began := time.Now()
			code, vm, body := get("/v1/vms/box")
			took := time.Since(began)
			if code != 200 || vm.ID != box.ID || vm.State != "running" || vm.Phase != api.PhaseReady {
				t.Fatalf("GET: %d %s", code, body)
			}
			if fmt.Sprint(vm.Addresses) != fmt.Sprint(tc.wantAddrs) {
				t.Errorf("addresses %+v, want %+v", vm.Addresses, tc.wantAddrs)
			}
			if fmt.Sprint(vm.Console) != fmt.Sprint(tc.wantConsole) {
				t.Errorf("console %+v, want %+v", vm.Console, tc.wantConsole)
			}
			if strings.Contains(body, "s3cretpw") || strings.Contains(body, box.DisplayPassword) || strings.Contains(body, "5901") {
				t.Errorf("the answer tells the display's password or port: %s", body)
			}
			if hv.count() != 2 {
				t.Errorf("%d hypervisor calls, want 2 (addresses and console)", hv.count())
			}
			if took > 2*time.Second {
				t.Errorf("GET took %v with a live timeout of 200ms", took)
			}
		})
	}

	// No live call for a VM that does not run, for lists, for others' VMs.
	hv.answer(liveAnswers{addrs: []hypervisor.Address{lease}, con: vnc})
	for _, vm := range []*store.VM{stopped, queued} {
		code, got, body := get("/v1/vms/" + vm.Name)
		if code != 200 || got.Addresses != nil || got.Console != nil {
			t.Errorf("GET %s (%s): %d %s", vm.Name, vm.State, code, body)
		}
	}
	code, _, body := get("/v1/vms")
	var list api.VMList
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %d %v %s", code, err, body)
	}
	for _, vm := range list.Items {
		if vm.Addresses != nil || vm.Console != nil {
			t.Errorf("list item %s carries live information: %+v", vm.Name, vm)
		}
	}
	if code, _, _ := get("/v1/vms/" + theirs.ID); code != 404 {
		t.Errorf("bob's VM: %d", code)
	}
	if n := hv.count(); n != 0 {
		t.Errorf("%d hypervisor calls for VMs that do not run, a list and another's VM", n)
	}
}
