package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromium finds a Chromium or Chrome binary: $GPUVM_TEST_CHROMIUM, else
// the usual names on PATH.
func chromium() string {
	if p := os.Getenv("GPUVM_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The report renders in headless Chromium with no console message, no
// script error, no request beyond the file itself (its CSP forbids any),
// every chart laid out with a size, and nothing wider than the window.
func TestRenderInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium on PATH (chromium, chromium-browser, google-chrome; or set GPUVM_TEST_CHROMIUM): " +
			"the headless rendering test is skipped (Debian: apt-get install chromium)")
	}
	if testing.Short() {
		t.Skip("-short: the headless Chromium test is skipped")
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, render(t, fixture()), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.ToSlash(path)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1100, 900),
		chromedp.Flag("disable-gpu", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	var mu sync.Mutex
	var problems []string
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	chromedp.ListenTarget(bctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value))
			}
			note("console.%s: %s", e.Type, strings.Join(args, " "))
		case *runtime.EventExceptionThrown:
			note("exception: %s", e.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if e.Entry.Level == log.LevelError || e.Entry.Level == log.LevelWarning {
				note("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if e.Request.URL != url {
				note("request: %s", e.Request.URL)
			}
		case *network.EventLoadingFailed:
			note("loading failed: %s", e.ErrorText)
		}
	})
	var layout struct {
		Title      string    `json:"title"`
		SVGs       []float64 `json:"svgs"` // width × height of each, laid out
		Overflow   bool      `json:"overflow"`
		Headings   int       `json:"headings"`
		TableCells int       `json:"cells"`
	}
	var shot []byte
	err := chromedp.Run(bctx,
		network.Enable(),
		log.Enable(),
		runtime.Enable(),
		chromedp.Navigate(url),
		chromedp.WaitVisible("footer", chromedp.ByQuery),
		chromedp.Evaluate(`({
			title: document.title,
			svgs: [...document.querySelectorAll("svg")].map(s => { const r = s.getBoundingClientRect(); return r.width * r.height; }),
			overflow: document.documentElement.scrollWidth > window.innerWidth,
			headings: document.querySelectorAll("h2").length,
			cells: document.querySelectorAll("td").length,
		})`, &layout),
		chromedp.FullScreenshot(&shot, 80),
	)
	if err != nil {
		t.Fatalf("render %s in %s: %v", path, bin, err)
	}
	// Give late events (a blocked request is reported after load) a moment.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("Chromium: %s", p)
	}
	if !strings.HasPrefix(layout.Title, "GPU usage report: ") || layout.Headings != 7 || layout.TableCells < 50 {
		t.Errorf("layout: %+v", layout)
	}
	if len(layout.SVGs) != 7 {
		t.Errorf("%d SVGs laid out, want 7", len(layout.SVGs))
	}
	for i, area := range layout.SVGs {
		if area < 100*50 {
			t.Errorf("SVG %d is laid out %g px² only", i, area)
		}
	}
	if layout.Overflow {
		t.Error("the report is wider than a 1100-pixel window")
	}
	if len(shot) < 10_000 {
		t.Errorf("a screenshot of %d bytes", len(shot))
	}
}
