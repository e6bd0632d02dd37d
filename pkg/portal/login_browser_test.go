package portal_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// TestLoginNextInChromium: the sign-in page goes on to its next only when
// the browser reads it as a page of this origin. Every spelling a URL
// parser turns into another host (tabs and newlines it drops, a backslash
// it takes for a slash, a scheme without slashes, javascript:) ends on the
// catalogue of this origin, and the browser asks no other host for
// anything; a next of this origin, with its query and fragment, is
// honoured.
func TestLoginNextInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles})
	b := newBrowser(t, env.URL, false)
	for _, c := range []struct{ next, want string }{
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\t\\evil.example", "/"},
		{"/\\evil.example", "/"},
		{"/\\\\evil.example", "/"},
		{"\\/evil.example", "/"},
		{"//evil.example", "/"},
		{" //evil.example", "/"},
		{"https:evil.example", "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(document.domain)", "/"},
		{"/.//evil.example", "/"},    // the path "//evil.example": another host once written as a path
		{"/login?next=%2Fvms", "/"},  // not the sign-in page again
		{"/vms?x=1#y", "/vms?x=1#y"}, // this origin: honoured, query and fragment too
		{"/usage\t", "/usage"},       // what the URL parser drops, dropped
		{env.URL + "/book", "/book"}, // this origin, written whole
	} {
		b.mu.Lock()
		b.requests = nil
		b.mu.Unlock()
		// Signed out (signed in, /login goes to /), then signed in on the
		// form. Off the last page first: its script, signed out, would go
		// to /login itself.
		b.run(chromedp.Navigate("about:blank"), network.ClearBrowserCookies(), chromedp.Navigate(env.URL+"/login?next="+url.QueryEscape(c.next)), chromedp.WaitVisible(`#token`, chromedp.ByQuery),
			chromedp.SendKeys(`#token`, env.UserToken+"\r", chromedp.ByQuery))
		if got := b.landing(env.URL + "/login"); got != env.URL+c.want {
			t.Errorf("signed in on /login?next=%s (next %q): the browser went to %s, want %s", url.QueryEscape(c.next), c.next, got, env.URL+c.want)
		}
		b.mu.Lock()
		for _, r := range b.requests {
			if !strings.HasPrefix(r, env.URL+"/") && !strings.HasPrefix(r, "data:") {
				t.Errorf("next %q: the browser asked another origin for %s", c.next, r)
			}
		}
		b.mu.Unlock()
	}
}

// landing waits until the tab is no longer on the page whose URL begins
// from, and returns the URL of where it went (the URL the tab committed,
// also when it is an error page for a host that does not answer).
func (b *browser) landing(from string) string {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var cur string
		err := chromedp.Run(b.ctx, chromedp.ActionFunc(func(ctx context.Context) error {
			i, entries, err := page.GetNavigationHistory().Do(ctx)
			if err == nil && i >= 0 && int(i) < len(entries) {
				cur = entries[i].URL
			}
			return err
		}))
		if err == nil && cur != "" && !strings.HasPrefix(cur, from) {
			return cur
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("still on %s after 20s (at %q, %v)", from, cur, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With server.contact set, the pages name whom to ask where they say "ask
// your admin", in English and Chinese; the sign-in page reads it before
// anyone signs in (GET /v1/auth/methods), the others from the session.
func TestContactInChromium(t *testing.T) {
	needBrowser(t)
	const who = "Lab IT <gpu-help@example.org>"
	env := clienttest.New(t, clienttest.Options{Profiles: profiles + "\nserver {\n  contact = \"" + who + "\"\n}\n"})
	b := newBrowser(t, env.URL, false)
	b.run(chromedp.Navigate(env.URL+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	var contact string
	b.eval(`fetch('/v1/auth/methods').then((r) => r.json()).then((m) => m.contact)`, &contact)
	if contact != who {
		t.Errorf("GET /v1/auth/methods: contact %q", contact)
	}
	b.signIn(env.UserToken)
	for _, c := range []struct{ lang, want string }{
		{"en", "Ask your admin (" + who + ") about anything unclear."},
		{"zh-CN", "有不清楚的地方请询问管理员（" + who + "）。"},
	} {
		b.eval(`document.cookie = 'gpuvm_lang=`+c.lang+`; path=/; samesite=strict'`, nil)
		b.run(chromedp.Navigate(env.URL + "/rules"))
		b.waitFor("the rules ("+c.lang+")", `document.querySelector('main p.intro')`)
		if s := b.text("main p.intro"); !strings.Contains(s, c.want) {
			t.Errorf("/rules (%s): %q, want %q in it", c.lang, s, c.want)
		}
	}
	b.eval(`document.cookie = 'gpuvm_lang=en; path=/; samesite=strict'`, nil)
}
