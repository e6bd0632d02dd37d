package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// phoneLayout is what phoneFit measures of the page in view at 390×844.
type phoneLayout struct {
	Scroll, Client int      // the document's scroll and client widths
	Header         float64  // the height of header.top
	Wide           []string // what ends past the screen (outside a scrolling box)
	Tables         []struct {
		Sel      string  `json:"sel"`
		Found    bool    `json:"found"`
		Overflow string  `json:"overflow"` // the overflow-x of the table's box
		Right    float64 `json:"right"`    // the right edge of that box
		Inner    int     `json:"inner"`    // the table's own width
		Box      int     `json:"box"`      // the box's client width
	}
}

// phoneFit checks the page in view at a phone's width (390×844): nothing is
// wider than the screen (document.documentElement.scrollWidth <= 390), the
// header takes less than 15% of the screen's height, and each of tables
// (selectors) is there and, when wider than the screen, scrolls sideways
// in its own box, which fits the screen. Then it goes back to the desktop
// size.
func (b *browser) phoneFit(name string, tables ...string) phoneLayout {
	b.t.Helper()
	b.run(emulation.SetDeviceMetricsOverride(390, 844, 1, true), chromedp.Sleep(150*time.Millisecond))
	sels, _ := json.Marshal(append([]string{}, tables...))
	var js string
	b.eval(fmt.Sprintf(`JSON.stringify({
	  Scroll: document.documentElement.scrollWidth, Client: document.documentElement.clientWidth,
	  Header: document.querySelector('header.top').getBoundingClientRect().height,
	  Wide: [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > 391 && !e.closest('.scroll, .calendar-wrap, header nav'))
	    .slice(0, 6).map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '') + ' ' + Math.round(e.getBoundingClientRect().right)),
	  Tables: %s.map((sel) => {
	    const t = document.querySelector(sel);
	    if (!t) return {sel, found: false};
	    const box = t.parentElement;
	    return {sel, found: true, overflow: getComputedStyle(box).overflowX, right: box.getBoundingClientRect().right,
	      inner: t.scrollWidth, box: box.clientWidth};
	  }),
	})`, sels), &js)
	b.run(emulation.SetDeviceMetricsOverride(1280, 800, 1, false))
	var l phoneLayout
	if err := json.Unmarshal([]byte(js), &l); err != nil {
		b.t.Fatalf("%s: %v in %s", name, err, js)
	}
	b.t.Logf("%s at a phone's width: %s", name, js)
	if l.Scroll > 390 || l.Scroll > l.Client {
		b.t.Errorf("%s: %d px wide at a phone's 390 (client %d): it overflows sideways; past the edge: %v", name, l.Scroll, l.Client, l.Wide)
	}
	if l.Header >= 0.15*844 {
		b.t.Errorf("%s: the header is %.0f px high, %.0f%% of a phone's 844", name, l.Header, 100*l.Header/844)
	}
	for _, tb := range l.Tables {
		switch {
		case !tb.Found:
			b.t.Errorf("%s: no %s", name, tb.Sel)
		case tb.Right > 390:
			b.t.Errorf("%s: the box of %s ends at %.0f px, past the screen", name, tb.Sel, tb.Right)
		case tb.Inner > tb.Box && tb.Overflow != "auto" && tb.Overflow != "scroll":
			b.t.Errorf("%s: %s is %d px wide in a box of %d that does not scroll (overflow-x %s): it is cut off", name, tb.Sel, tb.Inner, tb.Box, tb.Overflow)
		}
	}
	return l
}

// Without a reservations block booking ahead is not offered: a user's Book
// ahead says so in their language and who books instead, with no calendar,
// and fits a phone; an admin (who books all the same) gets the calendar.
func TestBookNotOfferedInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles, Bookings: orchestratorBookings}) // profiles: no policy block
	upHost(t, env.Store)
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	for _, c := range []struct{ lang, words, ask string }{
		{"en", "Booking GPUs ahead is not offered on this server.", "ask an admin of this server: an admin can book it for you"},
		{"zh-CN", "本服务器不提供提前预约 GPU。", "请联系本服务器的管理员：管理员可以替你预约"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/; samesite=strict'`, nil)
		b.run(chromedp.Navigate(env.URL + "/book"))
		b.waitFor("not offered ("+c.lang+")", `document.querySelector('#book-not-offered')`)
		if s := b.text("main"); !strings.Contains(s, c.words) || !strings.Contains(s, c.ask) {
			t.Errorf("%s: the page says:\n%s", c.lang, s)
		}
		var left []string
		b.eval(`['#calendar', '.book-controls', '.day-nav', '#book-week', '.intro'].filter((s) => document.querySelector(s))`, &left)
		if len(left) > 0 {
			t.Errorf("%s: booking is not offered, yet the page shows %v", c.lang, left)
		}
		if s := b.text("main"); strings.Contains(s, "reservations block") || strings.Contains(s, "owner:") {
			t.Errorf("%s: the page speaks the configuration's words to a user:\n%s", c.lang, s)
		}
		b.check("book-not-offered-" + c.lang)
		b.phoneFit("book-not-offered-" + c.lang)
	}
	b.eval(`document.cookie = 'gpuvm_lang=en; path=/; samesite=strict'`, nil)
	// An admin books whatever the policy says: the calendar is theirs.
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.signIn(env.AdminToken)
	b.run(chromedp.Navigate(env.URL + "/book"))
	b.waitFor("the calendar", `document.querySelector('#book-profile')`)
	b.eval(`(() => { const s = document.querySelector('#book-profile'); s.value = 'whole-l40s'; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, nil)
	b.waitFor("the admin's calendar", `document.querySelector('#calendar tbody tr td.slot.free') && document.querySelector('#book-rules')`)
	if n := b.text("main"); strings.Contains(n, "not offered") {
		t.Errorf("an admin is told booking is not offered:\n%s", n)
	}
	b.phoneFit("book-admin")
}

// A simulated GPU server says so on every page, in English and Chinese;
// My usage shows what was held on it as simulated, never as "held idle"
// (its utilisation is the simulator's, not a GPU's).
func TestSimulatedServerInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: bookProfiles, Bookings: orchestratorBookings})
	inv, err := json.Marshal(gpu.HostInventory{Host: "simulated GPU server (preset a100x4)", Simulated: true,
		GPUs: []gpu.HostGPU{{Address: "0000:43:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeIdle, Backends: map[string]string{"passthrough": ""}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Store.RegisterHost(context.Background(), &store.Host{Name: "gpu-01", Version: "test", Inventory: string(inv)}); err != nil {
		t.Fatal(err)
	}
	seeded := seedUsage(t, env.Store) // held on gpu-01, the simulated server
	b := newBrowser(t, env.URL, false)
	// The sign-in page has the badge too (GET /v1/auth/methods), without
	// the host's name, which only those signed in read.
	b.run(chromedp.Navigate(env.URL+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	for _, c := range []struct{ lang, badge, hint string }{
		{"en", "Simulated GPU server", "this server uses no real GPU"},
		{"zh-CN", "模拟 GPU 服务器", "此服务器没有使用真实 GPU"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/; samesite=strict'`, nil)
		b.run(chromedp.Navigate(env.URL + "/login"))
		b.waitFor("the sign-in page's badge ("+c.lang+")", `document.querySelector('#token') && document.querySelector('header #simulated')`)
		if s := b.text("header #simulated"); !strings.Contains(s, c.badge) || !strings.Contains(s, c.hint) || strings.Contains(s, "gpu-01") {
			t.Errorf("/login (%s): the header says %q", c.lang, s)
		}
		b.phoneFit("login-simulated-" + c.lang)
	}
	b.eval(`document.cookie = 'gpuvm_lang=en; path=/; samesite=strict'`, nil)
	b.signIn(env.UserToken)
	for _, c := range []struct{ lang, badge, util, legend string }{
		{"en", "Simulated GPU server", "held on a simulated GPU server, where no real GPU measures utilisation", "simulated server (not measured)"},
		{"zh-CN", "模拟 GPU 服务器", "在模拟 GPU 服务器上占用", "模拟服务器（未测量）"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/; samesite=strict'`, nil)
		for _, p := range []struct{ path, ready string }{{"/", "ul.cards li"}, {"/vms", "main h1"}, {"/book", "#calendar tbody tr"},
			{"/rules", "main section"}, {"/usage", "#util-week"}} {
			b.run(chromedp.Navigate(env.URL + p.path))
			b.waitFor(p.path+" ("+c.lang+")", `document.querySelector('`+p.ready+`') && document.querySelector('header #simulated')`)
			if s := b.text("header #simulated"); !strings.Contains(s, c.badge) || !strings.Contains(s, "gpu-01") {
				t.Errorf("%s (%s): the header says %q", p.path, c.lang, s)
			}
		}
		// On /usage now: the week's hours are simulated, none idle.
		week := b.text("#util-week")
		if !strings.Contains(week, c.util) || strings.Contains(week, "held idle") || strings.Contains(week, "空闲占用") {
			t.Errorf("%s: the week's utilisation says %q", c.lang, week)
		}
		if s := b.text("#util-title + .split + .split + ul.legend"); !strings.Contains(s, c.legend) {
			t.Errorf("%s: the legend says %q", c.lang, s)
		}
		var rects []string
		b.eval(`[...document.querySelectorAll('#util-week svg rect:not(.track)')].map((r) => r.getAttribute('class') + ' ' + r.getAttribute('width'))`, &rects)
		if len(rects) != 1 || rects[0] != "simulated 100.00" {
			t.Errorf("%s: the week's bar is %v, want all of it simulated (%.2f GPU-hours seeded)", c.lang, rects, seeded)
		}
		b.check("usage-simulated-" + c.lang)
		b.phoneFit("usage-simulated-" + c.lang)
	}
	b.eval(`document.cookie = 'gpuvm_lang=en; path=/; samesite=strict'`, nil)
	// The admin's review card keeps the simulated GPU-hours apart.
	b.run(chromedp.Click(`#sign-out`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.signIn(env.AdminToken)
	b.run(chromedp.Navigate(env.URL + "/admin"))
	b.waitFor("the review's simulated card", `document.querySelector('#report-simulated')`)
	if s := b.text("#report-simulated"); !strings.Contains(s, "GPU-hours on simulated GPU servers") {
		t.Errorf("the review's simulated card says %q", s)
	}
}
