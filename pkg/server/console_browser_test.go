package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cdruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/server/web"
)

// chromium finds a Chromium (or Chrome) binary.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where a test keeps what it produced for people to look
// at: $GPUVM_TEST_ARTIFACTS/<test>, else .cache/test-artifacts/<test> at the
// top of the repository.
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("GPUVM_TEST_ARTIFACTS")
	if root == "" {
		dir, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				t.Fatal("no go.mod above the test's directory")
			}
			dir = parent
		}
		root = filepath.Join(dir, ".cache", "test-artifacts")
	}
	dir := filepath.Join(root, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// canvasCheck reads noVNC's canvas: its size, how many pixels are not
// black, and how many colours it holds.
const canvasCheck = `(() => {
  const c = document.querySelector('#screen canvas');
  if (!c) return {w: 0, h: 0, lit: 0, colours: 0};
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let lit = 0; const colours = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] || d[i+1] || d[i+2]) lit++;
    colours.add(d[i] + ',' + d[i+1] + ',' + d[i+2]);
  }
  return {w: c.width, h: c.height, lit: lit, colours: colours.size};
})()`

// TestBrowserConsole opens the browser console page in a headless Chromium
// against the fake VNC display: noVNC must report "connected" and draw the
// display's stripes. The screenshot is kept as a test artefact.
func TestBrowserConsole(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium on this machine: apt-get install chromium (scripts/setup-host.sh installs it)")
	}
	if web.NoVNC() == "" {
		t.Skip("noVNC is not bundled in this build: run scripts/fetch-novnc.sh (make test does) and test again")
	}
	e := newConsoleEnv(t, ConsoleOptions{})
	c := e.console("ann-token", e.box)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(800, 600))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The page's console messages, to say why it failed.
	var mu sync.Mutex
	var console []string
	chromedp.ListenTarget(bctx, func(ev any) {
		if m, ok := ev.(*cdruntime.EventConsoleAPICalled); ok {
			var parts []string
			for _, a := range m.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			mu.Lock()
			console = append(console, string(m.Type)+": "+strings.Join(parts, " "))
			mu.Unlock()
		}
	})

	var status, state string
	err := chromedp.Run(bctx,
		chromedp.Navigate(c.BrowserURL),
		chromedp.WaitVisible(`#status[data-state="connected"]`, chromedp.ByQuery),
		chromedp.Text("#status", &status, chromedp.ByQuery),
		chromedp.AttributeValue("#status", "data-state", &state, nil, chromedp.ByQuery),
	)
	if err != nil {
		// Say what the page said.
		sctx, scancel := context.WithTimeout(bctx, 5*time.Second)
		_ = chromedp.Run(sctx, chromedp.Text("#status", &status, chromedp.ByQuery))
		scancel()
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("noVNC never reported connected: %v; status %q; page console:\n%s", err, status, strings.Join(console, "\n"))
	}
	// The first update is drawn on the next animation frame: wait for it.
	var canvas struct{ W, H, Lit, Colours int }
	deadline := time.Now().Add(20 * time.Second)
	for {
		var raw json.RawMessage
		if err := chromedp.Run(bctx, chromedp.Evaluate(canvasCheck, &raw)); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &canvas); err != nil {
			t.Fatal(err)
		}
		if canvas.Lit == canvas.W*canvas.H && canvas.Lit > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var png []byte
	if err := chromedp.Run(bctx, chromedp.CaptureScreenshot(&png)); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifactDir(t), "console.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("status %q; canvas %dx%d, %d lit pixels, %d colours; screenshot %s", status, canvas.W, canvas.H, canvas.Lit, canvas.Colours, shot)
	if state != "connected" || canvas.W != e.vnc.w || canvas.H != e.vnc.h || canvas.Lit != canvas.W*canvas.H || canvas.Colours != 4 {
		t.Errorf("state %q, canvas %+v: want connected and the %dx%d display's 4 stripes", state, canvas, e.vnc.w, e.vnc.h)
	}
	// The page dropped the spent ticket from the address bar.
	var loc string
	if err := chromedp.Run(bctx, chromedp.Location(&loc)); err != nil || regexp.MustCompile(`ticket=`).MatchString(loc) {
		t.Errorf("address bar %q, %v", loc, err)
	}
}
