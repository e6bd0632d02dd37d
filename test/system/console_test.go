package system

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/server/web"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/test/guest"
)

type consoleBackends struct{}

func (consoleBackends) Names() []string                        { return nil }
func (consoleBackends) Backend(string) (backend.Backend, bool) { return nil, false }

type consoleTokens map[string]*store.User

func (t consoleTokens) AuthenticateToken(_ context.Context, plain string) (*store.User, *store.APIToken, error) {
	if u, ok := t[plain]; ok {
		return u, &store.APIToken{}, nil
	}
	return nil, nil, store.ErrInvalidToken
}

// TestConsoleThroughProxy boots the tiny guest with a VNC display and a
// password, and reaches it the way a user does: gpuvmd's API gives a
// one-time ticket, its websocket proxy answers the display's password, and
// the client completes the RFB handshake up to a framebuffer update. A
// second use of the ticket, a ticket for another VM, another user and a
// request without a ticket are refused. A headless Chromium then opens the
// browser console (noVNC) and must see it connected and not blank.
func TestConsoleThroughProxy(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	req, serial := e.request("console")
	if _, err := e.conn.CreateVM(ctx, req); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.conn.DeleteVM(context.Background(), req.Spec.UUID, 5*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}()
	bctx, bcancel := context.WithTimeout(ctx, bootTimeout)
	log, err := waitForLines(bctx, serial, []string{guest.ReadyMarker}, "Kernel panic")
	bcancel()
	if err != nil {
		t.Fatalf("%v\nserial console:\n%s", err, tail(log, 3000))
	}

	// gpuvmd's API over the real hypervisor, with the VM recorded as the
	// orchestrator records it: its ID is the domain's UUID.
	st := storetest.New(t, storetest.Quiet)
	users := consoleTokens{"ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}
	for _, u := range users {
		if err := st.CreateUser(ctx, &store.User{Name: u.Name}); err != nil {
			t.Fatal(err)
		}
	}
	vm := &store.VM{ID: req.Spec.UUID, Name: "console", Owner: "ann", Profile: "tiny", Hours: 1, DisplayPassword: req.Spec.Graphics.Password}
	other := &store.VM{Name: "other", Owner: "ann", Profile: "tiny", Hours: 1}
	for _, v := range []*store.VM{vm, other} {
		if _, err := st.CreateVM(ctx, v, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateVMState(ctx, v.ID, v.Version, store.VMUpdate{State: store.VMRunning}); err != nil {
			t.Fatal(err)
		}
	}
	srv := server.New(server.Deps{Auth: users, Backends: consoleBackends{}, Store: st, Consoles: e.conn, Log: logger()})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()

	get := func(path, token string) (*http.Response, []byte) {
		t.Helper()
		r, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		resp, err := hs.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := get("/v1/vms/"+vm.ID+"/console", "ann-token")
	if resp.StatusCode != 200 {
		t.Fatalf("GET console: %d %s", resp.StatusCode, b)
	}
	var con api.ConsoleResponse
	if err := json.Unmarshal(b, &con); err != nil {
		t.Fatal(err)
	}
	if con.Protocol != "vnc" || con.BrowserURL == "" {
		t.Errorf("console %+v", con)
	}
	dial := func(rawURL string) (*websocket.Conn, int, string) {
		ws, resp, err := websocket.Dial(ctx, rawURL, &websocket.DialOptions{HTTPClient: hs.Client()})
		if err != nil {
			if resp == nil {
				t.Fatalf("dial: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			return nil, resp.StatusCode, string(b)
		}
		return ws, 101, ""
	}
	ws, code, body := dial(con.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", code, body)
	}
	// gpuvmd answered the display's password: the client offers none.
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fi, err := rfbSession(conn, "")
	conn.Close()
	if err != nil {
		t.Fatalf("RFB through the proxy: %v", err)
	}
	if fi.Rects < 1 || fi.PixelBytes == 0 || fi.Width < 320 {
		t.Errorf("frame %+v", fi)
	}
	t.Logf("through gpuvmd's proxy: %s, %dx%d at %d bpp, %q, first update %d rectangle(s), %d bytes", fi.Version, fi.Width, fi.Height, fi.BitsPerPixel, fi.Name, fi.Rects, fi.PixelBytes)

	// Refusals.
	if ws2, code, body := dial(con.WebSocketURL); ws2 != nil || code != 403 || !strings.Contains(body, "already used") {
		t.Errorf("second use of the ticket: %d %s", code, body)
	}
	forOther, err := st.IssueTicket(ctx, &store.ConsoleTicket{VMID: other.ID, User: "ann", Kind: store.TicketConsole}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wsBase := "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/console/ws?"
	if ws2, code, body := dial(wsBase + url.Values{"vm": {vm.ID}, "ticket": {forOther}}.Encode()); ws2 != nil || code != 403 || !strings.Contains(body, "another VM") {
		t.Errorf("a ticket for another VM: %d %s", code, body)
	}
	if ws2, code, body := dial(wsBase + "vm=" + vm.ID); ws2 != nil || code != 401 || !strings.Contains(body, "ticket") {
		t.Errorf("no ticket: %d %s", code, body)
	}
	if resp, b := get("/v1/vms/"+vm.ID+"/console", "bob-token"); resp.StatusCode != 404 {
		t.Errorf("another user's console: %d %s", resp.StatusCode, b)
	}

	browserConsole(t, ctx, get, vm.ID)
}

// browserConsole opens the VM's browser console in a headless Chromium and
// checks that noVNC connects and draws something; the screenshot is kept
// under .cache/test-artifacts (or $GPUVM_TEST_ARTIFACTS).
func browserConsole(t *testing.T, ctx context.Context, get func(path, token string) (*http.Response, []byte), vmID string) {
	t.Helper()
	var browser string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Log("browser console not checked: no Chromium here (scripts/setup-host.sh installs it)")
		return
	}
	if web.NoVNC() == "" {
		t.Error("browser console not checked: noVNC is not bundled (run scripts/fetch-novnc.sh; make test does)")
		return
	}
	resp, b := get("/v1/vms/"+vmID+"/console", "ann-token")
	var con api.ConsoleResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &con) != nil {
		t.Fatalf("GET console: %d %s", resp.StatusCode, b)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1024, 800))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// Two minutes: under a full make test on two cores, Chromium's start,
	// the page and noVNC's modules took over a minute once.
	wctx, wcancel := context.WithTimeout(bctx, 2*time.Minute)
	defer wcancel()
	var status string
	if err := chromedp.Run(wctx, chromedp.Navigate(con.BrowserURL),
		chromedp.WaitVisible(`#status[data-state="connected"]`, chromedp.ByQuery),
		chromedp.Text("#status", &status, chromedp.ByQuery)); err != nil {
		var page string
		lctx, lcancel := context.WithTimeout(bctx, 10*time.Second)
		_ = chromedp.Run(lctx, chromedp.Evaluate(`location.href + ' ' + document.readyState + ' ' +
  JSON.stringify((document.querySelector('#status') || {}).dataset || null) + ' ' + (document.querySelector('#status') || {}).textContent`, &page))
		lcancel()
		t.Fatalf("noVNC did not connect: %v (the page: %s)", err, page)
	}
	var lit int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && lit == 0; time.Sleep(200 * time.Millisecond) {
		if err := chromedp.Run(bctx, chromedp.Evaluate(`(() => {
  const c = document.querySelector('#screen canvas'); if (!c) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] || d[i+1] || d[i+2]) n++;
  return n; })()`, &lit)); err != nil {
			t.Fatal(err)
		}
	}
	var png []byte
	if err := chromedp.Run(bctx, chromedp.CaptureScreenshot(&png)); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("GPUVM_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".cache", "test-artifacts")
	}
	dir = filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	shot := filepath.Join(dir, "console.png")
	if err := errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(shot, png, 0o644)); err != nil {
		t.Fatal(err)
	}
	t.Logf("browser console: %q, %d lit pixels; screenshot %s", status, lit, shot)
	if status != "connected" || lit == 0 {
		t.Errorf("browser console: status %q, %d lit pixels (blank)", status, lit)
	}
}
