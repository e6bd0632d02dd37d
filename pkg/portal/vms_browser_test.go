package portal_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// vmsProfiles are the browser tests' catalogue and a Windows-style seat
// whose desktop is RDP (its guest uses the one-time password), one per
// other desktop, a display without a desktop, and no display.
const vmsProfiles = profiles + `
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
profile "win" {
  vcpus  = 2
  memory = "4GiB"
  boot { kernel = "/k" }
  cloud_init { template = "pw" }
  desktop {
    protocol = "rdp"
  }
  lease {
    default = "2h"
    max     = "6h"
  }
}
profile "stream" {
  boot { kernel = "/k" }
  desktop {
    protocol = "sunshine"
  }
}
profile "cad" {
  boot { kernel = "/k" }
  desktop {
    protocol = "dcv"
    session  = "work"
  }
}
profile "spicy" {
  boot { kernel = "/k" }
  display {
    type = "spice"
  }
}
profile "headless" {
  boot { kernel = "/k" }
  display {
    type = "none"
  }
}
`

// apiCreate asks the API for a VM as ann (so that gpuvmd makes its
// credentials, as for any VM).
func apiCreate(t *testing.T, env *clienttest.Env, req api.CreateVMRequest) api.VM {
	t.Helper()
	body, _ := json.Marshal(req)
	r, _ := http.NewRequest("POST", env.URL+"/v1/vms", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+env.UserToken)
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out api.CreateVMResponse
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("create %+v: %d", req, resp.StatusCode)
	}
	return out.VM
}

// apiGetVM reads GET /v1/vms/{id} as ann, as JSON fields.
func apiGetVM(t *testing.T, env *clienttest.Env, id string) map[string]any {
	t.Helper()
	r, _ := http.NewRequest("GET", env.URL+"/v1/vms/"+id, nil)
	r.Header.Set("Authorization", "Bearer "+env.UserToken)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// injectEstimate makes the browser's GET /v1/vms/{id} of one VM carry the
// estimated start's fields (the estimate helper's; used only while the
// server does not give them yet), by intercepting the answer.
func (b *browser) injectEstimate(id string, fields map[string]any) {
	b.t.Helper()
	chromedp.ListenTarget(b.ctx, func(ev any) {
		paused, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		go func() {
			ctx := cdp.WithExecutor(b.ctx, chromedp.FromContext(b.ctx).Target)
			body, err := fetch.GetResponseBody(paused.RequestID).Do(ctx)
			var vm map[string]any
			if err == nil && paused.ResponseStatusCode == http.StatusOK && json.Unmarshal(body, &vm) == nil {
				for k, v := range fields {
					vm[k] = v
				}
				body, _ = json.Marshal(vm)
			}
			var headers []*fetch.HeaderEntry
			for _, h := range paused.ResponseHeaders {
				if !strings.EqualFold(h.Name, "Content-Length") && !strings.EqualFold(h.Name, "Content-Encoding") {
					headers = append(headers, h)
				}
			}
			_ = fetch.FulfillRequest(paused.RequestID, paused.ResponseStatusCode).WithResponseHeaders(headers).
				WithBody(base64.StdEncoding.EncodeToString(body)).Do(ctx)
		}()
	})
	b.run(fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/v1/vms/" + id, RequestStage: fetch.RequestStageResponse}}))
}

// My VMs in Chromium, past what TestPortalInChromium covers: the GPU a VM
// holds in words, addresses with copy buttons, the lease countdown (and its
// warning under 30 minutes), extend (a refusal in words, then the lease end
// moves), reboot with confirmation, Open desktop of an RDP profile (the
// command to copy and an .rdp file that is downloaded and read), the
// one-time password (shown once, then refused), and a queued VM's estimated
// start in the viewer's time zone.
func TestVMsPageInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: vmsProfiles})
	ctx := context.Background()
	upHost(t, env.Store)
	box := apiCreate(t, env, api.CreateVMRequest{Profile: "mig-small", Name: "box", Hours: 3})
	win := apiCreate(t, env, api.CreateVMRequest{Profile: "win", Name: "win", Hours: 2})
	others := []string{box.ID, win.ID}
	for _, p := range []string{"stream", "cad", "spicy", "headless"} {
		others = append(others, apiCreate(t, env, api.CreateVMRequest{Profile: p, Name: p}).ID)
	}
	// The MIG slice the scheduler would have given box.
	allocs, err := env.Store.ClaimAllocation(ctx, box.ID, []store.SlotClaim{{Host: "test-host", GPUAddress: "0000:41:00.0", Backend: "mig",
		Kind: gpu.KindMIG, Profile: "1g.10gb", PlacementStart: 4, PlacementSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Its MIG-backed vGPU, whose guest the host reports unlicensed.
	if err := env.Store.MarkAllocationCreated(ctx, allocs[0].ID, "0000:41:00.4", "{}"); err != nil {
		t.Fatal(err)
	}
	if err := env.Store.InsertSamples(ctx, []store.GPUSample{{Host: "test-host", GPUAddress: "0000:41:00.0", Instance: "0000:41:00.4",
		VMID: box.ID, User: "ann", TakenAt: time.Now(), GPUUtil: 0.2, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1,
		License: api.VGPUGrace}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range others {
		deadline := time.Now().Add(20 * time.Second)
		for vm, err := env.Store.GetVM(ctx, id); err != nil || vm.State != store.VMRunning || vm.Phase != api.PhaseReady; vm, err = env.Store.GetVM(ctx, id) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never ran: %+v, %v", id, vm, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	// hhmm is a time as the English page writes it (Intl's "en"), in
	// Shanghai, where the browser is.
	hhmm := func(at time.Time) string { return at.In(shanghai).Format("3:04 PM") }
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	// Intl writes "1:36\u202fPM": compare with plain spaces.
	text := func(sel string) string { return strings.NewReplacer("\u202f", " ", "\u00a0", " ").Replace(b.text(sel)) }
	b.run(emulation.SetTimezoneOverride("Asia/Shanghai"), chromedp.Navigate(env.URL+"/vms"),
		chromedp.WaitVisible(`#vm-box[data-state="running"]`, chromedp.ByQuery))
	b.waitFor("box's address", `document.querySelector('#vm-box .addrs code')?.textContent.startsWith('192.0.2.')`)

	// The GPU in words, the address with its copy button, the countdown.
	card := b.text(`#vm-box`)
	if !strings.Contains(card, "MIG 1g.10gb on H100 0000:41:00.0 · not licensed: grace period, it will be throttled") {
		t.Errorf("box's GPU and its licence are not in words:\n%s", card)
	}
	if left := b.text(`#vm-box-left`); !regexp.MustCompile(`^2 h 5\d min left$`).MatchString(left) {
		t.Errorf("box's countdown %q, want about 2 h 59 min left", left)
	}
	var warned bool
	b.eval(`document.querySelector('#vm-box-left').classList.contains('warn')`, &warned)
	if warned {
		t.Errorf("a lease 3 h away is marked as ending soon")
	}
	b.run(cdpbrowser.GrantPermissions([]cdpbrowser.PermissionType{cdpbrowser.PermissionTypeClipboardReadWrite, cdpbrowser.PermissionTypeClipboardSanitizedWrite}).WithOrigin(env.URL))
	ip := b.text(`#vm-box .addrs code`)
	b.run(chromedp.Click(`#vm-box .addrs button.copy`, chromedp.ByQuery))
	b.waitFor("copied", `document.querySelector('main [role=status]').textContent === 'Copied `+ip+`.'`)
	var clip string
	b.eval(`navigator.clipboard.readText()`, &clip)
	if clip != ip {
		t.Errorf("the clipboard has %q, want %q", clip, ip)
	}
	b.check("vms-running")

	// Extend: beyond the profile's maximum the API refuses, in words, and
	// nothing changes; within it the lease end moves.
	before, err := env.Store.GetVM(ctx, box.ID)
	if err != nil || before.LeaseEnd == nil {
		t.Fatalf("%+v %v", before, err)
	}
	b.run(chromedp.Click(`//li[@id="vm-box"]//button[text()="Extend"]`, chromedp.BySearch), chromedp.WaitVisible(`#extend-dialog #extend-hours`, chromedp.ByQuery))
	if hint := text(`#extend-hint`); !strings.Contains(hint, "At most 9 more: the profile allows 12 h and box has 3 h.") ||
		!strings.Contains(hint, hhmm(before.LeaseEnd.Add(time.Hour))) {
		t.Errorf("the extend hint: %q", hint)
	}
	b.check("vms-extend")
	b.run(chromedp.SetValue(`#extend-hours`, "10", chromedp.ByQuery), chromedp.Click(`#extend-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#extend-problem`, chromedp.ByQuery))
	if p := b.text(`#extend-problem`); !strings.Contains(p, "at most 12 hours") || !strings.Contains(p, "at most 9 more") {
		t.Errorf("the refusal: %q", p)
	}
	if cur, _ := env.Store.GetVM(ctx, box.ID); cur.Hours != 3 {
		t.Errorf("a refused extend changed the lease: %d h", cur.Hours)
	}
	b.check("vms-extend-refused")
	b.run(chromedp.SetValue(`#extend-hours`, "2", chromedp.ByQuery), chromedp.Click(`#extend-yes`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#extend-dialog`, chromedp.ByQuery))
	after, err := env.Store.GetVM(ctx, box.ID)
	if err != nil || after.Hours != 5 || after.LeaseEnd == nil || !after.LeaseEnd.Equal(before.LeaseEnd.Add(2*time.Hour)) {
		t.Fatalf("after extending by 2 h: %+v (before %v), %v", after, before.LeaseEnd, err)
	}
	want := after.LeaseEnd.UTC().Format(time.RFC3339)
	b.waitFor("the new lease end", `(() => { const t = document.querySelector('#vm-box time'); return t && new Date(t.dateTime).toISOString().slice(0, 19) + 'Z' === '`+want+`'; })()`)
	if got := text(`#vm-box time`); !strings.Contains(got, hhmm(*after.LeaseEnd)) {
		t.Errorf("the lease end %q, want %s in Shanghai", got, hhmm(*after.LeaseEnd))
	}
	if s := b.text(`main [role=status]`); !strings.Contains(s, "extended by 2 h") {
		t.Errorf("the page says %q", s)
	}

	// Reboot asks first; confirmed, it is an operation of ann's.
	b.run(chromedp.Click(`//li[@id="vm-box"]//button[text()="Reboot"]`, chromedp.BySearch), chromedp.WaitVisible(`dialog.confirm #confirm-yes`, chromedp.ByQuery))
	if q := b.text(`#confirm-text`); !strings.Contains(q, "Reboot box?") {
		t.Errorf("the reboot's question: %q", q)
	}
	b.check("vms-confirm-reboot")
	b.run(chromedp.Click(`#confirm-yes`, chromedp.ByQuery), chromedp.WaitNotPresent(`dialog.confirm`, chromedp.ByQuery))
	b.waitFor("the reboot asked for", `document.querySelector('main [role=status]').textContent.includes('Reboot: asked for box')`)
	ops, err := env.Store.ListOperations(ctx, box.ID)
	if err != nil {
		t.Fatal(err)
	}
	rebooted := false
	for _, op := range ops {
		rebooted = rebooted || op.Kind == store.OpReboot && op.RequestedBy == "ann"
	}
	if !rebooted {
		t.Errorf("no reboot operation by ann: %+v", ops)
	}

	// Under 30 minutes left, the countdown warns. The card keeps what
	// only the VM's whole read has (its addresses) while it is read
	// again: a card that shrank and grew moved the buttons below it under
	// the pointer (a click on win's "Open desktop" hit nothing).
	b.run(chromedp.Evaluate(`window.boxShrank = false; new MutationObserver(() => {
		if (!document.querySelector('#vm-box .addrs')) window.boxShrank = true;
	}).observe(document.querySelector('main'), {childList: true, subtree: true, characterData: true})`, nil))
	cur, err := env.Store.GetVM(ctx, box.ID)
	if err != nil {
		t.Fatal(err)
	}
	soon := env.Store.Now().Add(20*time.Minute + 30*time.Second)
	if _, err := env.Store.UpdateVMState(ctx, box.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, LeaseEnd: &soon}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the warning", `document.querySelector('#vm-box-left.warn')?.textContent.includes('20 min left')`)
	if s := b.text(`#vm-box-left`); !strings.Contains(s, "ends soon") {
		t.Errorf("the warning says %q", s)
	}
	var shrank bool
	b.run(chromedp.Evaluate(`window.boxShrank`, &shrank))
	if shrank {
		t.Error("box's card lost its addresses while it was read again after its lease changed")
	}

	// Open desktop of an RDP profile: the command to copy, and the .rdp
	// file, downloaded, for the tunnel at the guest's port with the guest
	// user and no password.
	dir := t.TempDir()
	b.run(cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(dir))
	b.run(chromedp.Click(`//li[@id="vm-win"]//button[text()="Open desktop"]`, chromedp.BySearch), chromedp.WaitVisible(`#vm-win-desktop-rdp`, chromedp.ByQuery))
	panel := b.text(`#vm-win-desktop`)
	for _, w := range []string{"gpuvm rdp win", "gpuvm tunnel win 3389 --local-port 3389", "its user is ann", "Browser console"} {
		if !strings.Contains(panel, w) {
			t.Errorf("the RDP panel does not say %q:\n%s", w, panel)
		}
	}
	b.check("vms-desktop-rdp")
	b.run(chromedp.Click(`#vm-win-desktop-rdp`, chromedp.ByQuery))
	var rdp []byte
	for deadline := time.Now().Add(20 * time.Second); ; {
		if rdp, err = os.ReadFile(filepath.Join(dir, "win.rdp")); err == nil && len(rdp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			ls, _ := os.ReadDir(dir)
			t.Fatalf("no win.rdp downloaded into %s: %v", dir, ls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if want := "full address:s:127.0.0.1:3389\r\nusername:s:ann\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"; string(rdp) != want {
		t.Errorf("win.rdp is %q, want %q", rdp, want)
	}
	b.run(chromedp.Click(`#vm-win-desktop button.copy`, chromedp.ByQuery))
	b.waitFor("the command copied", `document.querySelector('main [role=status]').textContent === 'Copied gpuvm rdp win.'`)

	// The other protocols: what to run, what to open.
	for _, tc := range []struct {
		vm   string
		want []string
	}{
		{"stream", []string{"gpuvm desktop stream", "add the host 127.0.0.1:47989 in Moonlight", "--pin NNNN", "Sunshine's web page"}},
		{"cad", []string{"port 8443", "gpuvm desktop cad", "DCV in the browser", "DCV's client"}},
		{"spicy", []string{"virt-viewer", "Download spicy.vv"}},
	} {
		// spicy's display is no desktop (no desktop block): its console.
		button := map[bool]string{true: "Console", false: "Open desktop"}[tc.vm == "spicy"]
		b.run(chromedp.Click(`//li[@id="vm-`+tc.vm+`"]//button[text()="`+button+`"]`, chromedp.BySearch), chromedp.WaitVisible(`#vm-`+tc.vm+`-desktop`, chromedp.ByQuery))
		panel := b.text(`#vm-` + tc.vm + `-desktop`)
		for _, w := range tc.want {
			if !strings.Contains(panel, w) {
				t.Errorf("the %s panel does not say %q:\n%s", tc.vm, w, panel)
			}
		}
	}
	var links []string
	b.eval(`[...document.querySelectorAll('#vm-cad-desktop a, #vm-stream-desktop a, #vm-spicy-desktop a')].map((a) => a.getAttribute('href'))`, &links)
	if strings.Join(links, " ") != "https://127.0.0.1:47990/ https://127.0.0.1:8443/#work dcv://127.0.0.1:8443/#work /v1/vms/"+others[4]+"/console.vv" {
		t.Errorf("the desktop links: %q", links)
	}
	b.check("vms-desktops")
	// No display and no desktop, but a network: nothing to open, no
	// password (its guest uses none), the SSH line to copy.
	if s := b.text(`#vm-headless`); strings.Contains(s, "Open desktop") || strings.Contains(s, "Console") ||
		strings.Contains(s, "Show password once") || b.text(`#vm-headless dd.ssh code`) != "gpuvm ssh headless" {
		t.Errorf("headless offers other than SSH:\n%s", s)
	}

	// The one-time password: a warning first; shown once; then refused.
	b.run(chromedp.Click(`//li[@id="vm-win"]//button[text()="Show password once"]`, chromedp.BySearch), chromedp.WaitVisible(`dialog.confirm #confirm-yes`, chromedp.ByQuery))
	if q := b.text(`#confirm-text`); !strings.Contains(q, "shown only once") {
		t.Errorf("the password's warning: %q", q)
	}
	b.check("vms-confirm-password")
	b.run(chromedp.Click(`#confirm-yes`, chromedp.ByQuery), chromedp.WaitVisible(`#vm-win-password code.pw`, chromedp.ByQuery))
	pw := b.text(`#vm-win-password code.pw`)
	if len(pw) < 12 || !strings.Contains(b.text(`#vm-win-password`), "ann") || strings.Contains(string(rdp), pw) {
		t.Errorf("the password shown: %q in %q", pw, b.text(`#vm-win-password`))
	}
	b.check("vms-password")
	b.run(chromedp.Click(`//section[@id="vm-win-password"]//button[text()="Hide"]`, chromedp.BySearch), chromedp.WaitNotPresent(`#vm-win-password`, chromedp.ByQuery))
	// Read, it is not offered again.
	if s := b.text(`#vm-win .buttons`); strings.Contains(s, "Show password once") {
		t.Errorf("the password is offered again after it was read: %q", s)
	}
	// Reloaded, the page does not offer it either: the server says it was read.
	b.run(chromedp.Reload(), chromedp.WaitVisible(`#vm-win[data-state="running"] .buttons`, chromedp.ByQuery))
	if s := b.text(`#vm-win .buttons`); strings.Contains(s, "Show password once") {
		t.Errorf("a reloaded page offers the password that was read: %q", s)
	}
	// A page that did not see it read (read elsewhere, with the CLI, while
	// the page was open) offers it; asked, it is refused once, in words,
	// at the time in the viewer's zone, and the button goes.
	win2 := apiCreate(t, env, api.CreateVMRequest{Profile: "win", Name: "win2", Hours: 2})
	b.waitFor("win2, ready, its password offered", `document.querySelector('#vm-win2[data-state="running"] [data-testid=state]')?.textContent.includes('ready') && document.querySelector('#vm-win2 .buttons')?.textContent.includes('Show password once')`)
	time.Sleep(time.Second) // the page has had win2's last event (the read makes none)
	if code := apiReadCredentials(t, env, win2.ID); code != http.StatusOK {
		t.Fatalf("read win2's password behind the page: %d", code)
	}
	b.run(chromedp.Click(`//li[@id="vm-win2"]//button[text()="Show password once"]`, chromedp.BySearch), chromedp.WaitVisible(`dialog.confirm #confirm-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-yes`, chromedp.ByQuery), chromedp.WaitVisible(`#vm-win2-password[role=alert]`, chromedp.ByQuery))
	refused := text(`#vm-win2-password`)
	if !strings.HasPrefix(refused, "This password was read on ") || strings.Count(refused, "read") != 1 || !strings.Contains(refused, "gpuvm ssh win2, then passwd") ||
		regexp.MustCompile(`\d{4}-\d\d-\d\dT|UTC|Z\b`).MatchString(refused) || strings.Contains(refused, pw) {
		t.Errorf("the second look: %q", refused)
	}
	if s := b.text(`#vm-win2 .buttons`); strings.Contains(s, "Show password once") {
		t.Errorf("the password is offered after the refusal: %q", s)
	}
	b.check("vms-password-refused")

	// A queued VM: its estimated start in the viewer's time zone (the
	// server's own when it gives one; else injected into its answer).
	env.Worker.Pause()
	later := apiCreate(t, env, api.CreateVMRequest{Profile: "seat", Name: "later"})
	b.waitFor("later, queued", `document.querySelector('#vm-later')?.dataset.state === 'queued'`)
	if s := b.text(`#vm-later`); !strings.Contains(s, "2 h, counted from when it runs") {
		t.Errorf("a queued VM's lease:\n%s", s)
	}
	if got := apiGetVM(t, env, later.ID); got["estimated_start"] == nil {
		var none bool
		b.eval(`!document.querySelector('#vm-later-estimate')`, &none)
		if !none {
			t.Errorf("an estimate without estimated_start: %s", b.text(`#vm-later`))
		}
		at := time.Now().Add(35*time.Minute + 20*time.Second).UTC().Truncate(time.Second)
		b.injectEstimate(later.ID, map[string]any{"estimated_start": at.Format(time.RFC3339), "estimated_start_uncertain": true,
			"estimated_start_note": "2 running VMs may be extended", "estimate_stale": true})
		b.run(chromedp.Reload(), chromedp.WaitVisible(`#vm-later-estimate`, chromedp.ByQuery))
		// 35 min, or 34 when the machine is slow.
		// With the date when it is another day in the viewer's zone.
		wantText := regexp.MustCompile(`^Expected to start about (?:[A-Z][a-z]{2} \d{1,2}, \d{4}, )?` + regexp.QuoteMeta(hhmm(at)) + ` \(in 3[45] min\)\.\s*Uncertain: 2 running VMs may be extended\s*The queue changed since: being updated\.$`)
		if got := text(`#vm-later-estimate`); !wantText.MatchString(got) {
			t.Errorf("the estimate says %q, want %s", got, wantText)
		}
	} else {
		at, err := time.Parse(time.RFC3339, got["estimated_start"].(string))
		if err != nil {
			t.Fatal(err)
		}
		b.run(chromedp.Reload(), chromedp.WaitVisible(`#vm-later-estimate`, chromedp.ByQuery))
		if got := text(`#vm-later-estimate`); !strings.Contains(got, hhmm(at)) {
			t.Errorf("the estimate says %q, want the time %s", got, hhmm(at))
		}
		t.Log("the server gave an estimate: the page's words for a stale one are not looked at")
	}
	if s := b.text(`#vm-box`); strings.Contains(s, "Expected to start") {
		t.Errorf("a running VM with an estimated start: %s", s)
	}
	b.check("vms-queued-estimate")

	// In Chinese.
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		return network.SetCookie("gpuvm_lang", "zh-CN").WithURL(env.URL).Do(ctx)
	}), chromedp.Reload(), chromedp.WaitVisible(`#vm-later-estimate`, chromedp.ByQuery))
	if s := text(`#vm-later-estimate`); !strings.Contains(s, "预计约") || !regexp.MustCompile(`（3[45] 分钟后）`).MatchString(s) {
		t.Errorf("the Chinese estimate: %q", s)
	}
	if s := text(`#vm-box`); !strings.Contains(s, "延长") || !strings.Contains(s, "重启") || !strings.Contains(s, "即将结束") || !strings.Contains(s, "0000:41:00.0 上的 MIG 1g.10gb") {
		t.Errorf("the Chinese card:\n%s", s)
	}
	b.check("vms-zh")
}

// apiCreateAs asks the API for a VM with token (apiCreate's, for another
// person).
// apiReadCredentials reads a VM's one-time password as its owner, as gpuvm
// credentials does, and returns the answer's status.
func apiReadCredentials(t *testing.T, env *clienttest.Env, id string) int {
	t.Helper()
	r, _ := http.NewRequest("POST", env.URL+"/v1/vms/"+id+"/credentials", nil)
	r.Header.Set("Authorization", "Bearer "+env.UserToken)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func apiCreateAs(t *testing.T, env *clienttest.Env, token string, req api.CreateVMRequest) api.VM {
	t.Helper()
	body, _ := json.Marshal(req)
	r, _ := http.NewRequest("POST", env.URL+"/v1/vms", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out api.CreateVMResponse
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("create %+v: %d", req, resp.StatusCode)
	}
	return out.VM
}

// My VMs offers exactly what each VM has, and is the person's own: a tiny
// guest (a display, a network, a template without the password) shows the
// SSH line to copy and its console, and neither a desktop nor a password;
// an admin's My VMs lists the admin's own VMs, and everybody's, with their
// owners, only when asked.
func TestVMsPageOffersWhatTheVMHas(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles + `
template "keys" {
  content = "#cloud-config\nuser: ${user}\n"
}
profile "tiny" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/k" }
  cloud_init { template = "keys" }
}
`})
	ctx := context.Background()
	upHost(t, env.Store)
	tiny := apiCreate(t, env, api.CreateVMRequest{Profile: "tiny", Name: "tiny"})
	own := apiCreateAs(t, env, env.AdminToken, api.CreateVMRequest{Profile: "tiny", Name: "own"})
	for _, id := range []string{tiny.ID, own.ID} {
		deadline := time.Now().Add(20 * time.Second)
		for vm, err := env.Store.GetVM(ctx, id); err != nil || vm.State != store.VMRunning || vm.Phase != api.PhaseReady; vm, err = env.Store.GetVM(ctx, id) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never ran: %+v, %v", id, vm, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	b.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-tiny[data-state="running"]`, chromedp.ByQuery))
	b.waitFor("tiny's SSH line", `!!document.querySelector('#vm-tiny dd.ssh code')`)
	card := b.text(`#vm-tiny`)
	if got := b.text(`#vm-tiny dd.ssh code`); got != "gpuvm ssh tiny" {
		t.Errorf("tiny's SSH line %q", got)
	}
	for _, not := range []string{"Open desktop", "Show password once", "gpuvm rdp", "Owner"} {
		if strings.Contains(card, not) {
			t.Errorf("tiny's card offers %q:\n%s", not, card)
		}
	}
	if !strings.Contains(b.text(`#vm-tiny .buttons`), "Console") {
		t.Errorf("tiny's card has no console:\n%s", card)
	}
	if s := b.text(`main`); strings.Contains(s, "Everybody's VMs") || strings.Contains(s, "own") {
		t.Errorf("ann's page shows the admin's toggle or VM:\n%s", s)
	}
	b.check("vms-tiny")

	// The admin's own VMs; everybody's only when asked, with owners.
	b2 := newBrowser(t, env.URL, false)
	b2.signIn(env.AdminToken)
	b2.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-own[data-state="running"]`, chromedp.ByQuery))
	var ids []string
	b2.eval(`[...document.querySelectorAll('ul.vms > li')].map((li) => li.id)`, &ids)
	if strings.Join(ids, " ") != "vm-own" {
		t.Errorf("the admin's My VMs: %v, want only vm-own", ids)
	}
	if s := b2.text(`#vm-own`); strings.Contains(s, "Owner") {
		t.Errorf("the admin's own VM names its owner:\n%s", s)
	}
	b2.check("vms-admin-own")
	b2.run(chromedp.Click(`#vms-everyone`, chromedp.ByQuery), chromedp.WaitVisible(`#vm-tiny`, chromedp.ByQuery))
	if got := b2.text(`#vm-tiny dd.owner`); got != "ann" {
		t.Errorf("ann's VM in everybody's: owner %q", got)
	}
	// The password is its owner's only: not offered to the admin.
	if s := b2.text(`#vm-tiny .buttons`); strings.Contains(s, "Show password once") {
		t.Errorf("the admin is offered ann's password: %q", s)
	}
	b2.check("vms-admin-everyone")
}

// A VM's card says what its state allows — disk and RAM snapshots, suspend,
// live migration — with the server's reasons, in English and in Chinese.
func TestVMsPageShowsCapabilities(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles, Host: "test-host", Capabilities: &capability.Host{
		Hypervisor: capability.HypervisorOf("QEMU", 9000000, 7002000), // Debian 12: libvirt 9.0, QEMU 7.2
		NVML:       capability.NVMLFacts{Known: true, Simulated: true, Migration: map[string]bool{"0000:41:00.0": true}},
	}})
	upHost(t, env.Store)
	apiCreate(t, env, api.CreateVMRequest{Profile: "mig-small", Name: "nb"})
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	b.run(chromedp.Navigate(env.URL + "/vms"))
	b.openCapabilities("nb")
	for sel, want := range map[string]string{
		`#vm-nb-caps summary`:                         "What its state allows",
		`#vm-nb-caps [data-cap="disk_snapshot"] dt`:   "Disk snapshot",
		`#vm-nb-caps [data-cap="disk_snapshot"] dd`:   "no the VM has no disk (it boots a kernel directly)",
		`#vm-nb-caps [data-cap="memory_snapshot"] dt`: "RAM snapshot",
		`#vm-nb-caps [data-cap="memory_snapshot"] dd`: "no QEMU 7.2 is older than 8.1, which VFIO migration needs",
		`#vm-nb-caps [data-cap="suspend"] dt`:         "Suspend",
		`#vm-nb-caps [data-cap="suspend"] dd`:         "no QEMU 7.2 is older than 8.1, which VFIO migration needs",
		`#vm-nb-caps [data-cap="live_migration"] dt`:  "Live migration",
		`#vm-nb-caps [data-cap="live_migration"] dd`:  "no QEMU 7.2 is older than 8.1, which VFIO migration needs",
		`#vm-nb-caps .basis`:                          "Judged on: libvirt 9.0.0, QEMU 7.2.0",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	b.check("vms-capabilities")

	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	b.run(chromedp.Navigate(env.URL + "/vms"))
	b.openCapabilities("nb")
	for sel, want := range map[string]string{
		`#vm-nb-caps summary`:                        "其状态允许的操作",
		`#vm-nb-caps [data-cap="disk_snapshot"] dt`:  "磁盘快照",
		`#vm-nb-caps [data-cap="disk_snapshot"] dd`:  "不可以 该虚拟机没有磁盘（它直接引导内核）",
		`#vm-nb-caps [data-cap="suspend"] dd`:        "不可以 QEMU 7.2 早于 VFIO 迁移所需的 8.1",
		`#vm-nb-caps [data-cap="live_migration"] dt`: "热迁移",
		`#vm-nb-caps .basis`:                         "依据：libvirt 9.0.0, QEMU 7.2.0",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s in Chinese: %q, want %q", sel, got, want)
		}
	}
	if en := b.text(`#vm-nb-caps`); strings.Contains(en, "older than") || strings.Contains(en, "What its state") {
		t.Errorf("English left in Chinese:\n%s", en)
	}
	b.check("vms-capabilities-zh")

	// On a phone each capability's reason is under its name, the width of
	// the card, not squeezed beside it.
	b.run(emulation.SetDeviceMetricsOverride(390, 844, 1, true), chromedp.Sleep(100*time.Millisecond))
	var stacked bool
	b.eval(`(() => { const row = document.querySelector('#vm-nb-caps [data-cap="memory_snapshot"]');
	  const dt = row.querySelector('dt').getBoundingClientRect(), dd = row.querySelector('dd').getBoundingClientRect();
	  return dd.top >= dt.bottom - 1 && Math.abs(dd.left - dt.left) < 2; })()`, &stacked)
	if !stacked {
		t.Error("at 390 px a capability's reason is beside its name, not under it")
	}
	b.check("vms-capabilities-phone")
}

// openCapabilities opens the capabilities of VM name's card once its
// details (GET /v1/vms/{id}) are drawn: the list may redraw it first.
func (b *browser) openCapabilities(name string) {
	b.t.Helper()
	b.waitFor(name+"'s capabilities", `(() => { const d = document.querySelector('#vm-`+name+`-caps');
	  if (!d) return false; d.open = true; return d.querySelector('[data-cap="suspend"] .why').innerText !== ''; })()`)
}

// A VM placed on another node than its owner's home says so on its card,
// naming both nodes, in English and in Chinese; a VM at home says nothing.
func TestVMsPageSaysAwayFromHome(t *testing.T) {
	needBrowser(t)
	cfg := profiles + homedProfile + fmt.Sprintf("server {\n  storage {\n    homes {\n      root = %q\n    }\n  }\n}\n", t.TempDir())
	env := clienttest.New(t, clienttest.Options{Profiles: cfg, Host: "gpu-01"})
	env.Worker.Pause() // the VMs stay as written
	ctx := context.Background()
	if _, err := env.Store.RecordHomeHost(ctx, "ann", "gpu-01"); err != nil {
		t.Fatal(err)
	}
	for name, host := range map[string]string{"near": "gpu-01", "far": "gpu-02"} {
		vm := &store.VM{Name: name, Owner: "ann", Profile: "homed", Hours: 2}
		if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		finishOps(t, env.Store, vm.ID)
		if _, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady, Host: &host}); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	for _, c := range []struct{ lang, want string }{
		{"en", "This VM runs on gpu-02, but the home of ann is on gpu-01, which could not serve it: the home it mounts is another folder, on gpu-02, without the files of the home on gpu-01."},
		{"zh-CN", "此虚拟机运行在 gpu-02 上，但 ann 的主目录在 gpu-01 上，而 gpu-01 当时无法运行它：它挂载的主目录是 gpu-02 上的另一个文件夹，其中没有 gpu-01 上主目录的文件。"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/'`, nil)
		b.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-far [data-testid="away-from-home"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#vm-near`, chromedp.ByQuery))
		if got := b.text(`#vm-far [data-testid="away-from-home"]`); got != c.want {
			t.Errorf("%s: the notice of far says %q, want %q", c.lang, got, c.want)
		}
		var atHome int
		b.eval(`document.querySelectorAll('#vm-near [data-testid="away-from-home"]').length`, &atHome)
		if atHome != 0 {
			t.Errorf("%s: the VM at home says it is away", c.lang)
		}
		b.check("vms-away-from-home-" + c.lang)
	}
}

// driverProfile is a vGPU profile with a disk (its VMs' disks can be
// snapshotted), beside the catalogue's kernel-booted ones.
const driverProfile = `
image "desk" { imported = "ubuntu" }
profile "render-desk" {
  vcpus  = 8
  memory = "32GiB"
  disk { image = "desk" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
`

// A driver change an admin announced is said on the cards of the VMs it
// concerns (vGPU and MIG, in English and Chinese): a VM with a disk offers
// the snapshot first, and the button takes it with the server's label; a
// kernel-booted one says its disk cannot be; a whole GPU's card says
// nothing.
func TestVMsPageSaysDriverChange(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles + driverProfile, Host: "gpu-01"})
	env.Worker.Pause() // the VMs stay as written
	ctx := context.Background()
	host := "gpu-01"
	ids := map[string]string{}
	for name, prof := range map[string]string{"desk": "render-desk", "slice": "mig-small", "whole": "whole-l40s"} {
		vm := &store.VM{Name: name, Owner: "ann", Profile: prof, Hours: 2}
		if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		finishOps(t, env.Store, vm.ID)
		state := store.VMRunning
		if name == "slice" {
			state = store.VMStopped // told too: it starts again on the new manager
		}
		if _, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: state, Phase: api.PhaseReady, Host: &host}); err != nil {
			t.Fatal(err)
		}
		ids[name] = vm.ID
	}
	at := time.Date(2031, 12, 12, 9, 0, 0, 0, time.UTC)
	dc := &api.DriverChange{Driver: "550.90.07", At: at, Note: "vGPU 17.4", By: "admin"}
	if err := env.Store.AnnounceDriverChange(ctx, dc); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	for _, c := range []struct{ lang, desk, offer, slice string }{
		{"en", "The hosts' NVIDIA vGPU manager moves to 550.90.07 on ", "Take a snapshot of its disk first, labelled before-driver-550.90.07, to go back to if the new driver does not work:",
			"Its disk cannot be snapshotted: it boots a kernel directly."},
		{"zh-CN", "主机的 NVIDIA vGPU 管理器将于 ", "请先为它的磁盘拍一个快照（标签 before-driver-550.90.07），新驱动不可用时可以恢复：", "它的磁盘无法拍快照：它直接引导内核。"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/'`, nil)
		b.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-desk [data-testid="driver-change"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#vm-slice [data-testid="driver-change"]`, chromedp.ByQuery), chromedp.WaitVisible(`#vm-whole`, chromedp.ByQuery))
		desk := b.text(`#vm-desk [data-testid="driver-change"]`)
		for _, want := range []string{c.desk, "(vGPU 17.4)", "desk", c.offer} {
			if !strings.Contains(desk, want) {
				t.Errorf("%s: desk's notice %q lacks %q", c.lang, desk, want)
			}
		}
		if got := b.text(`#vm-slice [data-testid="driver-change"]`); !strings.Contains(got, c.slice) || !strings.Contains(got, "550.90.07") {
			t.Errorf("%s: slice's notice %q, want it to say %q", c.lang, got, c.slice)
		}
		var whole int
		b.eval(`document.querySelectorAll('#vm-whole [data-testid="driver-change"]').length`, &whole)
		if whole != 0 {
			t.Errorf("%s: the whole GPU's card names the vGPU manager's change", c.lang)
		}
		b.check("vms-driver-change-" + c.lang)
	}
	// The offered snapshot, taken from the card with the server's label.
	b.click(`#vm-desk [data-testid="driver-change"] button`)
	b.waitFor("the snapshot taken", `document.querySelector('#vm-desk [data-testid="driver-change"] .taken')`)
	snaps, err := env.Store.ListSnapshots(ctx, ids["desk"])
	if err != nil || len(snaps) != 1 || snaps[0].Label != "before-driver-550.90.07" {
		t.Errorf("desk's snapshots after the click: %+v %v", snaps, err)
	}
}
