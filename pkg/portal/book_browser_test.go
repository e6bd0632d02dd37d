package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// bookProfiles: one bookable whole L40S (the booker's host has one), a
// seat, bookings up to 30 days ahead and 8 hours long, and GPU-hour quotas.
const bookProfiles = `
policy {
  defaults {
    quota {
      gpu_hours_per_week  = 20
      gpu_hours_per_month = 60
    }
  }
  reservations {
    max_ahead  = "30d"
    max_length = "8h"
    max_vms    = 2
  }
}
profile "whole-l40s" {
  vcpus  = 16
  memory = "64GiB"
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
profile "seat" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`

// orchestratorBookings books with the real orchestrator on a host of one
// whole L40S.
func orchestratorBookings(st *store.Store, cfg *config.Config) server.Booker {
	pt := &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		return backend.Inventory{Backend: "passthrough", Host: "test", GPUs: []backend.GPU{
			{Address: "0000:a1:00.0", Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: gpu.ModeIdle, IOMMUGroup: "31"}}}, nil
	}}
	return orchestrator.New(orchestrator.Config{Store: st, Backends: bookBackends{"passthrough": pt}, Profiles: func() *config.Config { return cfg },
		Host: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

type bookBackends map[string]backend.Backend

func (b bookBackends) Names() []string {
	var out []string
	for n := range b {
		out = append(out, n)
	}
	return out
}

func (b bookBackends) Backend(n string) (backend.Backend, bool) { x, ok := b[n]; return x, ok }

// apiCall calls the API with a token and decodes the answer into out.
func apiCall(t *testing.T, method, url, token, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	return res.StatusCode
}

// seedUsage gives ann a whole GPU held for the last two hours (of today in
// UTC, the policy's zone, where it can) at 50% utilisation; it returns the
// GPU-hours.
func seedUsage(t *testing.T, st *store.Store) float64 {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	end := now.Add(-time.Minute).Truncate(time.Minute)
	start := end.Add(-2 * time.Hour)
	if day := now.Truncate(24 * time.Hour); start.Before(day) && end.Sub(day) > 10*time.Minute {
		start = day
	}
	vm := &store.VM{Name: "render", Owner: "ann", Profile: "seat", Hours: 1}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	r := &store.UsageRecord{VMID: vm.ID, User: "ann", Host: "gpu-01", GPUAddress: "0000:43:00.0", Kind: gpu.KindPassthrough, Profile: "whole-l40s",
		Share: 1, StartedAt: start, EndedAt: &end}
	if err := st.InsertUsageRecord(ctx, r); err != nil {
		t.Fatal(err)
	}
	var rows []store.GPUSample
	for at := start; at.Before(end); at = at.Add(5 * time.Minute) {
		rows = append(rows, store.GPUSample{Host: "gpu-01", GPUAddress: "0000:43:00.0", VMID: vm.ID, User: "ann", TakenAt: at,
			Resolution: 300, SampleCount: 30, GPUUtil: 0.5, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1})
	}
	if err := st.InsertSamples(ctx, rows); err != nil {
		t.Fatal(err)
	}
	return end.Sub(start).Hours()
}

// Book ahead and My usage, as ann sees them in Shanghai's time: the week
// calendar shows the free hours of the whole L40S; she books one, sees it
// as hers, books one weekly for three weeks, is told in words why a weekly
// booking that a later week cannot have is refused (and nothing of it is
// booked), and cancels the first after confirming. My usage shows the
// GPU-hours the store holds against her quotas, the utilisation and the
// idle time. Every state passes b.check.
func TestBookAndUsagePages(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: bookProfiles, Bookings: orchestratorBookings})
	upHost(t, env.Store)
	seeded := seedUsage(t, env.Store)
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	// The slots, next week and after, in Shanghai's wall-clock time.
	now := time.Now().In(shanghai)
	monday := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, shanghai).AddDate(0, 0, -((int(now.Weekday()) + 6) % 7))
	at := func(week, day, hour int) time.Time {
		return monday.AddDate(0, 0, 7*week+day).Add(time.Duration(hour) * time.Hour)
	}
	slot := func(t time.Time) string { return fmt.Sprintf(`[data-slot="%s"]`, t.UTC().Format(time.RFC3339)) }
	wed14, fri10, tue09 := at(1, 2, 14), at(1, 4, 10), at(1, 1, 9)
	// An admin holds the GPU on Friday 10:00 the week after next.
	body := fmt.Sprintf(`{"profile":"whole-l40s","start":%q,"end":%q}`, at(2, 4, 10).Format(time.RFC3339), at(2, 4, 12).Format(time.RFC3339))
	if code := apiCall(t, "POST", env.URL+"/v1/reservations", env.AdminToken, body, nil); code != 201 {
		t.Fatalf("the admin's booking: %d", code)
	}
	anns := func() []api.Reservation {
		var l api.ReservationList
		apiCall(t, "GET", env.URL+"/v1/reservations?owner=ann", env.UserToken, "", &l)
		return l.Items
	}

	b := newBrowser(t, env.URL, false)
	b.run(emulation.SetTimezoneOverride("Asia/Shanghai"))
	b.signIn(env.UserToken)
	b.run(chromedp.Navigate(env.URL + "/book"))
	b.waitFor("the calendar", `document.querySelector('#calendar tbody tr') && document.querySelector('#book-rules')`)
	if s := b.text("#book-rules"); !strings.Contains(s, "30 days ahead") || !strings.Contains(s, "8 h") || !strings.Contains(s, "2 VMs") {
		t.Errorf("rules: %q", s)
	}
	if s := b.text(".intro"); !strings.Contains(s, "Asia/Shanghai") {
		t.Errorf("intro: %q", s)
	}
	b.check("book")

	// From the keyboard: one cell is in the tab order, the arrows move,
	// Enter opens the booking form and Escape closes it.
	var tabStops int
	var cell, moved string
	b.eval(`document.querySelectorAll('#calendar button[tabindex="0"]').length`, &tabStops)
	b.run(chromedp.Focus(`#calendar button[tabindex="0"]`, chromedp.ByQuery))
	b.eval(`document.activeElement.dataset.cell`, &cell)
	// The first free hour is in the tab order: the next hour down, or at
	// 23:00 the same hour of the next day (the hour before is past then).
	col, hour, _ := strings.Cut(cell, "-")
	c, _ := strconv.Atoi(col)
	h, _ := strconv.Atoi(hour)
	key, want, future := kb.ArrowDown, fmt.Sprintf("%d-%d", c, h+1), true
	switch {
	case h == 23 && c < 6:
		key, want = kb.ArrowRight, fmt.Sprintf("%d-%d", c+1, h)
	case h == 23: // the week's last hour: only the past is left of it
		key, want, future = kb.ArrowUp, fmt.Sprintf("%d-%d", c, h-1), false
	}
	b.run(chromedp.KeyEvent(key))
	b.waitFor("the focus moved", `document.activeElement.dataset.cell !== `+strconv.Quote(cell))
	b.eval(`document.activeElement.dataset.cell`, &moved)
	if tabStops != 1 || moved != want {
		t.Errorf("%d tab stops; the focus went from %s to %s, want %s", tabStops, cell, moved, want)
	}
	if future {
		b.run(chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(`#book-length`, chromedp.ByQuery), chromedp.KeyEvent(kb.Escape),
			chromedp.WaitNotPresent(`dialog.book-form`, chromedp.ByQuery))
	}

	// Next week, Wednesday 14:00 for two hours.
	b.run(chromedp.Click(`#next-week`, chromedp.ByQuery))
	b.waitFor("next week's slots", `document.querySelector('`+slot(wed14)+`')`)
	b.run(chromedp.Click(slot(wed14), chromedp.ByQuery), chromedp.WaitVisible(`#book-length`, chromedp.ByQuery),
		chromedp.SetValue(`#book-length`, "2", chromedp.ByQuery), chromedp.Click(`#book-submit`, chromedp.ByQuery))
	b.waitFor("booked", `document.querySelector('#book-said')`)
	b.waitFor("the slots are hers", `document.querySelector('td.slot.yours `+slot(wed14)+`') && document.querySelector('td.slot.yours `+slot(wed14.Add(time.Hour))+`')`)
	rs := anns()
	if len(rs) != 1 || !rs[0].Start.Equal(wed14) || !rs[0].End.Equal(wed14.Add(2*time.Hour)) || rs[0].Recurrence != nil {
		t.Fatalf("ann's bookings %+v", rs)
	}
	first := rs[0]
	b.check("book-booked")

	// Friday 10:00 weekly for three weeks: the admin holds the second.
	b.run(chromedp.Click(slot(fri10), chromedp.ByQuery), chromedp.WaitVisible(`#book-repeat`, chromedp.ByQuery),
		chromedp.SetValue(`#book-length`, "2", chromedp.ByQuery), chromedp.Click(`#book-repeat`, chromedp.ByQuery),
		chromedp.WaitVisible(`#book-weeks`, chromedp.ByQuery), chromedp.SetValue(`#book-weeks`, "3", chromedp.ByQuery),
		chromedp.Click(`#book-submit`, chromedp.ByQuery))
	b.waitFor("refused", `document.querySelector('#book-refused')`)
	refused := b.text("#book-refused")
	week2 := at(2, 4, 10).UTC().Format("Mon 2 Jan 2006 15:04")
	if !strings.Contains(refused, "Not booked") || !strings.Contains(refused, week2) || !strings.Contains(refused, "other bookings hold the rest") {
		t.Errorf("refusal %q does not name %s", refused, week2)
	}
	b.check("book-refused")
	if rs := anns(); len(rs) != 1 {
		t.Errorf("a refused weekly booking left %d bookings", len(rs))
	}
	b.run(chromedp.Click(`dialog.book-form button.quiet`, chromedp.ByQuery))

	// Tuesday 09:00 weekly for three weeks.
	b.run(chromedp.Click(slot(tue09), chromedp.ByQuery), chromedp.WaitVisible(`#book-repeat`, chromedp.ByQuery),
		chromedp.Click(`#book-repeat`, chromedp.ByQuery), chromedp.WaitVisible(`#book-weeks`, chromedp.ByQuery),
		chromedp.SetValue(`#book-weeks`, "3", chromedp.ByQuery), chromedp.Click(`#book-submit`, chromedp.ByQuery))
	b.waitFor("booked weekly", `(document.querySelector('#book-said') || {}).textContent.includes('weekly for 3 weeks')`)
	b.waitFor("Tuesday is hers", `document.querySelector('td.slot.yours `+slot(tue09)+`')`)
	b.run(chromedp.Click(`#next-week`, chromedp.ByQuery))
	b.waitFor("the Tuesday after is hers too", `document.querySelector('td.slot.yours `+slot(at(2, 1, 9))+`')`)
	var weekly *api.Reservation
	for _, r := range anns() {
		if r.Recurrence != nil {
			weekly = &r
		}
	}
	if weekly == nil || !weekly.Start.Equal(tue09) || len(weekly.Next) != 3 || !weekly.Next[2].Start.Equal(at(3, 1, 9)) {
		t.Fatalf("the weekly booking %+v", weekly)
	}
	b.check("book-weekly")

	// Cancel the first, confirming.
	b.run(chromedp.Click(`#this-week`, chromedp.ByQuery), chromedp.Click(`#booking-`+strconv.FormatInt(first.ID, 10)+` button.danger`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-yes`, chromedp.ByQuery))
	b.check("book-cancel")
	b.run(chromedp.Click(`#confirm-yes`, chromedp.ByQuery))
	b.waitFor("cancelled", `!document.querySelector('#booking-`+strconv.FormatInt(first.ID, 10)+`') && (document.querySelector('#book-said') || {}).textContent.includes('Cancelled')`)
	if rs := anns(); len(rs) != 1 || rs[0].ID != weekly.ID {
		t.Errorf("after the cancel: %+v", rs)
	}

	// The phone shows one day at a time.
	b.run(emulation.SetDeviceMetricsOverride(390, 844, 3, true), chromedp.Click(`#next-week`, chromedp.ByQuery))
	b.waitFor("next week", `document.querySelector('`+slot(wed14)+`')`)
	var shown int
	b.eval(`[...document.querySelectorAll('#calendar thead th.day')].filter((th) => getComputedStyle(th).display !== 'none').length`, &shown)
	if shown != 1 {
		t.Errorf("a phone shows %d days", shown)
	}
	b.run(emulation.ClearDeviceMetricsOverride())

	// My usage: what the store holds.
	var u api.UsagePeriods
	if code := apiCall(t, "GET", env.URL+"/v1/usage/periods", env.UserToken, "", &u); code != 200 {
		t.Fatalf("usage periods: %d", code)
	}
	sum := 0.0
	for _, d := range u.Days {
		sum += d.GPUHours
	}
	if math.Abs(sum-seeded) > 1e-6 || u.Week.QuotaGPUHours == nil || *u.Week.QuotaGPUHours != 20 {
		t.Errorf("the API: %g GPU-hours by day, %g seeded; %+v", sum, seeded, u.Week)
	}
	b.run(chromedp.Navigate(env.URL + "/usage"))
	b.waitFor("the usage page", `document.querySelector('#usage-week-text') && document.querySelector('#usage-days')`)
	two := func(x float64) string { return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64) }
	for id, p := range map[string]api.UsagePeriod{"day": u.Day, "week": u.Week, "month": u.Month} {
		text := b.text("#usage-" + id + "-text")
		want := two(p.GPUHours)
		if p.QuotaGPUHours != nil {
			want += " of " + two(*p.QuotaGPUHours) + " GPU-hours"
		}
		if !strings.Contains(text, want) {
			t.Errorf("%s: %q, want %q", id, text, want)
		}
	}
	if u.Week.Utilization != nil {
		if s := b.text("#util-week"); !strings.Contains(s, "50%") || !strings.Contains(s, two(u.Week.IdleGPUHours)+" GPU-hours held idle") {
			t.Errorf("utilisation: %q (%+v)", s, u.Week)
		}
	}
	var label string
	b.eval(`document.querySelector('#usage-days').getAttribute('aria-label')`, &label)
	if !strings.Contains(label, two(sum)+" in all") {
		t.Errorf("the chart's words: %q", label)
	}
	var styled int
	b.eval(`document.querySelectorAll('[style]').length`, &styled)
	if styled != 0 {
		t.Errorf("%d elements carry a style attribute", styled)
	}
	b.check("usage")

	// In Chinese, both pages have their words.
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/; samesite=strict'`, nil)
	b.run(chromedp.Navigate(env.URL + "/usage"))
	b.waitFor("the usage page in Chinese", `document.querySelector('#usage-week-text')`)
	if s := b.text("main"); !strings.Contains(s, "我的用量") || !strings.Contains(s, "本周") || !strings.Contains(s, "GPU 小时") {
		t.Errorf("usage in Chinese: %q", s)
	}
	b.check("usage-zh")
	b.run(chromedp.Navigate(env.URL + "/book"))
	b.waitFor("the book page in Chinese", `document.querySelector('#book-rules')`)
	if s := b.text("main"); !strings.Contains(s, "你的预约") || !strings.Contains(s, "下一周") || !strings.Contains(s, "空闲") {
		t.Errorf("book in Chinese: %q", s)
	}
	b.check("book-zh")
}
