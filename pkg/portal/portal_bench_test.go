package portal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// BenchmarkPortalFirstVisit is what a first visit downloads, compressed as
// sent (Chromium's encoded sizes, headers included, no cache): the login
// page with everything it loads, then signing in, the catalogue and My VMs.
// Target: under 300 KB.
func BenchmarkPortalFirstVisit(b *testing.B) {
	needBrowser(b)
	env := clienttest.New(b, clienttest.Options{Profiles: profiles})
	upHost(b, env.Store)
	for range b.N {
		br := newBrowser(b, env.URL, true)
		br.run(chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
		login := br.downloaded()
		br.signIn(env.UserToken)
		br.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`p.intro`, chromedp.ByQuery))
		b.ReportMetric(login/1024, "KB-login")
		b.ReportMetric(br.downloaded()/1024, "KB-visit")
	}
}

// downloaded sums the encoded sizes of every finished request so far.
func (b *browser) downloaded() float64 {
	time.Sleep(300 * time.Millisecond) // the last loadingFinished events
	b.mu.Lock()
	defer b.mu.Unlock()
	var n float64
	for _, s := range b.sizes {
		n += s
	}
	return n
}

// BenchmarkMyVMs200 is the time from navigation to My VMs drawn with 200
// VMs (the page's performance.now() in the effect after the list's first
// paint), and the part of it that GET /v1/vms takes.
func BenchmarkMyVMs200(b *testing.B) {
	needBrowser(b)
	env := clienttest.New(b, clienttest.Options{Profiles: profiles})
	env.Worker.Pause() // 200 queued VMs stay as they are
	ctx := context.Background()
	for i := range 200 {
		vm := &store.VM{Name: fmt.Sprintf("vm-%03d", i), Owner: "ann", Profile: "seat", Hours: 2}
		if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			b.Fatal(err)
		}
	}
	br := newBrowser(b, env.URL, false)
	br.signIn(env.UserToken)
	b.ResetTimer()
	var total, apiTotal float64
	for range b.N {
		br.run(chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(`#vm-vm-199`, chromedp.ByQuery))
		var ms float64
		br.eval(`window.gpuvmRendered`, &ms)
		var cards int
		br.eval(`document.querySelectorAll('ul.vms > li').length`, &cards)
		if cards != 200 {
			b.Fatalf("%d VMs drawn, want 200", cards)
		}
		total += ms
		var api float64
		br.eval(`performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/vms?')).map((e) => e.duration).reduce((a, d) => a + d, 0)`, &api)
		apiTotal += api
		var waterfall string
		br.eval(`performance.getEntries().filter((e) => e.entryType !== 'mark' && e.entryType !== 'paint' || e.name === 'first-contentful-paint')
		  .map((e) => e.name.replace(location.origin, '') + ' ' + Math.round(e.startTime) + '–' + Math.round(e.startTime + e.duration)).join('; ')`, &waterfall)
		b.Logf("ms since navigation: %s; drawn %.0f", waterfall, ms)
	}
	b.ReportMetric(total/float64(b.N), "ms-to-render")
	b.ReportMetric(apiTotal/float64(b.N), "ms-GET-vms")
}
