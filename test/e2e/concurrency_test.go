package e2e

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// halfH100 takes a 3g.40gb MIG instance: two fit on each of the h100x8
// preset's four MIG-mode GPUs, eight in all.
const halfH100 = `
profile "half-h100" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
}
`

const (
	concurrentCreates = 50
	freeSlots         = 8
)

// envPostgres names a PostgreSQL database the tests may make schemas in
// (pkg/store/testdata/start-postgres.sh prints one; `make unit` sets it).
const envPostgres = "GPUVM_TEST_POSTGRES_DSN"

// 50 creates sent at once to a gpuvmd with 8 free slots: every request is
// accepted (202) or refused with a clear problem, never a 5xx or a
// "database is locked"; exactly 8 VMs run, each on its own slot (the
// database holds no unit twice, the simulated host has exactly their 8
// devices), and the others are queued saying why. On SQLite and on
// PostgreSQL; libvirt is the test driver inside gpuvmd.
func TestConcurrentCreates(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			var dsn string
			if db == "postgres" {
				dsn = postgresSchema(t)
			}
			w := newWorld(t, worldConfig{preset: "h100x8", uri: "test:///default", profiles: halfH100, database: dsn})
			w.start()
			free := 0
			for _, g := range w.inventory().GPUs {
				for _, p := range g.MIGProfiles {
					if p.Name == "3g.40gb" {
						free += len(p.FreeStarts)
					}
				}
			}
			if free != freeSlots {
				t.Fatalf("the h100x8 preset offers %d 3g.40gb slots, the test expects %d", free, freeSlots)
			}

			begin := time.Now()
			go0 := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			accepted := map[string]api.VM{}
			refused := 0
			for i := range concurrentCreates {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-go0
					name := fmt.Sprintf("rush-%02d", i)
					resp, err := w.cl.CreateVM(w.ctx(time.Minute), api.CreateVMRequest{Profile: "half-h100", Name: name}, "")
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						accepted[resp.VM.ID] = resp.VM
						return
					}
					p, ok := client.AsProblem(err)
					switch {
					case !ok:
						t.Errorf("create %s: no answer: %v", name, err)
					case p.Status >= 500 || strings.Contains(err.Error(), "database is locked"):
						t.Errorf("create %s: %v", name, err)
					case p.Status < 400 || p.Title == "" || p.Detail == "":
						t.Errorf("create %s: refused without saying why: %+v", name, p.Problem)
					default:
						refused++
					}
				}()
			}
			close(go0)
			wg.Wait()
			answered := time.Since(begin)
			if len(accepted) < freeSlots {
				t.Fatalf("only %d of %d creates accepted (%d refused)", len(accepted), concurrentCreates, refused)
			}

			// Wait until every accepted VM has settled: running, or queued
			// with the reason of a placement that found no room.
			deadline := time.Now().Add(2 * time.Minute)
			var vms []api.VM
			var running, queued int
			for {
				var err error
				vms, err = w.cl.ListAllVMs(w.ctx(time.Minute), client.ListVMsOptions{})
				if err != nil {
					t.Fatal(err)
				}
				running, queued = 0, 0
				for _, vm := range vms {
					switch {
					case vm.State == client.StateRunning:
						running++
					case vm.State == "queued" && vm.Reason != "":
						queued++
					}
				}
				if running+queued == len(accepted) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			settled := time.Since(begin)
			if len(vms) != len(accepted) {
				t.Errorf("gpuvmd lists %d VMs, %d were accepted", len(vms), len(accepted))
			}
			if running != freeSlots || queued != len(accepted)-freeSlots {
				for _, vm := range vms {
					t.Logf("%s: %s (%s) %s", vm.Name, vm.State, vm.Phase, vm.Reason)
				}
				t.Fatalf("%d running, %d queued; want %d running, %d queued", running, queued, freeSlots, len(accepted)-freeSlots)
			}
			live := map[string]api.VM{}
			for _, vm := range vms {
				if _, ok := accepted[vm.ID]; !ok {
					t.Errorf("VM %s (%s) was not among the accepted creates", vm.Name, vm.ID)
				}
				switch vm.State {
				case client.StateRunning:
					live[vm.ID] = vm
					if len(vm.GPUs) != 1 || vm.GPUs[0].Type != "3g.40gb" || vm.GPUs[0].Device == "" {
						t.Errorf("running VM %s holds %+v", vm.Name, vm.GPUs)
					}
				default:
					if !strings.Contains(vm.Reason, "3g.40gb") || len(vm.GPUs) != 0 {
						t.Errorf("queued VM %s: reason %q, GPUs %+v", vm.Name, vm.Reason, vm.GPUs)
					}
				}
			}
			devs := devicesOf(w.inventory())
			for id := range live {
				if len(devs[id]) != 1 {
					var ds []string
					for _, d := range devs[id] {
						ds = append(ds, fmt.Sprintf("%s gi=%v ci=%v at=%v hostdev=%+v", d.ID, derefInt(d.GPUInstance), derefInt(d.ComputeInstance), derefInt(d.Placement), d.Hostdev))
					}
					t.Errorf("running VM %s has %d devices on the host: %s", id, len(devs[id]), strings.Join(ds, "; "))
				}
			}
			if len(devs) != freeSlots {
				t.Errorf("the host holds devices for %d VMs, want %d: %+v", len(devs), freeSlots, devs)
			}
			if allocs := w.checkSlots(); len(allocs) != freeSlots {
				t.Errorf("%d live allocations, want %d", len(allocs), freeSlots)
			}
			w.noErrors()
			t.Logf("%s: %d creates answered in %v (%d accepted, %d refused); %d running and %d queued after %v",
				db, concurrentCreates, answered.Round(time.Millisecond), len(accepted), refused, running, queued, settled.Round(time.Millisecond))
		})
	}
}

// postgresSchema makes a fresh schema in $GPUVM_TEST_POSTGRES_DSN's
// database, drops it when the test ends, and returns a DSN whose
// search_path is that schema (as pkg/store's tests do); it skips the test
// when the variable is not set.
func postgresSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv(envPostgres)
	if base == "" {
		t.Skipf("%s is not set: PostgreSQL skipped (as root: export %s=\"$(bash pkg/store/testdata/start-postgres.sh)\")", envPostgres, envPostgres)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("$%s must be a postgres:// URL (gpuvmd --database takes one): %q", envPostgres, base)
	}
	return storetest.SchemaDSN(t, base)
}

func derefInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
