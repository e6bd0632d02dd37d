package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// catalogueProfiles are the browser tests' profiles, a vGPU type no GPU of
// upHost's can ever give (its H100 is in MIG mode with the MIG backend
// only), and a policy with a quota and a GPU-hour budget.
const catalogueProfiles = profiles + `
profile "h100-vgpu" {
  vcpus  = 4
  memory = "8GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "H100-4C"
  }
}
policy {
  timezone = "UTC"
  defaults {
    quota {
      vms                = 2
      gpu_hours_per_week = 40
    }
  }
}
`

// nextFreeAt stands in for the estimate of when a GPU of a profile none of
// which is free will be (the profiles' next_free_at, another part of the
// issue): the page's first fetch of /v1/profiles says every estimate is
// being made (estimate_stale, as gpuvmd answers the first time a person
// asks), the later ones have it added to render-l40s.
// window.profilesFetched counts the fetches.
const nextFreeAt = `(() => {
  const real = window.fetch;
  window.profilesFetched = 0;
  window.fetch = async (input, init) => {
    const r = await real(input, init);
    if (String(input) !== '/v1/profiles' || !r.ok) return r;
    const ps = await r.json();
    const first = window.profilesFetched++ === 0;
    for (const p of ps) {
      if (first) { p.estimate_stale = true; delete p.next_free_at; continue; }
      delete p.estimate_stale;
      if (p.name === 'render-l40s') p.next_free_at = %q;
    }
    return new Response(JSON.stringify(ps), {status: 200, headers: {'Content-Type': 'application/json'}});
  };
})();`

// The catalogue: a profile no GPU here can ever give is marked unavailable
// with the reason and cannot be asked for; one none of which is free says
// when the next is expected; the ask form shows the rules' answer (the
// quota, what is left of the week's budget, the window), remembers the
// SSH keys for the next ask, and asks for a VM that starts at a time.
func TestCatalogueInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: catalogueProfiles})
	ctx := context.Background()
	upHost(t, env.Store)
	env.Worker.Pause() // the VMs asked for stay queued
	b := newBrowser(t, env.URL, false)
	next := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Minute).Format(time.RFC3339)
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(fmt.Sprintf(nextFreeAt, next)).Do(ctx)
		return err
	}))
	b.signIn(env.UserToken)

	// The unservable card.
	h100 := `li[aria-labelledby="profile-h100-vgpu"]`
	b.waitFor("the unservable card", `document.querySelector('`+h100+`.unservable')`)
	card := b.text(h100)
	if !strings.Contains(card, "not available here") || !strings.Contains(card, "No GPU of this server can ever give it: no GPU here can ever give H100-4C") {
		t.Errorf("the unservable card says:\n%s", card)
	}
	var buttons int
	b.eval(`document.querySelectorAll('`+h100+` button').length`, &buttons)
	if buttons != 0 {
		t.Errorf("the unservable card has %d buttons", buttons)
	}
	// None free, and when the next is expected, in the viewer's time:
	// not in the first answer (being made), read again a moment later.
	var about string
	b.eval(fmt.Sprintf(`import('/portal/pages/catalogue.js').then((m) => m.aboutTime(%q))`, next), &about)
	b.waitFor("the next free time, read again", `document.querySelector('li[aria-labelledby="profile-render-l40s"]').textContent.includes('the next one is expected')`)
	l40s := b.text(`li[aria-labelledby="profile-render-l40s"]`)
	if want := "none free: the next one is expected about " + about; about == "" || !strings.Contains(l40s, want) {
		t.Errorf("the render-l40s card does not say %q:\n%s", want, l40s)
	}
	b.check("catalogue-availability")
	// Fresh now: no more reading again.
	time.Sleep(3500 * time.Millisecond)
	var fetched int
	b.eval(`window.profilesFetched`, &fetched)
	if fetched != 2 {
		t.Errorf("/v1/profiles was fetched %d times; want 2 (stale, then fresh)", fetched)
	}

	// What is free, as the server counted it by the placers, in the words
	// of the kinds a profile would get: a profile of MIG or vGPU counts
	// both (not "1 free of 8 GPUs" from the one idle GPU).
	for pf, want := range map[string]string{
		`{vms: 23, total: 60, by_kind: {mig: 20, vgpu: 3}}`: "23 free of 60: 20 as MIG slices, 3 as vGPUs",
		`{vms: 5, total: 14, by_kind: {mig: 5}}`:            "5 free of 14",
		`{vms: 1, total: 8, by_kind: {passthrough: 1}}`:     "1 free of 8 GPUs",
		`{vms: 0, total: 8}`:                                "none free",
	} {
		var got string
		b.eval(`import('/portal/i18n.js').then((m) => m.freeWords({kind: 'any', memory: 20 * 2 ** 30}, [{state: 'up', gpus: 8, free: {idle_gpus: 1}}], `+pf+`).text)`, &got)
		if got != want {
			t.Errorf("free %s reads %q, want %q", pf, got, want)
		}
	}

	// Ask: the rules' answer before asking.
	seat := `li[aria-labelledby="profile-seat"]`
	b.run(chromedp.Click(seat+` button`, chromedp.ByQuery), chromedp.WaitVisible(`#ask-seat-name`, chromedp.ByQuery))
	b.waitFor("the quota", `document.querySelector('#ask-seat-policy')?.textContent.includes('40 left')`)
	policy := b.text(`#ask-seat-policy`)
	for _, want := range []string{"What the rules say", "at most 2 VMs at once", "this week: 0 of 40 GPU-hours used, 40 left", "No time window applies now."} {
		if !strings.Contains(policy, want) {
			t.Errorf("the rules' answer does not say %q:\n%s", want, policy)
		}
	}
	b.run(chromedp.ScrollIntoView(`#ask-seat-policy`, chromedp.ByQuery))
	b.check("ask-policy")
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIRemembered ann@laptop"
	b.run(chromedp.SendKeys(`#ask-seat-name`, "first", chromedp.ByQuery),
		chromedp.SendKeys(`#ask-seat-ssh`, key, chromedp.ByQuery),
		chromedp.Click(seat+` button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#vm-first[data-state="queued"]`, chromedp.ByQuery))
	u, err := env.Store.GetUser(ctx, "ann")
	if err != nil || u.SSHKeys != key {
		t.Fatalf("the keys kept: %q, %v", u.SSHKeys, err)
	}

	// The second ask: the keys are filled in; this one starts at a time.
	b.run(chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(seat+` button`, chromedp.ByQuery),
		chromedp.Click(seat+` button`, chromedp.ByQuery), chromedp.WaitVisible(`#ask-seat-ssh`, chromedp.ByQuery))
	b.waitFor("the remembered keys", `document.querySelector('#ask-seat-ssh').value === `+fmt.Sprintf("%q", key))
	b.check("ask-keys-remembered")
	b.run(chromedp.Click(`#ask-seat-later`, chromedp.ByQuery), chromedp.WaitVisible(`#ask-seat-start`, chromedp.ByQuery))
	var local, instant string
	b.eval(`(() => { const d = new Date(Date.now() + 26 * 3600 * 1000); d.setMinutes(30, 0, 0);
	  const p = (n) => String(n).padStart(2, '0');
	  return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes()); })()`, &local)
	b.eval(fmt.Sprintf(`new Date(%q).toISOString()`, local), &instant)
	b.run(chromedp.SetValue(`#ask-seat-start`, local, chromedp.ByQuery), chromedp.SendKeys(`#ask-seat-name`, "later", chromedp.ByQuery))
	b.check("ask-start-later")
	b.run(chromedp.Click(seat+` button[type=submit]`, chromedp.ByQuery), chromedp.WaitVisible(`#vm-later[data-state="queued"]`, chromedp.ByQuery))
	vm, err := env.Store.GetVMByName(ctx, "ann", "later")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := time.Parse(time.RFC3339, instant)
	if vm.StartAt == nil || !vm.StartAt.Equal(want) || !strings.Contains(vm.StateReason, "start") {
		t.Errorf("the VM to start later: start_at %v (want %v), reason %q", vm.StartAt, want, vm.StateReason)
	}
	var keys []string
	if err := jsonKeys(vm, &keys); err != nil || len(keys) != 1 || keys[0] != key {
		t.Errorf("its SSH keys: %q, %v", keys, err)
	}
	b.check("vms-start-later")
}

// jsonKeys reads the SSH keys a VM was asked with from its spec.
func jsonKeys(vm *store.VM, out *[]string) error {
	var spec struct {
		SSHKeys []string `json:"ssh_keys"`
	}
	if err := json.Unmarshal([]byte(vm.Spec), &spec); err != nil {
		return err
	}
	*out = spec.SSHKeys
	return nil
}

// A profile whose image is not built on this server is marked "not
// available now" in the catalogue, says why with no server path, and
// cannot be asked for; in Chinese too.
func TestCatalogueUnavailableInChromium(t *testing.T) {
	needBrowser(t)
	dir := t.TempDir()
	env := clienttest.New(t, clienttest.Options{Profiles: profiles + `
image "desktop" {
  path   = "` + dir + `/desktop.qcow2"
  format = "qcow2"
}
profile "desktop" {
  vcpus  = 2
  memory = "2GiB"
  disk { image = "desktop" }
  boot { kernel = "` + dir + `/vmlinuz" }
}
`, Availability: &images.Availability{Stat: func(p string) (fs.FileInfo, error) {
		// The other profiles' kernels are made up: only dir's files count.
		if !strings.HasPrefix(p, dir) {
			p = os.Args[0]
		}
		return os.Stat(p)
	}}})
	upHost(t, env.Store)
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	desktop := `li[aria-labelledby="profile-desktop"]`
	why := `its disk image "desktop" and its boot kernel are not on this server (an admin has to build or import them)`
	b.waitFor("the unavailable card", `document.querySelector('`+desktop+`.unavailable')`)
	card := b.text(desktop)
	if !strings.Contains(card, "not available now") || !strings.Contains(card, "This server cannot make it now: "+why) ||
		strings.Contains(card, dir) {
		t.Errorf("the unavailable card says:\n%s", card)
	}
	var buttons, marked int
	b.eval(`document.querySelectorAll('`+desktop+` button').length`, &buttons)
	b.eval(`document.querySelectorAll('li.card.unavailable').length`, &marked)
	if buttons != 0 || marked != 1 {
		t.Errorf("the unavailable card has %d buttons; %d cards are marked unavailable, want 1", buttons, marked)
	}
	b.run(chromedp.ScrollIntoView(desktop, chromedp.ByQuery))
	b.check("catalogue-unavailable")

	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/; samesite=strict'`, nil)
	b.run(chromedp.Navigate(env.URL + "/"))
	b.waitFor("the Chinese unavailable card", `document.documentElement.lang === 'zh-CN' && !!document.querySelector('`+desktop+`.unavailable')`)
	card = b.text(desktop)
	if !strings.Contains(card, "暂不可用") || !strings.Contains(card, "这台服务器现在无法创建它：") {
		t.Errorf("the unavailable card in Chinese says:\n%s", card)
	}
	b.run(chromedp.ScrollIntoView(desktop, chromedp.ByQuery))
	b.check("catalogue-unavailable-zh")
}
