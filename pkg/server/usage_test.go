package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// usageEnv is a server on a real store with users admin, ann (group
// render) and bob (group sim), and a little usage: now is 2026-03-10 12:00.
type usageEnv struct {
	s      *Server
	st     *store.Store
	tokens map[string]string
}

var usageNow = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

func newUsageEnv(t *testing.T) *usageEnv { return newUsageEnvWith(t, false) }

// newUsageEnvWith is newUsageEnv, with (withTask) ann's task besides: its VM
// held a whole GPU for 30 minutes on 03-10 from 09:00.
func newUsageEnvWith(t *testing.T, withTask bool) *usageEnv {
	t.Helper()
	ctx := context.Background()
	clock := clocktest.New(usageNow.Add(-60 * 24 * time.Hour))
	st := storetest.New(t, storetest.WithClock(clock.Now), storetest.Quiet)
	e := &usageEnv{st: st, tokens: map[string]string{}}
	for _, u := range []struct {
		name, group string
		admin       bool
	}{{"admin", "staff", true}, {"ann", "render", false}, {"bob", "sim", false}} {
		if err := st.CreateUser(ctx, &store.User{Name: u.name, Admin: u.admin, Groups: []string{u.group}}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := st.CreateToken(ctx, u.name, "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[u.name] = tok
	}
	// ann: a whole GPU for 2 hours on 03-09 at 50%, and one 40 days ago;
	// bob: a 1/7 MIG slice from 03-09 10:00, still held, no samples.
	hold := func(owner, group, name, profile string, share float64, from time.Time, to *time.Time, util float64) {
		clock.Set(from.Add(-30 * time.Minute))
		vm := &store.VM{Name: name, Owner: owner, Group: group, Profile: profile, Hours: 8}
		opts := store.CreateVMOptions{RequestedBy: owner}
		if strings.HasPrefix(name, "task-") { // the VM of a task
			opts.Task = &store.Task{ID: "t-" + name, Owner: owner, Profile: profile, TimeLimitS: 3600}
		}
		if _, err := st.CreateVM(ctx, vm, opts); err != nil {
			t.Fatal(err)
		}
		clock.Set(from)
		if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning}); err != nil {
			t.Fatal(err)
		}
		r := &store.UsageRecord{VMID: vm.ID, User: owner, Group: group, Host: "h1", GPUAddress: "0000:41:00.0", Kind: gpu.KindMIG,
			Share: share, StartedAt: from, EndedAt: to}
		if err := st.InsertUsageRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
		if util < 0 {
			return
		}
		var rows []store.GPUSample
		for at := from; at.Before(*to); at = at.Add(5 * time.Minute) {
			rows = append(rows, store.GPUSample{Host: "h1", GPUAddress: "0000:41:00.0", VMID: vm.ID, User: owner, TakenAt: at,
				Resolution: 300, SampleCount: 30, GPUUtil: util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1})
		}
		if err := st.InsertSamples(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	at := func(day, hour int) time.Time { return time.Date(2026, 3, day, hour, 0, 0, 0, time.UTC) }
	ptr := func(t time.Time) *time.Time { return &t }
	hold("ann", "render", "old", "render-l40s", 1, usageNow.Add(-40*24*time.Hour), ptr(usageNow.Add(-40*24*time.Hour+time.Hour)), -1)
	hold("ann", "render", "a", "render-l40s", 1, at(9, 8), ptr(at(9, 10)), 0.5)
	hold("bob", "sim", "b", "small-1g", 1.0/7, at(9, 10), nil, -1)
	if withTask {
		// ann's task: a whole GPU for 30 minutes on 03-10.
		hold("ann", "render", "task-0a1b2c3d", "render-l40s", 1, at(10, 9), ptr(at(10, 9).Add(30*time.Minute)), -1)
	}
	clock.Set(usageNow)
	e.s = newServer(t, Deps{Auth: st, Backends: fakeBackends{}, Store: st, Host: "h1", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return e
}

func (e *usageEnv) get(t *testing.T, path, who string, out any) (int, api.Problem) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	}
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	var p api.Problem
	if rec.Code >= 300 {
		if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("GET %s: %d with %s, not problem+json", path, rec.Code, ct)
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
	} else if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, rec.Body)
	}
	return rec.Code, p
}

func TestUsageRoute(t *testing.T) {
	e := newUsageEnv(t)
	bobHours := 26.0 / 7 // 03-09 10:00 to now (03-10 12:00), a seventh
	tests := []struct {
		name, who, query string
		status           int
		field            string
		rows             map[string]float64 // GPU-hours by key
		user, by         string
	}{
		{"ann sees her own", "ann", "", 200, "", map[string]float64{"ann": 2}, "ann", "user"},
		{"bob sees his own, still held", "bob", "", 200, "", map[string]float64{"bob": bobHours}, "bob", "user"},
		{"admin sees everyone's", "admin", "", 200, "", map[string]float64{"ann": 2, "bob": bobHours}, "", "user"},
		{"admin asks for bob's", "admin", "?user=bob", 200, "", map[string]float64{"bob": bobHours}, "bob", "user"},
		{"ann asks for her own by name", "ann", "?user=ann", 200, "", map[string]float64{"ann": 2}, "ann", "user"},
		{"ann asks for bob's", "ann", "?user=bob", 403, "user", nil, "", ""},
		{"by group", "admin", "?by=group", 200, "", map[string]float64{"render": 2, "sim": bobHours}, "", "group"},
		{"by profile", "admin", "?by=profile", 200, "", map[string]float64{"render-l40s": 2, "small-1g": bobHours}, "", "profile"},
		{"by gpu", "admin", "?by=gpu", 200, "", map[string]float64{"h1/0000:41:00.0": 2 + bobHours}, "", "gpu"},
		{"a range", "admin", "?from=2026-03-09T09:00:00Z&to=2026-03-09T11:00:00Z", 200, "", map[string]float64{"ann": 1, "bob": 1.0 / 7}, "", "user"},
		{"40 days back", "ann", "?from=2026-01-20T00:00:00Z", 200, "", map[string]float64{"ann": 3}, "ann", "user"},
		{"an empty range", "ann", "?from=2025-01-01T00:00:00Z&to=2025-02-01T00:00:00Z", 200, "", map[string]float64{}, "ann", "user"},
		{"from is not a time", "ann", "?from=yesterday", 422, "from", nil, "", ""},
		{"to is not RFC 3339", "ann", "?to=2026-03-01", 422, "to", nil, "", ""},
		{"to before from", "ann", "?from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z", 422, "to", nil, "", ""},
		{"a range too long", "admin", "?from=2024-01-01T00:00:00Z", 422, "from", nil, "", ""},
		{"from before 1970", "admin", "?from=1969-12-31T00:00:00Z&to=1970-01-02T00:00:00Z", 422, "from", nil, "", ""},
		{"years ahead", "admin", "?from=9999-12-30T00:00:00Z&to=9999-12-31T00:00:00Z", 422, "to", nil, "", ""},
		{"to a decade ahead", "admin", "?to=2036-03-01T00:00:00Z", 422, "to", nil, "", ""},
		{"by colour", "ann", "?by=colour", 422, "by", nil, "", ""},
		{"no token", "", "", 401, "", nil, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r api.UsageReport
			code, p := e.get(t, "/v1/usage"+tc.query, tc.who, &r)
			if code != tc.status || p.Field != tc.field {
				t.Fatalf("%d field %q (%s), want %d field %q", code, p.Field, p.Detail, tc.status, tc.field)
			}
			if code != 200 {
				return
			}
			if r.User != tc.user || r.By != tc.by || r.Rows == nil {
				t.Errorf("user %q by %q rows %v, want user %q by %q", r.User, r.By, r.Rows, tc.user, tc.by)
			}
			got := map[string]float64{}
			for _, row := range r.Rows {
				got[row.Key] = row.GPUHours
			}
			if len(got) != len(tc.rows) {
				t.Errorf("rows %v, want %v", got, tc.rows)
			}
			for k, w := range tc.rows {
				if math.Abs(got[k]-w) > 1e-9 {
					t.Errorf("%s: %g GPU-hours, want %g", k, got[k], w)
				}
			}
		})
	}
	// The default range is the last 30 days up to now; ann's used half.
	var r api.UsageReport
	if code, _ := e.get(t, "/v1/usage", "ann", &r); code != 200 {
		t.Fatal(code)
	}
	if !r.To.Equal(usageNow) || !r.From.Equal(usageNow.Add(-30*24*time.Hour)) {
		t.Errorf("default range %s–%s", r.From, r.To)
	}
	if u := r.Total.Utilization; u == nil || math.Abs(*u-0.5) > 1e-9 || math.Abs(r.Total.UsedGPUHours-1) > 1e-9 || math.Abs(r.Total.IdleGPUHours-1) > 1e-9 {
		t.Errorf("ann's total: %+v", r.Total)
	}
	var b api.UsageReport
	if code, _ := e.get(t, "/v1/usage", "bob", &b); code != 200 || b.Total.Utilization != nil || b.Total.Running != 1 {
		t.Errorf("bob's total (no samples: unknown): %d %+v", code, b.Total)
	}
}

func TestReportSummaryRoute(t *testing.T) {
	e := newUsageEnv(t)
	tests := []struct {
		name, who, query string
		status           int
		field            string
	}{
		{"admin", "admin", "?from=2026-03-09T00:00:00Z&to=2026-03-10T00:00:00Z&tz=Europe/Berlin", 200, ""},
		{"admin, defaults", "admin", "", 200, ""},
		{"a user", "ann", "", 403, ""},
		{"an unknown zone", "admin", "?tz=Mars/Olympus", 422, "tz"},
		{"Local is not a zone name", "admin", "?tz=Local", 422, "tz"},
		{"idle_below above 1", "admin", "?idle_below=2", 422, "idle_below"},
		{"idle_below not a number", "admin", "?idle_below=low", 422, "idle_below"},
		{"from is not a time", "admin", "?from=monday", 422, "from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r api.ReportSummary
			code, p := e.get(t, "/v1/reports/summary"+tc.query, tc.who, &r)
			if code != tc.status || p.Field != tc.field {
				t.Fatalf("%d field %q (%s), want %d field %q", code, p.Field, p.Detail, tc.status, tc.field)
			}
		})
	}
	var r api.ReportSummary
	if code, _ := e.get(t, "/v1/reports/summary?from=2026-03-09T00:00:00Z&to=2026-03-10T00:00:00Z&tz=Europe/Berlin&idle_below=0.6", "admin", &r); code != 200 {
		t.Fatal(code)
	}
	if r.Location != "Europe/Berlin" || r.IdleBelow != 0.6 || len(r.ByUser) != 2 || r.GPUs != 1 || len(r.Notes) == 0 {
		t.Errorf("summary: %+v", r)
	}
	// ann's VM at 50% is idle under 60%; Monday 09:00 in Berlin is 08:00 UTC.
	if len(r.IdleVMs) != 1 || r.IdleVMs[0].Name != "a" || r.IdleVMs[0].Owner != "ann" {
		t.Errorf("idle VMs: %+v", r.IdleVMs)
	}
	if u := r.Heatmaps.Utilization[0][9]; u == nil || math.Abs(*u-0.5) > 1e-9 {
		t.Errorf("utilisation of Monday 09:00 Berlin: %v", u)
	}
	if n := len(r.QueueWaits); n == 0 || r.QueueWaits[n-1].Profile != "total" || r.QueueWaits[n-1].Requests != 2 ||
		math.Abs(r.QueueWaits[n-1].MeanSeconds-1800) > 1e-6 {
		t.Errorf("queue waits: %+v", r.QueueWaits)
	}
	if !strings.Contains(strings.Join(r.Notes, " "), "GPU-hours") {
		t.Errorf("notes: %q", r.Notes)
	}
}

// GET /v1/usage/periods: a user's day, week and month (of the policy's
// zone) against their quotas, and day by day.
func TestUsagePeriodsRoute(t *testing.T) {
	e := newUsageEnv(t) // Tuesday 10 March 2026 12:00 UTC
	// ann (render) has a week's and a month's quota; bob (sim, no block)
	// the defaults' day.
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
policy {
  defaults {
    quota { gpu_hours_per_day = 5 }
  }
  group "render" {
    quota {
      gpu_hours_per_week  = 10
      gpu_hours_per_month = 40
    }
  }
  group "staff" {}
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.s.Config = &fakeConfig{cfg: cfg}
	bobDay, bobAll := 12.0/7, 26.0/7
	num := func(f *float64) string {
		if f == nil {
			return "none"
		}
		return strconv.FormatFloat(*f, 'f', 3, 64)
	}
	tests := []struct {
		name, who, query string
		status           int
		field            string
		user             string
		day, week, month float64
		quotas           string // day, week, month
		mar9             float64
		utilWeek         string
	}{
		{"ann's", "ann", "", 200, "", "ann", 0, 2, 2, "none 10.000 40.000", 2, "0.500"},
		{"bob's, still held", "bob", "", 200, "", "bob", bobDay, bobAll, bobAll, "5.000 none none", 2, "none"},
		{"an admin asks for ann's", "admin", "?user=ann", 200, "", "ann", 0, 2, 2, "none 10.000 40.000", 2, "0.500"},
		{"ann asks for bob's", "ann", "?user=bob", 403, "user", "", 0, 0, 0, "", 0, ""},
		{"an admin asks for nobody's", "admin", "?user=zed", 404, "user", "", 0, 0, 0, "", 0, ""},
		{"no token", "", "", 401, "", "", 0, 0, 0, "", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r api.UsagePeriods
			code, p := e.get(t, "/v1/usage/periods"+tc.query, tc.who, &r)
			if code != tc.status || p.Field != tc.field {
				t.Fatalf("%d field %q (%s), want %d field %q", code, p.Field, p.Detail, tc.status, tc.field)
			}
			if code != 200 {
				return
			}
			if r.User != tc.user || r.Timezone != "UTC" {
				t.Errorf("user %q zone %q", r.User, r.Timezone)
			}
			for _, x := range []struct {
				p    api.UsagePeriod
				want float64
				key  string
				from string
			}{{r.Day, tc.day, "day", "2026-03-10"}, {r.Week, tc.week, "week", "2026-03-09"}, {r.Month, tc.month, "month", "2026-03-01"}} {
				if math.Abs(x.p.GPUHours-x.want) > 1e-9 || x.p.Key != x.key || x.p.From.Format(time.DateOnly) != x.from {
					t.Errorf("%s: %g GPU-hours from %s, want %g from %s", x.key, x.p.GPUHours, x.p.From, x.want, x.from)
				}
			}
			if q := num(r.Day.QuotaGPUHours) + " " + num(r.Week.QuotaGPUHours) + " " + num(r.Month.QuotaGPUHours); q != tc.quotas {
				t.Errorf("quotas %s, want %s", q, tc.quotas)
			}
			if u := num(r.Week.Utilization); u != tc.utilWeek {
				t.Errorf("week's utilisation %s, want %s", u, tc.utilWeek)
			}
			if len(r.Days) != 10 || r.Days[0].Key != "2026-03-01" || r.Days[9].Key != "2026-03-10" {
				t.Fatalf("days %+v", r.Days)
			}
			if math.Abs(r.Days[8].GPUHours-tc.mar9) > 1e-9 {
				t.Errorf("9 March: %g GPU-hours, want %g", r.Days[8].GPUHours, tc.mar9)
			}
		})
	}
	// ann's week: 2 hours held at 50%, so 1 used and 1 idle.
	var r api.UsagePeriods
	e.get(t, "/v1/usage/periods", "ann", &r)
	if math.Abs(r.Week.UsedGPUHours-1) > 1e-9 || math.Abs(r.Week.IdleGPUHours-1) > 1e-9 {
		t.Errorf("ann's week %+v", r.Week)
	}
}

// On a simulated GPU server the utilisation is the simulator's, not a
// GPU's: what was held there is counted as simulated, never as measured,
// so nothing is painted "held idle" (GET /v1/usage and /v1/usage/periods).
func TestUsageOnASimulatedServer(t *testing.T) {
	e := newUsageEnv(t)
	ctx := context.Background()
	var periods api.UsagePeriods
	if code, p := e.get(t, "/v1/usage/periods", "ann", &periods); code != 200 || periods.Week.MeasuredGPUHours != 2 || periods.Week.SimulatedGPUHours != 0 {
		t.Fatalf("a real host: %d %s, %+v", code, p.Detail, periods.Week.UsageRow)
	}
	if err := e.st.RegisterHost(ctx, &store.Host{Name: "h1", Version: "test", Inventory: `{"host":"simulated GPU server (preset a100x4)","simulated":true,"gpus":[]}`}); err != nil {
		t.Fatal(err)
	}
	if code, p := e.get(t, "/v1/usage/periods", "ann", &periods); code != 200 {
		t.Fatalf("%d %s", code, p.Detail)
	}
	w := periods.Week.UsageRow
	if w.GPUHours != 2 || w.SimulatedGPUHours != 2 || w.MeasuredGPUHours != 0 || w.IdleGPUHours != 0 || w.UsedGPUHours != 0 || w.Utilization != nil {
		t.Errorf("the week on a simulated server: %+v", w)
	}
	var r api.UsageReport
	if code, p := e.get(t, "/v1/usage?by=host", "admin", &r); code != 200 {
		t.Fatalf("%d %s", code, p.Detail)
	}
	if r.Total.SimulatedGPUHours != r.Total.GPUHours || r.Total.MeasuredGPUHours != 0 || r.Total.Utilization != nil {
		t.Errorf("the report on a simulated server: %+v", r.Total)
	}
	// The review summary keeps it apart too, and says so.
	var sum api.ReportSummary
	if code, p := e.get(t, "/v1/reports/summary?from=2026-03-09T00:00:00Z&to=2026-03-10T00:00:00Z", "admin", &sum); code != 200 {
		t.Fatalf("%d %s", code, p.Detail)
	}
	if tot := sum.Total; tot.GPUHours == 0 || math.Abs(tot.SimulatedGPUHours-tot.GPUHours) > 1e-9 || tot.MeasuredGPUHours != 0 || tot.IdleGPUHours != 0 || tot.Utilization != nil {
		t.Errorf("the review summary on a simulated server: %+v", tot)
	}
	if notes := strings.Join(sum.Notes, "\n"); !strings.Contains(notes, "held on simulated GPU servers") || strings.Contains(notes, "the GPUs were busy") {
		t.Errorf("the review's notes on a simulated server:\n%s", notes)
	}
}

// A task's VM is counted as a VM, and the rows say how much of them was
// tasks' (task_gpu_hours), through the task rows that name the VMs.
func TestUsageOfTasks(t *testing.T) {
	e := newUsageEnvWith(t, true)
	var periods api.UsagePeriods
	if code, p := e.get(t, "/v1/usage/periods", "ann", &periods); code != 200 {
		t.Fatalf("%d %s", code, p.Detail)
	}
	if d := periods.Day.UsageRow; d.GPUHours != 0.5 || d.TaskGPUHours != 0.5 || d.VMs != 1 {
		t.Errorf("today: %+v, want 0.5 GPU-hours, all of a task", d)
	}
	if w := periods.Week.UsageRow; w.GPUHours != 2.5 || w.TaskGPUHours != 0.5 || w.VMs != 2 {
		t.Errorf("the week: %+v, want 2.5 GPU-hours of which 0.5 a task's", w)
	}
	if n := len(periods.Days); n == 0 || periods.Days[n-1].TaskGPUHours != 0.5 || periods.Days[n-2].TaskGPUHours != 0 {
		t.Errorf("the days: %+v", periods.Days)
	}
	var r api.UsageReport
	if code, p := e.get(t, "/v1/usage?by=vm&from=2026-03-09T00:00:00Z", "admin", &r); code != 200 {
		t.Fatalf("%d %s", code, p.Detail)
	}
	for _, row := range r.Rows {
		want := 0.0
		if row.Key == "ann/task-0a1b2c3d" {
			want = 0.5
		}
		if row.TaskGPUHours != want {
			t.Errorf("%s: task_gpu_hours %v, want %v", row.Key, row.TaskGPUHours, want)
		}
	}
	if r.Total.TaskGPUHours != 0.5 {
		t.Errorf("the total: %+v", r.Total)
	}
	// The JSON says it by name; a row without tasks leaves it out.
	raw := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/usage/periods", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens["bob"])
	e.s.ServeHTTP(raw, req)
	if strings.Contains(raw.Body.String(), "task_gpu_hours") {
		t.Errorf("bob has no task, yet: %s", raw.Body)
	}
}

// GET /v1/auth/methods, which needs no sign-in, says whether the
// installation is simulated, for the sign-in page's badge: that only,
// never which hosts.
func TestAuthMethodsSaysSimulated(t *testing.T) {
	e := newUsageEnv(t)
	var m api.AuthMethods
	if code, p := e.get(t, "/v1/auth/methods", "", &m); code != 200 || m.Simulated {
		t.Fatalf("a real host: %d %s, %+v", code, p.Detail, m)
	}
	if err := e.st.RegisterHost(context.Background(), &store.Host{Name: "h1", Version: "test", Inventory: `{"host":"simulated GPU server (preset a100x4)","simulated":true,"gpus":[]}`}); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/v1/auth/methods", nil)
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	if b := rec.Body.String(); rec.Code != 200 || !strings.Contains(b, `"simulated":true`) || strings.Contains(b, "h1") || strings.Contains(b, "a100") {
		t.Errorf("a simulated host: %d %s", rec.Code, b)
	}
}
