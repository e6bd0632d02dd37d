package portal_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// zhProfiles are the browser tests' profiles and a policy whose quota
// makes VMs wait (two at once) and refuses whole GPUs (none at all), with
// a window open at every hour (its words are on the ask form).
const zhProfiles = profiles + `
policy {
  timezone = "UTC"
  defaults {
    quota {
      vms  = 2
      gpus = 0
    }
  }
  window "all-day" {
    days    = "mon-sun"
    hours   = "00:00-24:00"
    classes = ["interactive"]
  }
}
`

// zhAllowed are the Latin words a Chinese page may show, each for a
// reason:
//   - the product and its programs: gpuvm, gpuvmd;
//   - the names of hardware, protocols and units people use untranslated
//     in Chinese too: GPU, CPU, MIG, vGPU, SSH, API, H100, L40S, GiB, MiB,
//     TiB, UTC (the time zone of the test's policy), °C;
//   - the language switch, which names each language in itself: English;
//   - Slurm, whose way of writing a task's end ("code:signal") the Tasks
//     page names;
//   - the test's data: profile, VM, user, group, host and rule names, the
//     GPU model and the MIG and vGPU types (zhNames);
//   - identifiers, which are typed and searched as they are (zhCode): a
//     metric's name (gpu_temperature_celsius), an audit action
//     (vm.create) and a path of names (an alert's subject
//     gpu/gpu-01/0000:41:00.0, an audit target vm/ann/nb-0);
//   - the configuration's block names an admin types as they are, on the
//     rules page an admin reads: reservations; and the policy block a
//     limit's rule names (the disk quota's, on My storage): policy
//     defaults; and a share's access rule: read_only, read_write.
var zhAllowed = []string{
	"gpuvm", "gpuvmd", "reservations", "policy", "defaults", "read_only", "read_write",
	"GPU", "GPUs", "CPU", "MIG", "vGPU", "SSH", "API", "H100", "L40S", "GiB", "MiB", "TiB", "UTC",
	"English", "Slurm",
}

// zhNames are the names the test's data gives: they are shown as they are.
var zhNames = []string{
	"ann", "bob", "admin", "gpu-01",
	"mig-small", "render-l40s", "whole-l40s", "seat",
	"1g.10gb", "L40S-12Q",
	"nb-0", "nb-1", "nb-2", "nb-3", "desk-0", "desk-1", "desk-2", "desk-3", "sim-big", "train",
	"q-notebook", "q-render", "boot", "ready-one", "making", "broken", "parked", "gpu-hot", "all-day",
	"PCIe", "80GB", "test", "H100-4C", // upHost's H100 PCIe 80GB, its gpuvmd's version
	"box", "up", "scratch", "datasets", "course", "user:ann", // storage_browser_test.go's VMs, disk, shares and a share's principal
	"plain", "spare", "other", "data1", "withdata", // storage_browser_test.go's profile, catalogue_extras_browser_test.go's disks and VM
}

// zhCode matches the identifiers of zhAllowed.
var zhCode = regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)+$|^[a-z]+\.[a-z_.]*$|/`)

// latinWord is a word in Latin letters (with the digits, dots and dashes
// of names like 1g.10gb or L40S-12Q).
var latinWord = regexp.MustCompile(`[A-Za-z0-9_./:\-]*[A-Za-z][A-Za-z0-9_./:\-]*`)

// visibleText is what a person reads on the page: its title, the text
// drawn (innerText), and the words of title, aria-label, placeholder and
// alt attributes; a command (gpuvm ...) in a code element or in quotes is
// left out, for it is typed as it is.
const visibleText = `(() => {
  let text = document.title + '\n' + document.body.innerText;
  // A profile's description is the admin's, in the admin's words.
  for (const p of document.querySelectorAll('.pname')) {
    const i = p.textContent.indexOf(' — ');
    if (i > 0) text = text.split(p.textContent.slice(i)).join(' ');
  }
  for (const c of document.querySelectorAll('code')) {
    const s = c.textContent.trim();
    if (/^gpuvm\b/.test(s)) text = text.split(s).join(' ');
  }
  // So is one in quotes.
  text = text.replace(/[“"]gpuvm [^”"]*[”"]/g, ' ');
  for (const a of ['title', 'aria-label', 'placeholder', 'alt']) {
    for (const e of document.querySelectorAll('[' + a + ']')) text += '\n' + e.getAttribute(a);
  }
  return text;
})()`

// zhPunctSpace is a space after Chinese punctuation: sentences joined as
// English joins them (i18n.js's sentences joins them without).
var zhPunctSpace = regexp.MustCompile(`[。，：；！？] `)

// chinese lists what english does, and the spaces after Chinese
// punctuation, each with its line. (A page whose code a test hides leaves
// the spaces around it: such a test reads it with english.)
func (b *browser) chinese(page string) []string {
	b.t.Helper()
	var bad []string
	for _, line := range b.lines() {
		if m := zhPunctSpace.FindString(strings.TrimSpace(line)); m != "" {
			bad = append(bad, page+": "+strings.TrimSpace(line)+"  [a space after "+strings.TrimSpace(m)+"]")
		}
	}
	return append(bad, b.english(page)...)
}

// lines is the visible text of the page in view, by line.
func (b *browser) lines() []string {
	b.t.Helper()
	var text string
	b.eval(visibleText, &text)
	return strings.Split(text, "\n")
}

// english lists the Latin words of the page in view that are on no
// allow-list, each with its line.
func (b *browser) english(page string) []string {
	b.t.Helper()
	var bad []string
	for _, line := range b.lines() {
		for _, w := range latinWord.FindAllString(strings.ReplaceAll(line, "°C", ""), -1) {
			if zhCode.MatchString(w) {
				continue
			}
			w = strings.Trim(w, ".:-")
			if w == "" || slices.Contains(zhAllowed, w) || slices.Contains(zhNames, w) {
				continue
			}
			bad = append(bad, page+": "+strings.TrimSpace(line)+"  ["+w+"]")
			break
		}
	}
	return bad
}

// zhVMs adds VMs of ann's in more states and phases than adminVMs's: one
// booting, one ready, one being made, one failed with its reason, one
// stopped.
func zhVMs(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	host := "gpu-01"
	for _, v := range []struct {
		name, state, phase, reason string
	}{
		{"boot", store.VMRunning, api.PhaseBooting, ""},
		{"ready-one", store.VMRunning, api.PhaseReady, "the guest reported no address within 5m"},
		{"making", store.VMCreating, api.PhasePreparingDisk, ""},
		{"broken", store.VMFailed, "", "no GPU here can ever give H100-4C"},
		{"parked", store.VMStopped, "", ""},
	} {
		row := &store.VM{Name: v.name, Owner: "ann", Profile: "seat", Hours: 2}
		if _, err := st.CreateVM(ctx, row, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		up := store.VMUpdate{State: v.state, Phase: v.phase, StateReason: v.reason}
		if v.state == store.VMRunning {
			up.Host = &host
		}
		if _, err := st.UpdateVMState(ctx, row.ID, row.Version, up); err != nil {
			t.Fatal(err)
		}
	}
	// adminVMs's alert and queue reasons, as gpuvmd writes them.
	if _, err := st.FireAlert(ctx, &store.Alert{Rule: "gpu-hot", Subject: "gpu/gpu-01/0000:41:00.0", Host: host, Metric: "gpu_temperature_celsius",
		Value: 91, Summary: "GPU 0000:41:00.0 on gpu-01: gpu_temperature_celsius is 91 °C, above 85 °C for 5m"}); err != nil {
		t.Fatal(err)
	}
	queue := map[string]store.QueueEntry{}
	for _, q := range []struct {
		owner, name, reason string
		pos                 int
	}{
		{"ann", "q-notebook", "no GPU has room for MIG 1g.10gb now", 2},
		{"bob", "q-render", "quota: user bob: runs 2 of 2 VMs", 1},
	} {
		vm, err := st.GetVMByName(ctx, q.owner, q.name)
		if err != nil {
			t.Fatal(err)
		}
		queue[vm.ID] = store.QueueEntry{Position: q.pos, Phase: api.PhaseQueued, Reason: q.reason}
	}
	if _, err := st.SetQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}
}

// zhAdmitter answers as the policy of zhProfiles does for ann, who runs
// more than two VMs: a whole GPU is refused, anything else waits.
type zhAdmitter struct{}

func (zhAdmitter) Admit(_ context.Context, user string, _ []string, profile string, _ int) (scheduler.Admission, error) {
	if profile == "whole-l40s" {
		return scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "user " + user + ": asks for 1 whole GPUs; the limit is 0 at once"}, Refuse: true}, nil
	}
	return scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "user " + user + ": runs 7 of 2 VMs"}}, nil
}

// Every portal page in Simplified Chinese, as a user and as an admin, with
// data on them (VMs in several states and phases, a queue with its
// reasons, the rules' answer to an ask, a refused ask and a refused
// extend, an alert, the review report's notes), says nothing in English:
// every Latin word it shows is a name, a product or a unit (zhAllowed,
// zhNames).
func TestChineseHasNoEnglishInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: zhProfiles, Host: "gpu-01", Admission: zhAdmitter{}})
	env.Worker.Pause() // the VMs stay as written
	upHost(t, env.Store)
	adminVMs(t, env.Store)
	zhVMs(t, env.Store)
	b := newBrowser(t, env.URL, false)
	b.run(chromedp.Navigate(env.URL+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	var bad []string
	visit := func(name, path, ready string) {
		b.t.Helper()
		b.run(chromedp.Navigate(env.URL+path), chromedp.WaitVisible(ready, chromedp.ByQuery))
		time.Sleep(500 * time.Millisecond) // what is read after the first draw
		bad = append(bad, b.chinese(name)...)
	}
	visit("login", "/login", `#token`)
	b.run(chromedp.SendKeys(`#token`, env.UserToken+"\r", chromedp.ByQuery), chromedp.WaitVisible(`ul.cards li`, chromedp.ByQuery))
	visit("catalogue", "/", `ul.cards li`)

	// The ask form with the rules' answer: waits for the quota.
	b.run(chromedp.Click(`li[aria-labelledby="profile-mig-small"] button`, chromedp.ByQuery))
	b.waitFor("the rules' answer", `document.querySelector('#ask-mig-small-policy p.answer')`)
	bad = append(bad, b.chinese("ask (waits)")...)
	// A refused ask: a whole GPU, which the quota never allows.
	b.run(chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(`li[aria-labelledby="profile-whole-l40s"] button`, chromedp.ByQuery),
		chromedp.Click(`li[aria-labelledby="profile-whole-l40s"] button`, chromedp.ByQuery))
	b.waitFor("the refusal", `document.querySelector('#ask-whole-l40s-policy p.answer')`)
	b.run(chromedp.Click(`li[aria-labelledby="profile-whole-l40s"] button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`li[aria-labelledby="profile-whole-l40s"] form [role=alert]`, chromedp.ByQuery))
	bad = append(bad, b.chinese("ask (refused)")...)
	b.screenshots("zh-ask-refused")

	visit("vms", "/vms", `#vm-boot`)
	b.waitFor("the queue's reason", `document.querySelector('#vm-q-notebook .reason')`)
	bad = append(bad, b.chinese("vms (read)")...)
	b.screenshots("zh-vms")
	// A refused extend: more than the profile allows.
	b.run(chromedp.Click(`//li[@id="vm-nb-0"]//button[text()="延长"]`, chromedp.BySearch), chromedp.WaitVisible(`#extend-hours`, chromedp.ByQuery),
		chromedp.SetValue(`#extend-hours`, "40", chromedp.ByQuery), chromedp.Click(`#extend-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#extend-problem`, chromedp.ByQuery))
	bad = append(bad, b.chinese("vms (extend refused)")...)
	b.screenshots("zh-extend-refused")

	visit("book", "/book", `main h1`)
	visit("usage", "/usage", `main h1`)
	visit("rules", "/rules", `main h1`)

	// The admin.
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, env.AdminToken+"\r", chromedp.ByQuery), chromedp.WaitVisible(`ul.cards li`, chromedp.ByQuery))
	visit("fleet", "/admin/fleet", `#host-gpu-01 li.gpu`)
	visit("admin", "/admin", `#users`)
	b.waitFor("the report's notes", `document.querySelector('#report ul.notes li')`)
	b.waitFor("the alert", `document.querySelector('#alert-table tbody tr')`)
	b.waitFor("the queue", `document.querySelector('#queue-table tr[data-vm="bob/q-render"]')`)
	bad = append(bad, b.chinese("admin (read)")...)
	b.screenshots("zh-admin")
	visit("rules (admin)", "/rules", `main h1`)

	// A control: English on the page is found.
	b.eval(`(() => { const p = document.createElement('p'); p.textContent = '仍在 still waiting'; document.querySelector('main').append(p); return true; })()`, nil)
	if found := b.english("control"); len(found) != 1 || !strings.Contains(found[0], "[still]") {
		t.Errorf("English put on the page is not found: %q", found)
	}
	if len(bad) > 0 {
		t.Errorf("English on Chinese pages (%d lines):\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
