package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	cdruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// profiles are the catalogue of the browser tests: a MIG slice, a vGPU, a
// whole GPU and a seat without one (whose VMs the tests ask for).
const profiles = `
profile "mig-small" {
  description = "a small slice for notebooks"
  vcpus  = 4
  memory = "16GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
    model   = "H100"
  }
  lease {
    default = "4h"
    max     = "12h"
  }
}
profile "render-l40s" {
  vcpus  = 8
  memory = "32GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
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
  description = "a test seat"
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  lease {
    default = "2h"
    max     = "8h"
  }
}
`

// chromium finds a Chromium (or Chrome) binary, as pkg/server's console
// test does.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where a test keeps what people should look at:
// $GPUVM_TEST_ARTIFACTS/<test>, else .cache/test-artifacts/<test> at the top
// of the repository (git-ignored).
func artifactDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("GPUVM_TEST_ARTIFACTS")
	if root == "" {
		abs, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		root = filepath.Join(abs, ".cache", "test-artifacts")
	}
	dir := filepath.Join(root, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func needBrowser(t testing.TB) string {
	t.Helper()
	b := chromium()
	if b == "" {
		t.Skip("no Chromium on this machine: apt-get install chromium (scripts/setup-host.sh installs it)")
	}
	if portal.Bundled() == "" {
		t.Skip("the portal's script is not bundled in this build: run scripts/fetch-portal.sh (make test does) and test again")
	}
	return b
}

// browser is a headless Chromium on a portal, which records every request
// it makes, the headers of every page, and the page's CSP violations.
type browser struct {
	t    testing.TB
	ctx  context.Context
	base string

	mu       sync.Mutex
	requests []string                   // every URL asked for
	pages    map[string]network.Headers // the headers of each document
	sizes    map[network.RequestID]float64
	console  []string
}

// cspWatch runs before any script of every page: it keeps the CSP
// violations the page meets.
const cspWatch = `window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`

func newBrowser(t testing.TB, base string, noCache bool) *browser {
	t.Helper()
	exe := needBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 800),
		chromedp.Flag("accept-lang", "en-GB,en"))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	b := &browser{t: t, ctx: bctx, base: base, pages: map[string]network.Headers{}, sizes: map[network.RequestID]float64{}}
	chromedp.ListenTarget(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		case *network.EventResponseReceived:
			if ev.Type == network.ResourceTypeDocument {
				b.pages[ev.Response.URL] = ev.Response.Headers
			}
		case *network.EventLoadingFinished:
			b.sizes[ev.RequestID] = ev.EncodedDataLength
		case *cdruntime.EventConsoleAPICalled:
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.console = append(b.console, string(ev.Type)+": "+strings.Join(parts, " "))
		case *cdruntime.EventExceptionThrown:
			b.console = append(b.console, "exception: "+ev.ExceptionDetails.Error())
		}
	})
	// The first run starts the browser, which lives as long as the context
	// of that run: bctx itself, not one of run's shorter ones.
	err := chromedp.Run(bctx, network.Enable(), network.SetCacheDisabled(noCache), chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(cspWatch).Do(ctx)
		return err
	}))
	if err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return b
}

// run runs actions, failing the test with what the page said.
func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute) // a wait that never ends fails here
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var loc, text string
		sctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		_ = chromedp.Run(sctx, chromedp.Location(&loc), chromedp.Text("body", &text, chromedp.ByQuery))
		cancel()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.t.Fatalf("%v\nat %s, the page says:\n%s\nits console:\n%s", err, loc, text, strings.Join(b.console, "\n"))
	}
}

// eval runs a script (awaiting its promise) and decodes its value.
func (b *browser) eval(js string, out any) {
	b.t.Helper()
	if out == nil {
		var ignored any
		out = &ignored
	}
	b.run(chromedp.Evaluate(js, out, func(p *cdruntime.EvaluateParams) *cdruntime.EvaluateParams { return p.WithAwaitPromise(true) }))
}

// waitFor polls a script until it is true.
func (b *browser) waitFor(what, js string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// A page that is navigating answers with an error: try again.
		var ok bool
		err := chromedp.Run(b.ctx, chromedp.Evaluate("(() => { try { return !!("+js+"); } catch (e) { return false; } })()", &ok))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			b.run(chromedp.Text("body", &text, chromedp.ByQuery))
			b.t.Fatalf("%s: never came; the page says:\n%s", what, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var axeSource = sync.OnceValues(func() ([]byte, error) { return os.ReadFile("testdata/axe-core/axe.min.js") })

// check checks the page in view: the CSP and framing headers of its
// document, no CSP violation, nothing asked of another origin, and (with
// axe-core) no serious or critical accessibility violation, in the light
// and the dark theme. Then it keeps screenshots at desktop and phone widths.
func (b *browser) check(name string) {
	b.t.Helper()
	start := time.Now()
	defer func() { b.t.Logf("checked %s in %v", name, time.Since(start).Round(time.Millisecond)) }()
	var loc string
	b.run(chromedp.Location(&loc))
	loc, _, _ = strings.Cut(loc, "#")
	b.mu.Lock()
	h, ok := b.pages[loc]
	reqs := slices.Clone(b.requests)
	b.mu.Unlock()
	if !ok {
		b.t.Errorf("%s: no document response seen for %s", name, loc)
	} else if h["Content-Security-Policy"] != portal.CSP || h["X-Frame-Options"] != "DENY" || h["Referrer-Policy"] != "no-referrer" {
		b.t.Errorf("%s: headers %v", name, h)
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r, b.base+"/") && !strings.HasPrefix(r, "data:") {
			b.t.Errorf("%s: asked another origin for %s", name, r)
		}
	}
	var csp []string
	b.eval(`window.__csp`, &csp)
	if len(csp) > 0 {
		b.t.Errorf("%s: CSP violations %v", name, csp)
	}
	for _, theme := range []string{"light", "dark"} {
		b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme}}))
		b.axe(name + " (" + theme + ")")
	}
	b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}))
	b.screenshots(name)
}

func (b *browser) axe(name string) {
	b.t.Helper()
	src, err := axeSource()
	if err != nil {
		b.t.Logf("%s: no accessibility check: axe-core is not here (%v): run scripts/fetch-portal.sh", name, err)
		return
	}
	var loaded bool
	b.eval(`typeof axe === 'object'`, &loaded)
	if !loaded {
		b.eval(string(src)+";true", nil)
	}
	if !loaded {
		// A negative control, once per page load: axe must find the
		// critical violation of an image without a text alternative.
		var found []string
		b.eval(`(async () => {
		  const d = document.createElement('div'); d.innerHTML = '<img src="data:,">'; document.body.append(d);
		  try { return (await axe.run(d, {runOnly: ['image-alt']})).violations.map((v) => v.impact + ' ' + v.id); } finally { d.remove(); }
		})()`, &found)
		if !slices.Contains(found, "critical image-alt") {
			b.t.Fatalf("%s: axe-core does not see an image without alt (%v): the check checks nothing", name, found)
		}
	}
	var bad []string
	b.eval(`axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations
	  .filter((v) => v.impact === 'serious' || v.impact === 'critical')
	  .map((v) => v.impact + ' ' + v.id + ': ' + v.help + ' — ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))`, &bad)
	for _, v := range bad {
		b.t.Errorf("%s: accessibility: %s", name, v)
	}
}

// screenshots keeps the page at desktop (1280×800) and phone (390×844)
// widths. A page in Chinese must first draw its Chinese with real glyphs
// (glyphs), else its pictures are rows of empty boxes.
func (b *browser) screenshots(name string) {
	b.t.Helper()
	b.glyphs(name)
	dir := artifactDir(b.t)
	for _, v := range []struct {
		size   string
		w, h   int64
		mobile bool
	}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}} {
		var png []byte
		b.run(page.BringToFront(), emulation.SetDeviceMetricsOverride(v.w, v.h, 1, v.mobile), chromedp.Sleep(100*time.Millisecond), chromedp.CaptureScreenshot(&png))
		p := filepath.Join(dir, name+"-"+v.size+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot %s", p)
	}
	b.run(emulation.SetDeviceMetricsOverride(1280, 800, 1, false))
}

// upHost reports a host (its heartbeat's inventory) with an H100 in MIG
// mode holding four 1g.10gb instances (three more fit), an L40S whose four
// L40S-12Q are all taken, and four whole L40S of which two are idle.
func upHost(t testing.TB, st *store.Store) {
	t.Helper()
	ip := func(i int) *int { return &i }
	inv := gpu.HostInventory{GPUs: []gpu.HostGPU{
		{Address: "0000:41:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true,
			Backends: map[string]string{"mig": ""}, MIGProfiles: []gpu.MIGOffer{{Name: "1g.10gb", FreeStarts: []int{4, 5, 6}}}},
		{Address: "0000:42:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeVGPU, Backends: map[string]string{"vgpu": ""},
			VGPUTypes: []gpu.VGPUOffer{{Name: "L40S-12Q", Available: 0}}},
	}}
	for i, mode := range []gpu.Mode{gpu.ModeIdle, gpu.ModeIdle, gpu.ModePassthrough, gpu.ModePassthrough} {
		addr := fmt.Sprintf("0000:%d:00.0", 43+i)
		inv.GPUs = append(inv.GPUs, gpu.HostGPU{Address: addr, Model: "L40S", DeviceID: "10de:26b9", Mode: mode, Backends: map[string]string{"passthrough": ""}})
		if mode == gpu.ModePassthrough {
			inv.Devices = append(inv.Devices, gpu.HostDevice{ID: addr, Backend: "passthrough", Kind: gpu.KindPassthrough, GPU: addr, VMUUID: fmt.Sprintf("vm-p%d", i)})
		}
	}
	for i := range 4 {
		inv.Devices = append(inv.Devices,
			gpu.HostDevice{ID: fmt.Sprintf("mig-%d", i), Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:41:00.0", Profile: "1g.10gb", Placement: ip(i), VMUUID: fmt.Sprintf("vm-m%d", i)},
			gpu.HostDevice{ID: fmt.Sprintf("vgpu-%d", i), Backend: "vgpu", Kind: gpu.KindVGPU, GPU: "0000:42:00.0", Type: "L40S-12Q", VMUUID: fmt.Sprintf("vm-v%d", i)})
	}
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterHost(context.Background(), &store.Host{Name: "gpu-01", APIURL: "http://gpu-01:8080", Version: "test", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
}

// signIn signs in through the login form.
func (b *browser) signIn(token string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token+"\r", chromedp.ByQuery), // Enter submits: the keyboard is enough
		chromedp.WaitVisible(`ul.cards li`, chromedp.ByQuery))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.run(chromedp.Text(sel, &s, chromedp.ByQuery))
	return s
}

// jsFetch runs fetch in the page and returns the answer's status.
func (b *browser) jsFetch(method, path, body string, csrf bool) int {
	b.t.Helper()
	var status int
	b.eval(fmt.Sprintf(`(async () => {
	  const h = {'Content-Type': 'application/json'};
	  if (%t) h['X-CSRF-Token'] = (await (await fetch('/v1/session')).json()).csrf_token;
	  const r = await fetch(%q, {method: %q, headers: h, body: %s});
	  return r.status;
	})()`, csrf, path, method, map[bool]string{true: "undefined", false: fmt.Sprintf("%q", body)}[body == ""]), &status)
	return status
}

// The whole visit of a user: signed out, the portal sends them to the
// login form; they sign in, see the catalogue in words with what is free,
// ask for a VM, watch it go from queued to running on My VMs without a
// reload, stop it, switch to Chinese and back, and sign out, after which
// the session cookie no longer works. Another user's VM is never shown nor
// reachable, a POST without the CSRF token is refused, and every page
// carries the CSP, asks nothing of another origin and passes axe-core.
func TestPortalInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles})
	ctx := context.Background()
	upHost(t, env.Store)
	// bob's VM, which ann must never see.
	if err := env.Store.CreateUser(ctx, &store.User{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	bobs := &store.VM{Name: "bobs-secret", Owner: "bob", Profile: "seat", Hours: 1}
	if _, err := env.Store.CreateVM(ctx, bobs, store.CreateVMOptions{RequestedBy: "bob"}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, env.URL, false)

	// Signed out: to the login form.
	var loc string
	b.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#token`, chromedp.ByQuery), chromedp.Location(&loc))
	if loc != env.URL+"/login?next=%2Fvms" {
		t.Fatalf("signed out, /vms went to %s", loc)
	}
	b.check("login")
	// A wrong token is refused on the form.
	b.run(chromedp.SendKeys(`#token`, "gpuvm_wrong", chromedp.ByQuery), chromedp.Click(`form button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`form [role=alert]`, chromedp.ByQuery))

	// The catalogue, in words, with what is free now.
	b.signIn(env.UserToken)
	b.check("catalogue")
	b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}))
	b.screenshots("catalogue-dark")
	b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}))
	cards := b.text(`ul.cards`)
	for _, want := range []string{
		"MIG 1g.10gb slice of an H100", "3 free of 7", "4 h by default, 12 h at most", "16 GiB",
		"L40S-12Q vGPU", "none free",
		"whole L40S", "2 free of 4 GPUs",
		"always (no GPU needed)", "2 h by default, 8 h at most",
	} {
		if !strings.Contains(cards, want) {
			t.Errorf("the catalogue does not say %q:\n%s", want, cards)
		}
	}

	// Ask for a VM from the seat's card; the worker holds it queued.
	env.Worker.Pause()
	seat := `li[aria-labelledby="profile-seat"]`
	b.run(chromedp.Click(seat+` button`, chromedp.ByQuery), chromedp.WaitVisible(`#ask-seat-name`, chromedp.ByQuery))
	b.check("ask")
	b.run(chromedp.SendKeys(`#ask-seat-name`, "demo", chromedp.ByQuery), chromedp.SetValue(`#ask-seat-hours`, "3", chromedp.ByQuery),
		chromedp.SendKeys(`#ask-seat-ssh`, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample ann@laptop", chromedp.ByQuery),
		chromedp.Click(seat+` button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#vm-demo[data-state="queued"]`, chromedp.ByQuery))
	vm, err := env.Store.GetVMByName(ctx, "ann", "demo")
	if err != nil || vm.Hours != 3 || vm.Profile != "seat" {
		t.Fatalf("the VM asked for: %+v, %v", vm, err)
	}
	// From here on the page must not reload: live updates only.
	b.eval(`window.__stayed = 42`, nil)
	if _, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: "waiting for a GPU",
		StateReason: "no GPU has room for MIG 1g.10gb now"}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the queue reason", `document.querySelector('#vm-demo .reason')?.textContent.includes('no GPU has room')`)
	b.check("vms-queued")
	env.Worker.Paused.Store(false)
	b.waitFor("running, live", `document.querySelector('#vm-demo')?.dataset.state === 'running'`)
	b.waitFor("its address", `document.querySelector('#vm-demo')?.textContent.includes('192.0.2.')`)
	if !strings.Contains(b.text(`#vm-demo`), "Lease ends") {
		t.Errorf("no lease end: %s", b.text(`#vm-demo`))
	}
	b.check("vms-running")
	// Console (a seat's display is its console, not a desktop): a new
	// tab on the browser console of the VM.
	opened := chromedp.WaitNewTarget(b.ctx, func(i *target.Info) bool { return strings.Contains(i.URL, "/console/") })
	b.run(chromedp.Click(`//li[@id="vm-demo"]//button[text()="Console"]`, chromedp.BySearch))
	select {
	case id := <-opened:
		// Close it, and come back: a tab in the background draws no
		// screenshots.
		tctx, tcancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(id))
		var consoleURL string
		if err := chromedp.Run(tctx, chromedp.Location(&consoleURL)); err != nil {
			t.Errorf("the console tab: %v", err)
		}
		tcancel() // closes the tab
		t.Logf("Console opened %s", regexp.MustCompile(`ticket=[^&]+`).ReplaceAllString(consoleURL, "ticket=…"))
		b.run(page.BringToFront())
	case <-time.After(20 * time.Second):
		t.Errorf("Console opened no console tab")
	}

	// Stop it, with confirmation.
	env.Worker.Pause()
	b.run(chromedp.Click(`//li[@id="vm-demo"]//button[text()="Stop"]`, chromedp.BySearch), chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	b.check("vms-confirm-stop")
	b.run(chromedp.Click(`#confirm-yes`, chromedp.ByQuery), chromedp.WaitNotPresent(`dialog.confirm`, chromedp.ByQuery))
	// The dialog closes before the request is answered: wait for the
	// page to say it was asked.
	b.waitFor("the stop asked for", `document.querySelector('main [role=status]').textContent.includes('demo')`)
	ops, err := env.Store.ListOperations(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stop *store.Operation
	for i := range ops {
		if ops[i].Kind == store.OpStop {
			stop = &ops[i]
		}
	}
	if stop == nil || stop.RequestedBy != "ann" {
		t.Fatalf("no stop operation by ann: %+v; the page says:\n%s", ops, b.text(`main`))
	}
	// The lifecycle stops it (the test worker does not: do it here).
	for _, state := range []string{store.VMStopping, store.VMStopped} {
		cur, err := env.Store.GetVM(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Store.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: state}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Store.FinishOperation(ctx, stop.ID, nil); err != nil {
		t.Fatal(err)
	}
	b.waitFor("stopped, live", `document.querySelector('#vm-demo')?.dataset.state === 'stopped'`)
	var stayed int
	b.eval(`window.__stayed`, &stayed)
	if stayed != 42 {
		t.Errorf("My VMs reloaded instead of updating live")
	}
	b.check("vms-stopped")

	// Delete asks first; Escape (the keyboard) cancels, and the VM stays.
	b.run(chromedp.Click(`//li[@id="vm-demo"]//button[text()="Delete"]`, chromedp.BySearch), chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	var focused string
	b.eval(`document.activeElement.textContent`, &focused)
	if focused != "Cancel" {
		t.Errorf("the confirmation's focus is on %q, want Cancel (the safe choice)", focused)
	}
	b.run(chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(`dialog.confirm`, chromedp.ByQuery))
	if cur, err := env.Store.GetVM(ctx, vm.ID); err != nil || cur.State != store.VMStopped {
		t.Errorf("after Escape: %+v, %v", cur, err)
	}

	// bob's VM: never shown, never reachable, not even by its ID.
	if page := b.text(`main`); strings.Contains(page, "bobs-secret") {
		t.Errorf("ann sees bob's VM:\n%s", page)
	}
	for _, p := range []string{"/v1/vms/" + bobs.ID, "/v1/vms/bobs-secret", "/v1/vms/" + bobs.ID + "/console"} {
		if got := b.jsFetch("GET", p, "", false); got != 404 {
			t.Errorf("GET %s from ann's page: %d, want 404", p, got)
		}
	}
	if got := b.jsFetch("DELETE", "/v1/vms/"+bobs.ID, "", true); got != 404 {
		t.Errorf("DELETE bob's VM from ann's page: %d, want 404", got)
	}
	// A state-changing request without the CSRF token is refused; with it
	// it goes through.
	if got := b.jsFetch("POST", "/v1/vms", `{"profile":"seat","name":"sneaky"}`, false); got != 403 {
		t.Errorf("POST /v1/vms without the CSRF token: %d, want 403", got)
	}
	if _, err := env.Store.GetVMByName(ctx, "ann", "sneaky"); err == nil {
		t.Errorf("the CSRF-less POST made a VM")
	}
	if got := b.jsFetch("POST", "/v1/vms", `{"profile":"seat","name":"proper"}`, true); got != 202 {
		t.Errorf("POST /v1/vms with the CSRF token: %d, want 202", got)
	}

	// Chinese with the switch, and back (the host beats again: a host
	// whose heartbeat is old is down, and its capacity not counted).
	upHost(t, env.Store)
	b.run(chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(`ul.cards li`, chromedp.ByQuery))
	b.eval(`(() => { const s = document.querySelector('.lang select'); s.value = 'zh-CN'; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, nil)
	b.waitFor("the Chinese page", `document.documentElement.lang === 'zh-CN' && !!document.querySelector('ul.cards li')`)
	if cards := b.text(`ul.cards`); !strings.Contains(cards, "H100 的 MIG 1g.10gb 切片") || !strings.Contains(cards, "空闲 3 个") {
		t.Errorf("the Chinese catalogue:\n%s", cards)
	}
	b.check("catalogue-zh")
	// Times are in the viewer's time zone.
	b.run(emulation.SetTimezoneOverride("Asia/Shanghai"), chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-demo time`, chromedp.ByQuery))
	cur, err := env.Store.GetVM(ctx, vm.ID)
	if err != nil || cur.LeaseEnd == nil {
		t.Fatalf("%+v, %v", cur, err)
	}
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	// English writes a 12-hour clock ("2:36 PM"), Chinese a 24-hour one.
	if got, end := b.text(`#vm-demo time`), cur.LeaseEnd.In(shanghai); !strings.Contains(got, end.Format("3:04 PM")) && !strings.Contains(got, end.Format("15:04")) {
		t.Errorf("lease end %q in Shanghai, want the time %s", got, end.Format("3:04 PM"))
	}
	b.check("vms-zh")
	b.eval(`(() => { const s = document.querySelector('.lang select'); s.value = 'en'; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, nil)
	b.waitFor("the English page", `document.documentElement.lang === 'en' && !!document.querySelector('#vm-demo')`)

	// The cookie: HttpOnly, SameSite=Strict, not readable by the page.
	var cookies []*network.Cookie
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().WithURLs([]string{env.URL}).Do(ctx)
		return err
	}))
	var session *network.Cookie
	for _, c := range cookies {
		if c.Name == api.SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || session.Expires <= 0 {
		t.Fatalf("session cookie %+v", session)
	}
	var readable string
	b.eval(`document.cookie`, &readable)
	if strings.Contains(readable, api.SessionCookie) {
		t.Errorf("the page can read the session cookie: %q", readable)
	}
	var stored string
	b.eval(`JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + location.href`, &stored)
	if strings.Contains(stored, env.UserToken) || strings.Contains(stored, session.Value) {
		t.Errorf("a secret in storage or the URL: %s", stored)
	}

	// Sign out: back to the form, and the cookie is dead on the server.
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery), chromedp.Location(&loc))
	if loc != env.URL+"/login" {
		t.Errorf("after signing out: %s", loc)
	}
	req, _ := http.NewRequest("GET", env.URL+"/v1/whoami", nil)
	req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: session.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the session cookie after signing out: %d, want 401", resp.StatusCode)
	}
	// Sign-in and sign-out are in the audit log.
	es, _, err := env.Store.ListAudit(ctx, store.AuditFilter{User: "ann", Action: "session.", Limit: 10})
	if err != nil || len(es) != 2 {
		t.Errorf("audit of the session: %+v, %v", es, err)
	}
	// Signed out, a page sends them to sign in, and then on to that page;
	// a next that leaves the server goes to the catalogue instead.
	b.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, env.UserToken+"\r", chromedp.ByQuery), chromedp.WaitVisible(`ul.vms`, chromedp.ByQuery), chromedp.Location(&loc))
	if loc != env.URL+"/vms" {
		t.Errorf("signed in from /login?next=%%2Fvms: at %s", loc)
	}
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.Navigate(env.URL+"/login?next=//evil.example/x"), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, env.UserToken+"\r", chromedp.ByQuery), chromedp.WaitVisible(`ul.cards li`, chromedp.ByQuery), chromedp.Location(&loc))
	if loc != env.URL+"/" {
		t.Errorf("signed in from /login?next=//evil.example/x: at %s", loc)
	}
	u, _ := url.Parse(env.URL)
	t.Logf("portal at %s: %d requests, all to %s", env.URL, len(b.requests), u.Host)
}
