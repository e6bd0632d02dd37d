package fleet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// privatePostgres is a PostgreSQL cluster of the test's own (initdb into
// a temporary directory, run as the postgres user on a free port), so that
// restarting it disturbs no other test. It skips the test where that
// cannot be done (not root, PostgreSQL's binaries not installed).
type privatePostgres struct {
	t          *testing.T
	bin, dir   string
	port       int
	opts, logf string
}

func newPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("restarting PostgreSQL under load needs a cluster of the test's own, which needs root (to run it as the postgres user)")
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(bins)
	if len(bins) == 0 {
		t.Skip("restarting PostgreSQL under load needs initdb (apt-get install postgresql)")
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Skip("restarting PostgreSQL under load needs runuser (util-linux)")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("restarting PostgreSQL under load needs the postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	dir, err := os.MkdirTemp("", "gpuvm-fleet-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := &privatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: filepath.Join(dir, "data"), port: port, logf: filepath.Join(dir, "log")}
	p.opts = fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off", port, dir)
	t.Cleanup(func() {
		_ = p.pgctl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	if err := p.run("initdb", "-D", p.dir, "-U", "gpuvm", "--auth=trust", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	if err := p.pgctl("start"); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *privatePostgres) run(tool string, args ...string) error {
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(p.bin, tool)}, args...)...)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(p.logf)
		return fmt.Errorf("%s %s: %v\n%s\n%s", tool, strings.Join(args, " "), err, out, log)
	}
	return nil
}

func (p *privatePostgres) pgctl(action string, args ...string) error {
	return p.run("pg_ctl", append([]string{action, "-D", p.dir, "-o", p.opts, "-l", p.logf, "-w", "-t", "60"}, args...)...)
}

// dsn is the cluster's database.
func (p *privatePostgres) dsn() string {
	return fmt.Sprintf("postgres://gpuvm@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// PostgreSQL restarted while the three APIs take creates and deletes: the
// nodes reconnect (API, leadership, wake-ups), no request is answered
// wrongly — a create asked for again with its idempotency key after an
// error gives the VM it made, if it made one, never a second — and nothing
// is lost: every VM accepted exists and settles, no slot is given twice.
func TestFleetPostgresRestart(t *testing.T) {
	pg := newPrivatePostgres(t)
	c := newCluster(t, storetest.SchemaDSN(t, pg.dsn()), [][2]string{{"p1", "l40sx4"}, {"p2", "l40sx4"}, {"p3", "l40sx4"}})

	type attempt struct {
		key, name string
		vm        string // the VM's ID, once an answer gave one
		failed    error  // the last error, while no answer gave one
	}
	var mu sync.Mutex
	var attempts []*attempt
	var answered, errored atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 { // two clients per node
		wg.Add(1)
		go func() {
			defer wg.Done()
			via := c.nodes[w%3]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := &attempt{key: "load-" + randHex(8), name: fmt.Sprintf("load-%d-%03d", w, i)}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				resp, err := via.cl.CreateVM(ctx, api.CreateVMRequest{Profile: "l40s-small", Name: a.name}, a.key)
				cancel()
				if err == nil {
					a.vm = resp.VM.ID
					answered.Add(1)
				} else {
					a.failed = err
					errored.Add(1)
					if p, ok := client.AsProblem(err); ok && (p.Status < 500 || p.Detail == "") {
						t.Errorf("create %s via %s: answered %d %q during the restart; want a 5xx that says why, or no answer", a.name, via.name, p.Status, p.Detail)
					}
				}
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
				// Half the VMs made go again at once: deletes under load too.
				if a.vm != "" && i%2 == 1 {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					_, _ = via.cl.DeleteVM(ctx, a.vm)
					cancel()
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	before := answered.Load()
	restartAt := time.Now()
	if err := pg.pgctl("restart", "-m", "fast"); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	restartTook := time.Since(restartAt)
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	if answered.Load() <= before {
		t.Fatalf("no create was answered after the restart (%d before, %d after)", before, answered.Load())
	}

	t.Logf("load stopped %v after the restart began", time.Since(restartAt).Round(time.Millisecond))
	// Every node serves again, and one leads.
	var leader string
	deadline := time.Now().Add(time.Minute)
	for _, n := range c.nodes {
		for {
			hs, err := n.cl.ListHosts(c.ctx(10 * time.Second))
			up := err == nil
			for _, h := range hs {
				up = up && h.State == "up"
				if h.Leader {
					leader = h.Name
				}
			}
			if up && leader != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the restart: hosts %+v, %v; leader %q", n.name, hs, err, leader)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Logf("every node serves and %s leads, %v after the restart began", leader, time.Since(restartAt).Round(time.Millisecond))
	// The creates that got no answer are asked again with their keys: a
	// create that was made gives its VM, one that was not is made now.
	for _, a := range attempts {
		if a.vm != "" {
			continue
		}
		resp, err := c.nodes[0].cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: "l40s-small", Name: a.name}, a.key)
		if err != nil {
			t.Fatalf("create %s again with its key after %v: %v", a.name, a.failed, err)
		}
		a.vm = resp.VM.ID
	}
	// Every VM the database holds, deleted ones too (the API lists live
	// ones only).
	byName := map[string][]string{}
	f := store.VMFilter{Limit: 1000, States: []string{store.VMQueued, store.VMAllocating, store.VMCreating, store.VMRunning,
		store.VMStopping, store.VMStopped, store.VMDeleting, store.VMDeleted, store.VMFailed}}
	for {
		page, err := c.st.ListVMs(c.ctx(time.Minute), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range page.VMs {
			byName[vm.Name] = append(byName[vm.Name], vm.ID)
		}
		if f.After = page.Next; page.Next == "" {
			break
		}
	}
	ids := make([]string, 0, len(attempts))
	for _, a := range attempts {
		vm, err := c.st.GetVM(c.ctx(time.Minute), a.vm)
		switch {
		case err != nil:
			t.Errorf("create %s was answered with VM %s: %v", a.name, a.vm, err)
		case len(byName[a.name]) != 1:
			t.Errorf("%d VMs named %s: %v", len(byName[a.name]), a.name, byName[a.name])
		case vm.State != store.VMDeleted:
			ids = append(ids, a.vm)
		}
	}
	c.waitVMs(c.nodes[2], 2*time.Minute, func(vms map[string]api.VM) bool {
		for _, id := range ids {
			if vm, ok := vms[id]; ok && !settled(vm) { // not listed: deleted
				return false
			}
		}
		return true
	})
	t.Logf("%d VMs settled, %v after the restart began", len(ids), time.Since(restartAt).Round(time.Millisecond))
	vms := c.vms(c.nodes[0])
	var live []string
	for _, id := range ids {
		vm, ok := vms[id]
		if !ok {
			continue // deleted meanwhile (the clients' deletes)
		}
		live = append(live, id)
		if !settled(vm) {
			t.Errorf("%s after the restart: %s (%s) %s", vm.Name, vm.State, vm.Phase, vm.Reason)
		}
	}
	c.checkSlots(vms)
	// Everything goes, then a VM asked for now is placed and runs: the
	// fleet works as before, with nothing left behind.
	var ops []string
	for i, id := range live {
		op, err := c.nodes[i%3].cl.DeleteVM(c.ctx(time.Minute), id)
		if err != nil {
			t.Fatalf("delete %s: %v", vms[id].Name, err)
		}
		ops = append(ops, op.ID)
	}
	for _, op := range ops {
		if op, err := c.nodes[0].cl.WaitOperation(c.ctx(2*time.Minute), op, nil); err != nil || op.State != "done" {
			t.Fatalf("delete: %+v, %v", op, err)
		}
	}
	t.Logf("%d VMs deleted, %v after the restart began", len(live), time.Since(restartAt).Round(time.Millisecond))
	resp, err := c.nodes[2].cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: "l40s-small", Name: "after-restart"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if vm, err := c.nodes[0].cl.WaitVM(c.ctx(time.Minute), resp.VM.ID, nil); err != nil || vm.State != client.StateRunning {
		t.Errorf("a VM asked for after the restart: %+v, %v", vm, err)
	}
	if byHost := c.checkSlots(c.vms(c.nodes[1])); len(byHost) != 1 {
		t.Errorf("live allocations after everything was deleted but one VM: %v", byHost)
	}
	for _, n := range c.nodes {
		if strings.Contains(n.proc.Logs(), "panic") {
			t.Errorf("%s panicked", n.name)
		}
	}
	t.Logf("PostgreSQL restarted in %v under load: %d creates answered, %d got an error while it was away (asked again with their keys: each gave one VM); leader afterwards: %s",
		restartTook.Round(time.Millisecond), answered.Load(), errored.Load(), leader)
}
