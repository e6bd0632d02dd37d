package portal_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// adminVMs makes the VMs that hold upHost's devices (its inventory names
// them: vm-m0…vm-m3 on the H100's MIG slices 0–3, vm-p2 and vm-p3 on the
// passed-through L40S, vm-v0…vm-v3 on the L40S's vGPUs), running on
// gpu-01, and two that wait in the queue with their reasons.
func adminVMs(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	host := "gpu-01"
	owners := []string{"ann", "bob"}
	type vm struct{ id, name, owner, profile string }
	var vms []vm
	for i := range 4 {
		vms = append(vms, vm{"vm-m" + string(rune('0'+i)), "nb-" + string(rune('0'+i)), owners[i%2], "mig-small"},
			vm{"vm-v" + string(rune('0'+i)), "desk-" + string(rune('0'+i)), owners[i%2], "render-l40s"})
	}
	vms = append(vms, vm{"vm-p2", "sim-big", "bob", "whole-l40s"}, vm{"vm-p3", "train", "ann", "whole-l40s"})
	for _, v := range vms {
		row := &store.VM{ID: v.id, Name: v.name, Owner: v.owner, Profile: v.profile, Hours: 4}
		if _, err := st.CreateVM(ctx, row, store.CreateVMOptions{RequestedBy: v.owner}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateVMState(ctx, row.ID, row.Version, store.VMUpdate{State: store.VMRunning, Host: &host}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.FireAlert(ctx, &store.Alert{Rule: "gpu-hot", Subject: "gpu/gpu-01/0000:41:00.0", Host: host, Metric: "gpu_temperature_celsius",
		Value: 91, Summary: "the H100 is at 91 °C"}); err != nil {
		t.Fatal(err)
	}
	queue := map[string]store.QueueEntry{}
	for _, q := range []struct {
		owner, name, profile, reason string
		pos                          int
	}{
		{"ann", "q-notebook", "mig-small", "no GPU has room for MIG 1g.10gb now", 2},
		{"bob", "q-render", "render-l40s", "every L40S-12Q is taken", 1},
	} {
		row := &store.VM{Name: q.name, Owner: q.owner, Profile: q.profile, Hours: 2}
		if _, err := st.CreateVM(ctx, row, store.CreateVMOptions{RequestedBy: q.owner}); err != nil {
			t.Fatal(err)
		}
		queue[row.ID] = store.QueueEntry{Position: q.pos, Phase: "waiting for a GPU", Reason: q.reason}
	}
	if _, err := st.SetQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}
}

// confirmYes answers the confirmation dialog.
func (b *browser) confirmYes() {
	b.t.Helper()
	b.run(chromedp.WaitVisible(`dialog.confirm #confirm-yes`, chromedp.ByQuery), chromedp.Click(`dialog.confirm #confirm-yes`, chromedp.ByQuery))
}

// fitsPhone checks that the page in view is no wider than a phone's
// screen (what is wider scrolls in its own box), then goes back to the
// desktop size.
func (b *browser) fitsPhone(name string) {
	b.t.Helper()
	var widths []int
	b.run(emulation.SetDeviceMetricsOverride(390, 844, 1, true), chromedp.Sleep(100*time.Millisecond))
	b.eval(`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`, &widths)
	b.run(emulation.SetDeviceMetricsOverride(1280, 800, 1, false))
	if len(widths) != 2 || widths[0] > widths[1] {
		b.t.Errorf("%s: %v wide at phone width (scroll, client)", name, widths)
	}
}

// An admin's fleet and admin pages: the picture of every GPU with who
// holds each MIG slice, a GPU and a host drained and undrained from it; a
// user and a token made (shown once) and revoked; everybody's queue; a
// refused reload at file:line; the audit log filtered; the review report;
// and a user who is no admin kept out of both pages and their API.
func TestAdminPagesInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles, Host: "gpu-01"})
	env.Worker.Pause() // the VMs stay as written
	ctx := context.Background()
	upHost(t, env.Store)
	adminVMs(t, env.Store)
	b := newBrowser(t, env.URL, false)
	b.signIn(env.AdminToken)

	// The fleet picture.
	h100 := `#host-gpu-01 li.gpu[data-address="0000:41:00.0"]`
	b.run(chromedp.Navigate(env.URL+"/admin/fleet"), chromedp.WaitVisible(h100, chromedp.ByQuery))
	b.waitFor("the events stream", `document.querySelector('#live')?.classList.contains('on')`)
	var held []string
	b.eval(`[...document.querySelectorAll('`+h100+` ul.held-list li')].map((li) => li.textContent)`, &held)
	want := []string{"slice 0 1g.10gb ann/nb-0 (mig-small, running)", "slice 1 1g.10gb bob/nb-1 (mig-small, running)",
		"slice 2 1g.10gb ann/nb-2 (mig-small, running)", "slice 3 1g.10gb bob/nb-3 (mig-small, running)"}
	if strings.Join(held, "\n") != strings.Join(want, "\n") {
		t.Errorf("the H100's MIG slices say\n%s\nwant\n%s", strings.Join(held, "\n"), strings.Join(want, "\n"))
	}
	// Drawn: four instances on the compute and the memory row, each at
	// its slice; seven compute and eight memory slots.
	var drawn struct {
		Slots, Held int
		Xs          []string
	}
	b.eval(`(() => { const s = document.querySelector('`+h100+` svg.mig-svg');
	  return {Slots: s.querySelectorAll('rect.slot').length, Held: s.querySelectorAll('g.held').length,
	    Xs: [...s.querySelectorAll('g.held > rect')].slice(0, 4).map((r) => r.getAttribute('x'))}; })()`, &drawn)
	if drawn.Slots != 15 || drawn.Held != 8 || strings.Join(drawn.Xs, ",") != "75,115,155,195" {
		t.Errorf("the MIG picture: %+v", drawn)
	}
	if s := b.text(`#host-gpu-01 li.gpu[data-address="0000:42:00.0"]`); !strings.Contains(s, "L40S-12Q") || !strings.Contains(s, "4 used, 0 free") ||
		!strings.Contains(s, "ann/desk-0 (render-l40s") {
		t.Errorf("the vGPU L40S: %s", s)
	}
	if s := b.text(`#host-gpu-01 li.gpu[data-address="0000:45:00.0"]`); !strings.Contains(s, "Passed through to bob/sim-big") {
		t.Errorf("the passed-through L40S: %s", s)
	}
	if s := b.text(`#host-gpu-01 li.gpu[data-address="0000:43:00.0"]`); !strings.Contains(s, "Idle") {
		t.Errorf("the idle L40S: %s", s)
	}
	b.check("fleet")
	b.fitsPhone("fleet")

	// Drain the H100 from the picture, then undrain it.
	b.run(chromedp.Click(h100+` [data-testid=gpu-drain]`, chromedp.ByQuery))
	b.confirmYes()
	b.waitFor("the H100 marked drained", `document.querySelector('`+h100+`')?.dataset.drained === 'yes' && document.querySelector('`+h100+` [data-testid=drained]')`)
	if drains, err := env.Store.ListGPUDrains(ctx, "gpu-01"); err != nil || len(drains) != 1 || drains[0].GPUAddress != "0000:41:00.0" || drains[0].DrainedBy != "admin" {
		t.Fatalf("drains %+v, %v", drains, err)
	}
	if s := b.text(h100); !strings.Contains(s, "Drained by admin") {
		t.Errorf("the drained H100 says: %s", s)
	}
	b.screenshots("fleet-drained")
	b.run(chromedp.Click(h100+` [data-testid=gpu-drain]`, chromedp.ByQuery))
	b.confirmYes()
	b.waitFor("the H100 undrained", `document.querySelector('`+h100+`')?.dataset.drained === 'no'`)
	if drains, _ := env.Store.ListGPUDrains(ctx, "gpu-01"); len(drains) != 0 {
		t.Errorf("still drained: %+v", drains)
	}
	// A drain made elsewhere (another admin's gpuvm drain) shows live:
	// the page is not read again.
	b.eval(`window.__stayed = 7`, nil)
	if code := adminCall(t, env.URL, env.AdminToken, "POST", "/v1/admin/gpus/0000:41:00.0/drain"); code != http.StatusOK {
		t.Fatalf("drain from outside: %d", code)
	}
	b.waitFor("the outside drain, live", `document.querySelector('`+h100+`')?.dataset.drained === 'yes' && window.__stayed === 7`)
	if code := adminCall(t, env.URL, env.AdminToken, "DELETE", "/v1/admin/gpus/0000:41:00.0/drain"); code != http.StatusOK {
		t.Fatalf("undrain from outside: %d", code)
	}
	b.waitFor("the outside undrain, live", `document.querySelector('`+h100+`')?.dataset.drained === 'no' && window.__stayed === 7`)
	// And the host.
	b.run(chromedp.Click(`#host-gpu-01 [data-testid=host-drain]`, chromedp.ByQuery))
	b.confirmYes()
	b.waitFor("the host drained", `document.querySelector('#host-gpu-01')?.dataset.state === 'draining'`)
	b.run(chromedp.Click(`#host-gpu-01 [data-testid=host-drain]`, chromedp.ByQuery))
	b.confirmYes()
	b.waitFor("the host undrained", `document.querySelector('#host-gpu-01')?.dataset.state === 'up'`)

	// The admin page: a user and a token for them, shown once.
	b.run(chromedp.Navigate(env.URL+"/admin"), chromedp.WaitVisible(`#user-table tr[data-user="ann"]`, chromedp.ByQuery))
	b.run(chromedp.SendKeys(`#new-user input[name=uname]`, "cleo", chromedp.ByQuery),
		chromedp.SendKeys(`#new-user input[name=groups]`, "render, lab", chromedp.ByQuery),
		chromedp.Click(`#new-user button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#user-table tr[data-user="cleo"]`, chromedp.ByQuery))
	if u, err := env.Store.GetUser(ctx, "cleo"); err != nil || u.Admin || strings.Join(u.Groups, ",") != "lab,render" && strings.Join(u.Groups, ",") != "render,lab" {
		t.Errorf("cleo: %+v, %v", u, err)
	}
	b.run(chromedp.Click(`#user-table tr[data-user="cleo"] button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#tokens-panel[data-user="cleo"] input[name=tname]`, chromedp.ByQuery),
		chromedp.SendKeys(`#tokens-panel input[name=tname]`, "laptop", chromedp.ByQuery),
		chromedp.Click(`#new-token-form button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#token-secret`, chromedp.ByQuery))
	var secret string
	b.run(chromedp.Value(`#token-secret`, &secret, chromedp.ByQuery))
	if code := whoami(t, env.URL, secret); code != http.StatusOK {
		t.Errorf("the token the page showed: whoami %d", code)
	}
	b.waitFor("the token listed", `document.querySelector('#tokens-panel tr[data-token]')`)
	b.run(chromedp.Click(`#copy-token`, chromedp.ByQuery))
	b.eval(`window.scrollTo(0, document.querySelector('#users').offsetTop)`, nil)
	b.screenshots("admin-token")

	// Everybody's queue, with the reasons.
	b.waitFor("the queue", `document.querySelector('#queue-table tr[data-vm="bob/q-render"]') && document.querySelector('#queue-table tr[data-vm="ann/q-notebook"]')`)
	var order []string
	b.eval(`[...document.querySelectorAll('#queue-table tbody tr')].map((r) => r.dataset.vm + ' ' + r.cells[0].textContent + ' ' + r.querySelector('.reason').textContent)`, &order)
	if want := []string{"bob/q-render 1 every L40S-12Q is taken", "ann/q-notebook 2 no GPU has room for MIG 1g.10gb now"}; strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("the queue:\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	// A VM asked for now joins it, live.
	late := &store.VM{Name: "q-late", Owner: "bob", Profile: "seat", Hours: 1}
	if _, err := env.Store.CreateVM(ctx, late, store.CreateVMOptions{RequestedBy: "bob"}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the late VM in the queue", `document.querySelector('#queue-table tr[data-vm="bob/q-late"]')`)

	// A refused reload shows where, at file:line; an accepted one says so.
	env.Config.Broken.Store(true)
	b.run(chromedp.Click(`#reload`, chromedp.ByQuery), chromedp.WaitVisible(`#reload-result`, chromedp.ByQuery))
	if s := b.text(`#reload-result`); !strings.Contains(s, "test.hcl:3:1") || !strings.Contains(s, "Unsupported block type") || !strings.Contains(s, "refused") {
		t.Errorf("the refused reload: %s", s)
	}
	b.check("admin")
	b.fitsPhone("admin")
	env.Config.Broken.Store(false)
	b.run(chromedp.Click(`#reload`, chromedp.ByQuery))
	b.waitFor("the reload accepted", `document.querySelector('#reload-result')?.textContent.includes('Reloaded')`)

	// The alerts.
	if s := b.text(`#alert-table`); !strings.Contains(s, "gpu-hot") || !strings.Contains(s, "the H100 is at 91 °C") || !strings.Contains(s, "firing") {
		t.Errorf("the alerts: %s", s)
	}

	// The audit log, filtered: the drains made above, and 55 refused
	// ones, which take two pages.
	for range 55 {
		if code := adminCall(t, env.URL, env.AdminToken, "POST", "/v1/admin/gpus/0000:99:00.0/drain"); code != http.StatusNotFound {
			t.Fatalf("drain of no GPU: %d", code)
		}
	}
	b.run(chromedp.SendKeys(`#audit-filter input[name=aaction]`, "gpu.", chromedp.ByQuery), chromedp.Click(`#audit-filter button[type=submit]`, chromedp.ByQuery))
	b.waitFor("the first page of the drains in the audit log", `(() => { const rows = [...document.querySelectorAll('#audit-table tbody tr')];
	  return rows.length === 50 && rows.every((r) => r.dataset.action.startsWith('gpu.')); })()`)
	b.run(chromedp.Click(`#audit-older`, chromedp.ByQuery))
	// 55 refused drains, 2 drains and 2 undrains of the H100.
	b.waitFor("the older entries", `document.querySelectorAll('#audit-table tbody tr').length === 59 && !document.querySelector('#audit-older')`)
	if s := b.text(`#audit-table`); !strings.Contains(s, "refused (404)") || !strings.Contains(s, "gpu.undrain") {
		t.Errorf("the audit log: %.500s", s)
	}
	// On a phone: the page no wider than the screen, a header that leaves
	// room for the page, and the wide tables scrolling in their own boxes
	// (not cut off at the screen's edge); the groups' hint under Groups.
	l := b.phoneFit("admin", "#user-table", "#audit-table", "#queue-table")
	// The users' table fits a phone as it is, each user a compact block:
	// nothing of it to scroll sideways to (the Tokens button was).
	if u := l.Tables[0]; u.Inner > u.Box {
		t.Errorf("at a phone's width the users' table is %d px wide in a box of %d: it scrolls sideways", u.Inner, u.Box)
	}
	b.run(emulation.SetDeviceMetricsOverride(390, 844, 1, true))
	b.eval(`document.querySelector('#audit').scrollIntoView()`, nil)
	b.screenshots("admin-audit")
	var under bool
	b.eval(`(() => { const i = document.querySelector('#new-user input[name=groups]').getBoundingClientRect(),
	  h = document.querySelector('#groups-hint').getBoundingClientRect();
	  return h.top >= i.bottom - 1 && h.top - i.bottom < 20 && Math.abs(h.left - i.left) < 2; })()`, &under)
	if !under {
		t.Errorf("the groups' hint is not right under the Groups field")
	}

	// The review report: its summary here, the whole of it a link away.
	b.waitFor("the report's summary", `document.querySelector('#report .report-cards')`)
	var href string
	b.eval(`document.querySelector('#open-report').getAttribute('href')`, &href)
	if !strings.HasPrefix(href, "/v1/reports/summary.html?") {
		t.Errorf("the report link %q", href)
	}
	if code := b.jsFetch("GET", href, "", false); code != http.StatusOK {
		t.Errorf("GET %s: %d", href, code)
	}

	// Revoke the token: it stops working.
	b.run(chromedp.Click(`#tokens-panel tr[data-token] button.danger`, chromedp.ByQuery))
	b.confirmYes()
	b.waitFor("the token revoked", `!document.querySelector('#tokens-panel tr[data-token] button.danger')`)
	if code := whoami(t, env.URL, secret); code != http.StatusUnauthorized {
		t.Errorf("the revoked token: whoami %d", code)
	}

	// In Simplified Chinese.
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	b.run(chromedp.Navigate(env.URL+"/admin/fleet"), chromedp.WaitVisible(h100+` ul.held-list li`, chromedp.ByQuery))
	if h, li := b.text(`h1`), b.text(h100+` ul.held-list li`); h != "机群" || !strings.Contains(li, "切片 0") {
		t.Errorf("in Chinese: %q, %q", h, li)
	}
	b.screenshots("fleet-zh")
	b.run(chromedp.Navigate(env.URL+"/admin"), chromedp.WaitVisible(`#users`, chromedp.ByQuery))
	if h := b.text(`#users h2`); h != "用户" {
		t.Errorf("in Chinese, the users' heading: %q", h)
	}
	b.glyphs("admin-zh")
	b.eval(`document.cookie = 'gpuvm_lang=en; path=/'`, nil)

	// A user who is no admin: neither page, nor their API.
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.signIn(env.UserToken)
	for _, p := range []string{"/admin/fleet", "/admin"} {
		b.run(chromedp.Navigate(env.URL+p), chromedp.WaitVisible(`#admins-only`, chromedp.ByQuery))
		if s := b.text(`#admins-only`); s != "For admins only." {
			t.Errorf("%s says %q", p, s)
		}
	}
	b.check("admin-denied")
	var gpuDetail bool
	b.eval(`fetch('/v1/hosts').then((r) => r.json()).then((l) => l.items.some((h) => h.gpu_detail))`, &gpuDetail)
	if gpuDetail {
		t.Error("a user sees the fleet picture's detail in GET /v1/hosts")
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/admin/audit"}, {"GET", "/v1/users"}, {"POST", "/v1/admin/gpus/0000:41:00.0/drain"},
		{"POST", "/v1/admin/hosts/gpu-01/drain"}, {"POST", "/v1/admin/reload"}, {"GET", "/v1/reports/summary.html"}} {
		if code := b.jsFetch(c.method, c.path, "", c.method != "GET"); code != http.StatusForbidden {
			t.Errorf("as ann, %s %s: %d, want 403", c.method, c.path, code)
		}
	}
	if drains, _ := env.Store.ListGPUDrains(ctx, "gpu-01"); len(drains) != 0 {
		t.Errorf("ann drained a GPU: %+v", drains)
	}
}

func whoami(t *testing.T, base, token string) int {
	t.Helper()
	return adminCall(t, base, token, "GET", "/v1/whoami")
}

// adminCall sends a request without a body with a bearer token and returns
// the answer's status.
func adminCall(t *testing.T, base, token, method, path string) int {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}
