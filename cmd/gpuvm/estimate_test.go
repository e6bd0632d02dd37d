package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestDescribeEstimate(t *testing.T) {
	now := time.Date(2026, 3, 2, 13, 45, 0, 0, time.Local)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	yes, no := true, false
	cases := []struct {
		name string
		vm   api.VM
		want string
	}{
		{"certain, soon", api.VM{State: "queued", EstimatedStart: at(35 * time.Minute), EstimatedStartUncertain: &no, EstimatedStartNote: "when 1 running VM's lease ends"},
			"14:20 (in 35 min)"},
		{"uncertain", api.VM{State: "queued", EstimatedStart: at(35 * time.Minute), EstimatedStartUncertain: &yes,
			EstimatedStartNote: "uncertain: leases may be extended; when 2 running VMs' leases end"}, "14:20 (in 35 min, uncertain: leases may be extended)"},
		{"two reasons", api.VM{State: "queued", EstimatedStart: at(3 * time.Hour), EstimatedStartUncertain: &yes,
			EstimatedStartNote: "uncertain: leases may be extended, requests asked later may go first; when 1 running VM's lease ends"},
			"16:45 (in 3h, uncertain: leases may be extended, requests asked later may go first)"},
		{"another day", api.VM{State: "queued", EstimatedStart: at(26 * time.Hour), EstimatedStartUncertain: &yes, EstimatedStartNote: "uncertain: it is more than a day ahead; x"},
			now.Add(26*time.Hour).Format("Mon 2 Jan 15:04") + " (in 26h, uncertain: it is more than a day ahead)"},
		{"now", api.VM{State: "queued", EstimatedStart: at(0), EstimatedStartUncertain: &no}, "13:45 (at the next scheduling round)"},
		{"unknown", api.VM{State: "queued", EstimatedStartNote: "no estimate: no GPU here can ever give H100-4C"}, "unknown (no GPU here can ever give H100-4C)"},
		{"none given", api.VM{State: "queued"}, ""},
		{"not queued", api.VM{State: "running", EstimatedStart: at(time.Hour)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := describeEstimate(c.vm, now); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// estimateServer answers GET /v1/vms/v1 with the VMs of script in turn
// (the last one after), and POST /v1/vms with v1 queued.
func estimateServer(t *testing.T, script []api.VM) string {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		base := api.VM{ID: "v1", Name: "box", Owner: "ann", Profile: "whole", Hours: 2}
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/vms":
			base.State = "queued"
			w.WriteHeader(202)
			json.NewEncoder(w).Encode(api.CreateVMResponse{VM: base, Operation: api.Operation{ID: "o1", VMID: "v1", Kind: "create", State: "pending"}})
		case r.Method == "GET" && (r.URL.Path == "/v1/vms/v1" || r.URL.Path == "/v1/vms/box"):
			vm := script[min(n, len(script)-1)]
			n++
			vm.ID, vm.Name, vm.Owner, vm.Profile, vm.Hours = base.ID, base.Name, base.Owner, base.Profile, base.Hours
			json.NewEncoder(w).Encode(vm)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// clockOf is how gpuvm writes the time of an estimated start: the clock
// time today, with the day once it is another day (a test run late in the
// evening).
func clockOf(at time.Time) string {
	at, now := at.Local(), time.Now().Local()
	if y, m, d := at.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return at.Format("15:04")
	}
	return at.Format("Mon 2 Jan 15:04")
}

func TestShowEstimate(t *testing.T) {
	at := time.Now().Add(35*time.Minute + 20*time.Second).Truncate(time.Second)
	yes := true
	url := estimateServer(t, []api.VM{{State: "queued", Phase: "waiting for a GPU", QueuePosition: 2, EstimatedStart: &at, EstimatedStartUncertain: &yes,
		EstimatedStartNote: "uncertain: leases may be extended; when 1 running VM's lease ends"}})
	c := newCLI(t, map[string]string{"GPUVM_URL": url, "GPUVM_TOKEN": "t"})
	out, errOut, code := c.run("show", "box")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "Expected start:  " + clockOf(at) + " (in 35 min, uncertain: leases may be extended)\n"
	if !strings.Contains(out, want) {
		t.Errorf("show lacks %q:\n%s", want, out)
	}
}

func TestCreateWaitEstimate(t *testing.T) {
	at := time.Now().Add(2*time.Hour + 30*time.Second).Truncate(time.Second)
	later := at.Add(time.Hour)
	no := false
	url := estimateServer(t, []api.VM{
		{State: "queued", Phase: "waiting for a GPU", QueuePosition: 1, EstimatedStart: &at, EstimatedStartUncertain: &no, EstimatedStartNote: "when 1 running VM's lease ends"},
		// Only the estimate changes: the waiter is told.
		{State: "queued", Phase: "waiting for a GPU", QueuePosition: 1, EstimatedStart: &later, EstimatedStartUncertain: &no, EstimatedStartNote: "when 2 running VMs' leases end"},
		{State: "failed", Reason: "the image is missing"},
	})
	c := newCLI(t, map[string]string{"GPUVM_URL": url, "GPUVM_TOKEN": "t"})
	c.term = &terminal{in: strings.NewReader(""), outTTY: false}
	out, _, _ := c.run("create", "whole", "--wait")
	for _, w := range []string{
		"queued #1: waiting for a GPU; expected start " + clockOf(at) + " (in 2h)\n",
		"queued #1: waiting for a GPU; expected start " + clockOf(later) + " (in 3h)\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("create --wait lacks %q:\n%s", w, out)
		}
	}
}
