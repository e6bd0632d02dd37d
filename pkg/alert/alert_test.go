package alert

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/pkg/webhook"
)

// hook is a webhook receiver: it records what it was sent, and fails the
// first `fail` requests with `failStatus`.
type hook struct {
	*httptest.Server
	mu         sync.Mutex
	got        []api.AlertNotification
	attempts   []string
	fail       int
	failStatus int
}

func newHook(t *testing.T) *hook {
	h := &hook{failStatus: http.StatusServiceUnavailable}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.attempts = append(h.attempts, r.Header.Get("X-Gpuvm-Attempt"))
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("webhook got %s with %q", r.Method, r.Header.Get("Content-Type"))
		}
		if h.fail > 0 {
			h.fail--
			w.WriteHeader(h.failStatus)
			return
		}
		var n api.AlertNotification
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&n); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.got = append(h.got, n)
	}))
	t.Cleanup(h.Close)
	return h
}

// take returns the notifications received since the last call.
func (h *hook) take() []api.AlertNotification {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.got
	h.got = nil
	return out
}

type fakeHealth struct {
	mu     sync.Mutex
	states map[string]string
}

func (f *fakeHealth) BackendStates(context.Context) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.states {
		out[k] = v
	}
	return out
}

// alertEnv is a monitor on a fake clock, a test source, a real store and
// a webhook receiver.
type alertEnv struct {
	t      *testing.T
	clock  *clocktest.Clock
	st     *store.Store
	src    *fixedSource
	health *fakeHealth
	hook   *hook
	mu     sync.Mutex
	rules  []*config.Alert
	mon    *monitor.Monitor
	eval   *Evaluator
	hooks  *webhook.Notifier
	log    *logtest.Buffer
}

func newAlertEnv(t *testing.T, rules ...*config.Alert) *alertEnv {
	e := &alertEnv{t: t, clock: newFakeClock(), src: &fixedSource{}, health: &fakeHealth{states: map[string]string{}}, hook: newHook(t), rules: rules}
	e.st = newStore(t, e.clock)
	for _, r := range rules {
		r.Webhook = e.hook.URL + "/" + r.Name
	}
	e.src.set(func(r *monitor.Reading) {
		r.GPUs = []monitor.GPUReading{gpuAt("0000:41:00.0"), gpuAt("0000:42:00.0")}
	})
	e.start()
	return e
}

// start (re)starts the monitor, as gpuvmd starting again.
func (e *alertEnv) start() {
	log, buf := testLog(e.t)
	e.log = buf
	e.mon = monitor.New(monitor.Config{Host: testHost, Store: e.st, Source: e.src, Settings: config.Monitor{Interval: 10 * time.Minute},
		Clock: e.clock, Log: log})
	e.hooks = webhook.New(nil, e.st, e.clock, log)
	e.hooks.SetBackoff(func(int) time.Duration { return time.Millisecond })
	e.t.Cleanup(e.hooks.Close)
	e.eval = NewEvaluator(Config{Host: testHost, Store: e.st, Rules: func() []*config.Alert {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.rules
	}, Idle: e.mon.Idle(), Backends: e.health, Notifier: e.hooks, Clock: e.clock, Log: log, Interval: 10 * time.Minute})
	e.mon.Observe(e.eval)
}

func gpuAt(addr string) monitor.GPUReading {
	g := monitor.NewGPUReading(addr)
	g.Util, g.Temperature, g.PowerWatts, g.MemUsed, g.MemTotal = 0.1, 50, 100, 1<<30, 40<<30
	return g
}

func (e *alertEnv) setGPU(addr string, fn func(g *monitor.GPUReading)) {
	e.src.set(func(r *monitor.Reading) {
		for i := range r.GPUs {
			if r.GPUs[i].Address == addr {
				fn(&r.GPUs[i])
			}
		}
	})
}

// round runs a round after d and waits for its notifications.
func (e *alertEnv) round(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	if err := e.mon.Round(context.Background()); err != nil {
		e.t.Fatalf("round at %s: %v", e.clock.Now().Format(time.TimeOnly), err)
	}
	e.hooks.Wait()
}

func (e *alertEnv) alerts(state string) []store.Alert {
	e.t.Helper()
	as, err := e.st.ListAlerts(context.Background(), store.AlertFilter{State: state})
	if err != nil {
		e.t.Fatal(err)
	}
	return as
}

// expect checks the notifications of the round: each "state subject",
// sorted.
func (e *alertEnv) expect(want ...string) []api.AlertNotification {
	e.t.Helper()
	got := e.hook.take() // delivered concurrently: in any order
	sort.Slice(got, func(i, j int) bool {
		return got[i].State+got[i].Subject+got[i].Rule < got[j].State+got[j].Subject+got[j].Rule
	})
	var have []string
	for _, n := range got {
		have = append(have, n.State+" "+n.Subject)
	}
	want = slices.Clone(want)
	sort.Strings(want)
	if strings.Join(have, ", ") != strings.Join(want, ", ") {
		e.t.Errorf("at %s notifications %q, want %q", e.clock.Now().Format(time.TimeOnly), have, want)
	}
	return got
}

func rule(name, metric string, above *float64, d time.Duration) *config.Alert {
	return &config.Alert{Name: name, Metric: metric, Above: above, Duration: d}
}

func num(v float64) *float64 { return &v }

const (
	gpu1 = testHost + "/0000:41:00.0"
	gpu2 = testHost + "/0000:42:00.0"
)

// GPU utilisation above 95% for 30 minutes fires after 30 minutes of it,
// per GPU, and resolves as soon as it stops.
func TestAlertGPUUtilization(t *testing.T) {
	e := newAlertEnv(t, rule("busy", MetricGPUUtilization, num(95), 30*time.Minute))
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Util = 0.97 })
	e.round(0)
	e.expect()
	e.round(10 * time.Minute)
	e.setGPU("0000:42:00.0", func(g *monitor.GPUReading) { g.Util = 0.99 })
	e.round(10 * time.Minute) // GPU 2 busy from here (9:20)
	e.expect()
	if len(e.alerts("")) != 0 {
		t.Fatal("fired before 30 minutes")
	}
	e.round(10 * time.Minute) // 9:30: GPU 1 has been busy 30 minutes
	got := e.expect("firing " + gpu1)
	n := got[0]
	if n.Rule != "busy" || n.Metric != MetricGPUUtilization || n.Value != 97 || n.Host != testHost || *n.Above != 95 ||
		n.DurationSeconds != 1800 || n.AlertID == 0 || !n.StartedAt.Equal(e.clock.Now()) || n.ResolvedAt != nil ||
		!strings.Contains(n.Summary, "GPU 0000:41:00.0 on gpu01: gpu_utilization is 97%, above 95% for 30m") {
		t.Errorf("notification %+v", n)
	}
	firing := e.alerts(store.AlertFiring)
	if len(firing) != 1 || firing[0].Subject != gpu1 || firing[0].NotifiedAt == nil {
		t.Errorf("firing %+v", firing)
	}
	if !strings.Contains(e.log.String(), "alert firing") {
		t.Errorf("firing not logged:\n%s", e.log.String())
	}
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Util = 0.96 })
	e.round(10 * time.Minute) // still firing, a new value: recorded, not notified again
	e.expect()
	if a := e.alerts(store.AlertFiring); len(a) != 1 || a[0].Value != 96 {
		t.Errorf("firing value %+v", a)
	}
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Util = 0.5 })
	e.round(10 * time.Minute) // 9:50: GPU 1 resolves, GPU 2 has been busy 30 minutes
	got = e.expect("firing "+gpu2, "resolved "+gpu1)
	if len(got) == 2 {
		r := got[1]
		if r.State != api.AlertResolved || r.Value != 50 || r.ResolvedAt == nil || !r.ResolvedAt.Equal(e.clock.Now()) ||
			r.Summary != "GPU 0000:41:00.0 on gpu01: gpu_utilization is 50% again" {
			t.Errorf("resolved notification %+v", r)
		}
	}
	if !strings.Contains(e.log.String(), "alert resolved") {
		t.Error("resolution not logged")
	}
}

// Temperature above 85 °C with no duration fires at once.
func TestAlertTemperature(t *testing.T) {
	e := newAlertEnv(t, rule("hot", MetricGPUTemperature, num(85), 0))
	e.setGPU("0000:42:00.0", func(g *monitor.GPUReading) { g.Temperature = 86 })
	e.round(0)
	if n := e.expect("firing " + gpu2); len(n) == 1 && !strings.Contains(n[0].Summary, "86 °C, above 85 °C") {
		t.Errorf("summary %q", n[0].Summary)
	}
	e.round(time.Minute)
	e.expect()
	e.setGPU("0000:42:00.0", func(g *monitor.GPUReading) { g.Temperature = 80 })
	e.round(time.Minute)
	e.expect("resolved " + gpu2)
	// A GPU that stops reporting the figure resolves too.
	e.setGPU("0000:42:00.0", func(g *monitor.GPUReading) { g.Temperature = 90 })
	e.round(time.Minute)
	e.expect("firing " + gpu2)
	e.setGPU("0000:42:00.0", func(g *monitor.GPUReading) { g.Temperature = monitor.Unknown })
	e.round(time.Minute)
	e.expect("resolved " + gpu2)
}

// XID errors fire at the first one and resolve when none came within the
// rule's duration.
func TestAlertXIDErrors(t *testing.T) {
	e := newAlertEnv(t, rule("xid", MetricGPUXIDErrors, num(0), time.Hour))
	e.round(0)
	e.expect()
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.XIDErrors = 2 })
	e.round(10 * time.Minute) // 9:10
	if n := e.expect("firing " + gpu1); len(n) == 1 && (n[0].Value != 2 || !strings.Contains(n[0].Summary, "within 1h")) {
		t.Errorf("notification %+v", n[0])
	}
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.XIDErrors = 0 })
	e.round(50 * time.Minute) // 10:00: the errors of 9:10 are within the hour
	e.expect()
	e.round(10*time.Minute + time.Second) // 10:10:01: they are not
	e.expect("resolved " + gpu1)
}

// The oldest queued VM waiting more than 2 hours fires; it resolves when
// the VM leaves the queue.
func TestAlertQueueWait(t *testing.T) {
	e := newAlertEnv(t, rule("slow-queue", MetricQueueWait, num(2*3600), 0), rule("long-queue", MetricQueueLength, num(0), 0))
	ctx := context.Background()
	if err := e.st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "waits", Owner: "ann", Profile: "p", Hours: 1}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	e.round(time.Hour)
	e.expect("firing queue") // long-queue: one waits
	e.round(time.Hour + time.Minute)
	n := e.expect("firing queue") // slow-queue
	if len(n) == 1 && (n[0].Rule != "slow-queue" || n[0].Value != 7260 || n[0].Host != "" || !strings.Contains(n[0].Summary, "the queue: queue_wait is 2h1m")) {
		t.Errorf("notification %+v", n[0])
	}
	if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMAllocating}); err != nil {
		t.Fatal(err)
	}
	e.round(time.Minute)
	e.expect("resolved queue", "resolved queue")
}

// A VM whose GPU idles for 4 hours fires; it resolves when the VM uses it.
func TestAlertVMIdle(t *testing.T) {
	e := newAlertEnv(t, rule("idle", MetricVMIdle, num(4*3600), 0))
	vm := storetest.RunningVM(t, e.st, testHost, "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4"}, "0000:41:00.4")
	e.src.set(func(r *monitor.Reading) {
		in := monitor.NewInstanceReading("0000:41:00.0", gpu.KindVGPU)
		in.ID, in.Util = "0000:41:00.4", 0.01
		r.Instances = []monitor.InstanceReading{in}
	})
	for range 24 { // four hours of rounds every 10 minutes
		e.round(10 * time.Minute)
	}
	e.expect()
	e.round(10 * time.Minute)
	n := e.expect("firing vm/" + vm.ID)
	if len(n) == 1 && (n[0].Value != 4*3600+600 || !strings.Contains(n[0].Summary, "VM render of ann: vm_idle is 4h10m")) {
		t.Errorf("notification %+v", n[0])
	}
	idle, err := e.mon.Idle().IdleVMs(context.Background())
	if err != nil || len(idle) != 1 || idle[0].VMID != vm.ID || idle[0].For != 4*time.Hour+10*time.Minute || !idle[0].Since.Equal(vm.UpdatedAt) {
		t.Errorf("idle VMs %+v, %v", idle, err)
	}
	e.src.set(func(r *monitor.Reading) { r.Instances[0].Util = 0.5 })
	e.round(10 * time.Minute)
	e.expect("resolved vm/" + vm.ID)
}

// A backend down for a minute fires; it resolves when it is back.
func TestAlertBackendDown(t *testing.T) {
	e := newAlertEnv(t, rule("backend", MetricBackendDown, num(0.5), time.Minute))
	e.health.states = map[string]string{"mig": "", "vgpu": ""}
	e.round(0)
	e.health.mu.Lock()
	e.health.states["mig"] = "plugin exited"
	e.health.mu.Unlock()
	e.round(time.Minute)
	e.round(time.Minute)
	if n := e.expect("firing backend/mig"); len(n) == 1 && !strings.Contains(n[0].Summary, "backend mig on gpu01 (plugin exited): backend_down is down") {
		t.Errorf("summary %q", n[0].Summary)
	}
	e.health.mu.Lock()
	e.health.states["mig"] = ""
	e.health.mu.Unlock()
	e.round(time.Minute)
	e.expect("resolved backend/mig")
}

// A vGPU left unlicensed (in its grace period or restricted) for the
// rule's duration fires, naming its VM and owner; one whose licence state is not known is
// not observed; it resolves once the guest is licensed.
func TestAlertVGPUUnlicensed(t *testing.T) {
	e := newAlertEnv(t, rule("unlicensed", MetricVGPUUnlicensed, num(0.5), 20*time.Minute))
	vm := storetest.RunningVM(t, e.st, testHost, "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4"}, "0000:41:00.4")
	e.src.set(func(r *monitor.Reading) {
		in := monitor.NewInstanceReading("0000:41:00.0", gpu.KindVGPU)
		in.ID, in.Type, in.License = "0000:41:00.4", "L40S-12Q", monitor.LicenseGrace
		unknown := monitor.NewInstanceReading("0000:41:00.0", gpu.KindVGPU)
		unknown.ID, unknown.Type = "0000:41:00.5", "L40S-12Q"
		r.Instances = []monitor.InstanceReading{in, unknown}
	})
	// In its grace period from 09:00, restricted at 09:10: unlicensed for
	// the rule's 20 minutes at 09:20, not before.
	e.round(0)
	e.round(10 * time.Minute)
	e.src.set(func(r *monitor.Reading) { r.Instances[0].License = monitor.LicenseUnlicensed })
	e.round(9 * time.Minute)
	e.expect()
	e.round(time.Minute)
	n := e.expect("firing gpu01/0000:41:00.0/0000:41:00.4")
	if len(n) == 1 && !strings.Contains(n[0].Summary, "vGPU L40S-12Q of VM "+vm.ID+" (ann) on GPU 0000:41:00.0 of gpu01: vgpu_unlicensed is unlicensed") {
		t.Errorf("summary %q", n[0].Summary)
	}
	e.src.set(func(r *monitor.Reading) { r.Instances[0].License = monitor.LicenseLicensed })
	e.round(time.Minute)
	e.expect("resolved gpu01/0000:41:00.0/0000:41:00.4")
}

// A webhook that fails twice gets the notification on the third attempt,
// and the alert records the delivery; a 4xx answer is not retried.
func TestAlertWebhookRetries(t *testing.T) {
	e := newAlertEnv(t, rule("hot", MetricGPUTemperature, num(85), 0))
	e.hook.fail = 2
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Temperature = 90 })
	e.round(0)
	e.expect("firing " + gpu1)
	e.hook.mu.Lock()
	attempts := strings.Join(e.hook.attempts, ",")
	e.hook.mu.Unlock()
	if attempts != "1,2,3" {
		t.Errorf("attempts %q, want 1,2,3", attempts)
	}
	if a := e.alerts(store.AlertFiring); len(a) != 1 || a[0].NotifiedAt == nil {
		t.Errorf("delivery not recorded: %+v", a)
	}
	if !strings.Contains(e.log.String(), "alert notification delivered after retries") {
		t.Error("retries not logged")
	}
	e.hook.mu.Lock()
	e.hook.attempts, e.hook.fail, e.hook.failStatus = nil, 1, http.StatusBadRequest
	e.hook.mu.Unlock()
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Temperature = 70 })
	e.round(time.Minute)
	e.expect()
	if len(e.hook.attempts) != 1 || !strings.Contains(e.log.String(), "not retried") {
		t.Errorf("a 400 was retried: attempts %v\n%s", e.hook.attempts, e.log.String())
	}
}

// A dead receiver never holds a round: delivery goes on in the background.
func TestAlertWebhookDoesNotBlockRounds(t *testing.T) {
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	e := newAlertEnv(t, rule("hot", MetricGPUTemperature, num(85), 0))
	e.rules[0].Webhook = slow.URL
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Temperature = 90 })
	start := time.Now()
	if err := e.mon.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a round took %s with a hanging webhook", d)
	}
	if len(e.alerts(store.AlertFiring)) != 1 {
		t.Error("the alert was not recorded")
	}
}

// After a restart the time a GPU condition has held is read back from the
// samples: the alert fires when its 30 minutes are up, not 30 minutes
// after the restart.
func TestAlertStateSurvivesRestart(t *testing.T) {
	e := newAlertEnv(t, rule("busy", MetricGPUUtilization, num(95), 30*time.Minute))
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Util = 0.97 })
	e.round(0)
	e.round(10 * time.Minute)
	e.round(10 * time.Minute) // 9:20: busy for 20 minutes
	e.expect()
	e.start()                 // gpuvmd restarts
	e.round(10 * time.Minute) // 9:30
	e.expect("firing " + gpu1)
	// A firing alert is known to the new process: it resolves it.
	e.start()
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Util = 0.1 })
	e.round(10 * time.Minute)
	e.expect("resolved " + gpu1)
}

// Changing the configuration: a rule taken out resolves its alerts.
func TestAlertRuleRemoved(t *testing.T) {
	e := newAlertEnv(t, rule("hot", MetricGPUTemperature, num(85), 0))
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Temperature = 90 })
	e.round(0)
	e.expect("firing " + gpu1)
	e.mu.Lock()
	e.rules = nil
	e.mu.Unlock()
	e.round(time.Minute)
	a := e.alerts(store.AlertResolved)
	if len(a) != 1 || a[0].Summary != "the rule was removed from the configuration" {
		t.Errorf("resolved %+v", a)
	}
	e.expect() // the rule, and its webhook, are gone
}

// A failed round (the source fails) leaves GPU alerts as they are.
func TestAlertKeepsStateWhenSamplingFails(t *testing.T) {
	e := newAlertEnv(t, rule("hot", MetricGPUTemperature, num(85), 0))
	e.setGPU("0000:41:00.0", func(g *monitor.GPUReading) { g.Temperature = 90 })
	e.round(0)
	e.expect("firing " + gpu1)
	e.src.mu.Lock()
	e.src.err = context.DeadlineExceeded
	e.src.mu.Unlock()
	e.clock.Advance(time.Minute)
	if err := e.mon.Round(context.Background()); err == nil {
		t.Fatal("a failed read did not fail the round")
	}
	e.hooks.Wait()
	e.expect()
	if len(e.alerts(store.AlertFiring)) != 1 {
		t.Error("the alert resolved while nothing could be read")
	}
}
