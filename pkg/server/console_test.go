package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/rfb"
	"github.com/gpuvm/gpuvm/pkg/server/web"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// fakeVNC is a VNC server on a loopback port that speaks RFB 3.8 with VNC
// authentication, as QEMU does with a password: the server side of the
// handshake, then a ServerInit of a small desktop, then one raw
// FramebufferUpdate of a striped picture per non-incremental request.
type fakeVNC struct {
	t        testing.TB
	ln       net.Listener
	password string
	w, h     int
	// flood makes the server send updates without end once a client is
	// in (a display that outpaces its client).
	flood bool

	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
	authOK atomic.Int32 // handshakes that passed authentication
	closed atomic.Int32 // connections that ended
}

func newFakeVNC(t testing.TB, password string) *fakeVNC {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeVNC{t: t, ln: ln, password: password, w: 64, h: 48, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns[c] = true
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer func() {
					c.Close()
					f.mu.Lock()
					delete(f.conns, c)
					f.mu.Unlock()
					f.closed.Add(1)
				}()
				_ = f.serve(c)
			}()
		}
	}()
	t.Cleanup(f.Close)
	return f
}

// Close stops the server and ends its connections.
func (f *fakeVNC) Close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// open is the number of connections still open.
func (f *fakeVNC) open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakeVNC) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *fakeVNC) serve(c net.Conn) error {
	be := binary.BigEndian
	if err := rfb.ServeVNCAuth(c, f.password, [16]byte([]byte("0123456789abcdef"))); err != nil {
		return err
	}
	f.authOK.Add(1)
	var shared [1]byte
	if _, err := io.ReadFull(c, shared[:]); err != nil {
		return err
	}
	// ServerInit: 32 bits per pixel, depth 24, little endian, true colour,
	// red at bit 0, green 8, blue 16 (what noVNC asks for).
	name := "fake display"
	si := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0}
	be.PutUint16(si[0:], uint16(f.w))
	be.PutUint16(si[2:], uint16(f.h))
	si = be.AppendUint32(si, uint32(len(name)))
	if _, err := c.Write(append(si, name...)); err != nil {
		return err
	}
	frame := f.frame()
	if f.flood {
		for {
			if _, err := c.Write(frame); err != nil {
				return err
			}
		}
	}
	for {
		var typ [1]byte
		if _, err := io.ReadFull(c, typ[:]); err != nil {
			return err
		}
		var skip int
		switch typ[0] {
		case 0: // SetPixelFormat
			skip = 19
		case 2: // SetEncodings
			var hdr [3]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return err
			}
			skip = 4 * int(be.Uint16(hdr[1:]))
		case 3: // FramebufferUpdateRequest
			var req [9]byte
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return err
			}
			if req[0] == 0 { // not incremental
				if _, err := c.Write(frame); err != nil {
					return err
				}
			}
		case 4: // KeyEvent
			skip = 7
		case 5: // PointerEvent
			skip = 5
		case 6: // ClientCutText
			var hdr [7]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return err
			}
			skip = int(be.Uint32(hdr[3:]))
		default:
			return fmt.Errorf("fake VNC: message type %d", typ[0])
		}
		if _, err := io.CopyN(io.Discard, c, int64(skip)); err != nil {
			return err
		}
	}
}

// frame is a FramebufferUpdate of the whole desktop in raw encoding:
// vertical stripes of red, green, blue and white.
func (f *fakeVNC) frame() []byte {
	be := binary.BigEndian
	b := []byte{0, 0, 0, 1}
	b = be.AppendUint16(b, 0)
	b = be.AppendUint16(b, 0)
	b = be.AppendUint16(b, uint16(f.w))
	b = be.AppendUint16(b, uint16(f.h))
	b = be.AppendUint32(b, 0) // raw
	colours := [][4]byte{{255, 0, 0, 0}, {0, 255, 0, 0}, {0, 0, 255, 0}, {255, 255, 255, 0}}
	for y := 0; y < f.h; y++ {
		for x := 0; x < f.w; x++ {
			c := colours[x*len(colours)/f.w]
			b = append(b, c[:]...)
		}
	}
	return b
}

// rfbFrame is the client side of RFB over rw, for a server that offers
// security type None (gpuvmd's proxy): it completes the handshake, asks
// for the whole screen and reads the first FramebufferUpdate. It returns
// the desktop's name and the pixel bytes received.
func rfbFrame(rw io.ReadWriter) (string, int, error) {
	be := binary.BigEndian
	ver := make([]byte, 12)
	if _, err := io.ReadFull(rw, ver); err != nil {
		return "", 0, fmt.Errorf("read version: %w", err)
	}
	if string(ver) != "RFB 003.008\n" {
		return "", 0, fmt.Errorf("version %q", ver)
	}
	if _, err := rw.Write([]byte("RFB 003.008\n")); err != nil {
		return "", 0, err
	}
	types := make([]byte, 2)
	if _, err := io.ReadFull(rw, types); err != nil {
		return "", 0, fmt.Errorf("read security types: %w", err)
	}
	if types[0] != 1 || types[1] != rfb.SecNone {
		return "", 0, fmt.Errorf("security types %v, want [1 None]", types)
	}
	if _, err := rw.Write([]byte{rfb.SecNone}); err != nil {
		return "", 0, err
	}
	var result uint32
	if err := binary.Read(rw, be, &result); err != nil || result != 0 {
		return "", 0, fmt.Errorf("security result %d, %v", result, err)
	}
	if _, err := rw.Write([]byte{1}); err != nil { // ClientInit, shared
		return "", 0, err
	}
	si := make([]byte, 24)
	if _, err := io.ReadFull(rw, si); err != nil {
		return "", 0, fmt.Errorf("read ServerInit: %w", err)
	}
	w, h, bpp := be.Uint16(si[0:]), be.Uint16(si[2:]), int(si[4])
	name := make([]byte, be.Uint32(si[20:]))
	if _, err := io.ReadFull(rw, name); err != nil {
		return "", 0, err
	}
	req := []byte{2, 0, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	be.PutUint16(req[14:], w)
	be.PutUint16(req[16:], h)
	if _, err := rw.Write(req); err != nil {
		return "", 0, err
	}
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(rw, hdr); err != nil || hdr[0] != 0 {
		return "", 0, fmt.Errorf("read FramebufferUpdate: %v %v", hdr, err)
	}
	total := 0
	for range be.Uint16(hdr[2:]) {
		r := make([]byte, 12)
		if _, err := io.ReadFull(rw, r); err != nil {
			return "", 0, err
		}
		n := int(be.Uint16(r[4:])) * int(be.Uint16(r[6:])) * bpp / 8
		if _, err := io.CopyN(io.Discard, rw, int64(n)); err != nil {
			return "", 0, err
		}
		total += n
	}
	return string(name), total, nil
}

// fakeConsoles stands for the hypervisor: every VM's display is the fake
// VNC server, every guest has addrs.
type fakeConsoles struct {
	mu      sync.Mutex
	con     domain.Console
	conErr  error
	addrs   []hypervisor.Address
	addrErr error
}

func (f *fakeConsoles) Console(context.Context, string) (domain.Console, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.con, f.conErr
}

func (f *fakeConsoles) Addresses(context.Context, string) ([]hypervisor.Address, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs, f.addrErr
}

// consoleEnv is an API on a real loopback port with a store, ann's running
// VM "box" (and bob's "other"), the fake VNC server as every display, a TCP
// echo server as the guest's TCP port 7 and a UDP echo server as its UDP
// port 7 (other UDP ports: a loopback port nobody listens on). gpuvmd's
// log is kept in log (JSON).
type consoleEnv struct {
	t        testing.TB
	srv      *Server
	http     *httptest.Server
	st       *store.Store
	dsn      string
	clock    *clocktest.Clock
	vnc      *fakeVNC
	consoles *fakeConsoles
	box      *store.VM // ann's, running
	other    *store.VM // bob's, running
	echo     net.Listener
	udpEcho  *net.UDPConn
	dials    atomic.Int32 // tunnel dials to the fake guest address
	log      *logtest.Buffer
}

// guestIP is the address the fake hypervisor gives every guest; Dial sends
// it to the echo server.
var guestIP = netip.MustParseAddr("192.0.2.10")

func newConsoleEnv(t testing.TB, o ConsoleOptions) *consoleEnv {
	t.Helper()
	ctx := context.Background()
	e := &consoleEnv{t: t, clock: clocktest.New(time.Now())}
	db := storetest.Config(t, store.DriverSQLite, storetest.WithClock(e.clock.Now), storetest.Quiet)
	e.dsn = db.DSN
	st := storetest.Open(t, db)
	e.st = st
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}
	for _, u := range users {
		if err := st.CreateUser(ctx, &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
	}
	e.box = e.runningVM("ann", "box")
	e.other = e.runningVM("bob", "other")
	e.vnc = newFakeVNC(t, e.box.DisplayPassword)
	e.consoles = &fakeConsoles{
		con:   domain.Console{Protocol: domain.GraphicsVNC, Host: "127.0.0.1", Port: e.vnc.port(), Password: e.box.DisplayPassword},
		addrs: []hypervisor.Address{{Interface: "vnet0", IP: guestIP, Prefix: 24, Source: hypervisor.SourceLease}},
	}
	e.echo = echoServer(t)
	e.udpEcho = udpEchoServer(t)
	closedUDP, closedTCP := closedUDPPort(t), closedTCPPort(t)
	o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		if host == guestIP.String() && network == "udp" {
			e.dials.Add(1)
			addr = closedUDP
			if port == "7" {
				addr = e.udpEcho.LocalAddr().String()
			}
		} else if host == guestIP.String() {
			e.dials.Add(1)
			addr = closedTCP // the guest refuses: a real ECONNREFUSED
			if port == "7" {
				addr = e.echo.Addr().String()
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
profile "seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
` + desktopTestProfiles)}) // desktop_test.go
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.log = &logtest.Buffer{}
	e.srv = newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st,
		Consoles: e.consoles, Console: o, Log: slog.New(slog.NewJSONHandler(e.log, nil))})
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.srv.Close()
		e.vnc.Close() // before the HTTP server, which waits for its handlers
		e.http.Close()
	})
	return e
}

// runningVM writes a VM as the orchestrator leaves a running one.
func (e *consoleEnv) runningVM(owner, name string) *store.VM {
	e.t.Helper()
	ctx := context.Background()
	vm := &store.VM{Name: name, Owner: owner, Profile: "seat", Hours: 1, DisplayPassword: newDisplayPassword()}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
		e.t.Fatal(err)
	}
	vm, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: "ready"})
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *consoleEnv) setState(vm *store.VM, state string) {
	e.t.Helper()
	cur, err := e.st.GetVM(context.Background(), vm.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.UpdateVMState(context.Background(), vm.ID, cur.Version, store.VMUpdate{State: state}); err != nil {
		e.t.Fatal(err)
	}
}

// call sends a request with a bearer token to the running API.
func (e *consoleEnv) call(method, path, token, body string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// console asks for a console ticket of vm as token's user.
func (e *consoleEnv) console(token string, vm *store.VM) api.ConsoleResponse {
	e.t.Helper()
	resp, b := e.call("GET", "/v1/vms/"+vm.ID+"/console", token, "")
	if resp.StatusCode != 200 {
		e.t.Fatalf("GET console: %d %s", resp.StatusCode, b)
	}
	var out api.ConsoleResponse
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// dialWS opens a websocket; a refusal is the HTTP status and problem.
func (e *consoleEnv) dialWS(ctx context.Context, rawURL string) (*websocket.Conn, int, string) {
	e.t.Helper()
	ws, resp, err := websocket.Dial(ctx, rawURL, &websocket.DialOptions{HTTPClient: e.http.Client()})
	if err != nil {
		if resp == nil {
			e.t.Fatalf("dial %s: %v", rawURL, err)
		}
		b, _ := io.ReadAll(resp.Body)
		var p api.Problem
		_ = json.Unmarshal(b, &p)
		return nil, resp.StatusCode, p.Detail
	}
	return ws, 101, ""
}

func echoServer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln
}

// readClose reads until the websocket ends and returns its close status
// and reason (-1 when it ended without a close frame).
func readClose(ctx context.Context, ws *websocket.Conn) (websocket.StatusCode, string) {
	for {
		_, _, err := ws.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			return -1, err.Error()
		}
	}
}

func TestDisplayPassword(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		p := newDisplayPassword()
		if len(p) != domain.MaxVNCPassword || strings.Trim(p, displayPasswordChars) != "" {
			t.Fatalf("password %q", p)
		}
		seen[p] = true
	}
	if len(seen) < 200 {
		t.Errorf("%d distinct passwords of 200", len(seen))
	}
	// A VM gets one when it is asked for.
	s, st, _ := vmServer(t)
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"pw"}`)
	var created api.CreateVMResponse
	json.Unmarshal(rec.Body.Bytes(), &created)
	vm, err := st.GetVM(context.Background(), created.VM.ID)
	if err != nil || len(vm.DisplayPassword) != domain.MaxVNCPassword {
		t.Fatalf("VM row %+v %v", vm, err)
	}
	if strings.Contains(rec.Body.String(), vm.DisplayPassword) {
		t.Error("the display password is in the API's answer")
	}
}

// TestConsoleOverWebSocket: the owner's ticket opens the display once, gpuvmd
// answers the display's password, the client speaks RFB to a framebuffer
// update; the ticket does not open a second connection.
func TestConsoleOverWebSocket(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.console("ann-token", e.box)
	host := strings.TrimPrefix(e.http.URL, "http://")
	wantWS := "ws://" + host + "/v1/console/ws?" + url.Values{"vm": {e.box.ID}, "ticket": {c.Ticket}}.Encode()
	if c.Protocol != "vnc" || !strings.HasPrefix(c.Ticket, store.TicketPrefix) || c.Direct != nil || c.WebSocketURL != wantWS ||
		c.VVURL != e.http.URL+"/v1/vms/"+e.box.ID+"/console.vv" ||
		c.BrowserURL != e.http.URL+"/console/"+e.box.ID+"?ticket="+url.QueryEscape(c.Ticket) {
		t.Errorf("console answer %+v", c)
	}
	if left := time.Until(c.ExpiresAt); left < 50*time.Second || left > 61*time.Second {
		t.Errorf("ticket valid for %v", left)
	}
	ws, code, detail := e.dialWS(ctx, c.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", code, detail)
	}
	name, pixels, err := rfbFrame(websocket.NetConn(ctx, ws, websocket.MessageBinary))
	if err != nil {
		t.Fatal(err)
	}
	if name != "fake display" || pixels != 64*48*4 || e.vnc.authOK.Load() != 1 {
		t.Errorf("desktop %q, %d pixel bytes, %d authentications", name, pixels, e.vnc.authOK.Load())
	}
	// The ticket is spent.
	if ws2, code, detail := e.dialWS(ctx, c.WebSocketURL); ws2 != nil || code != 403 || !strings.Contains(detail, "already used") {
		t.Errorf("second use: %d %q", code, detail)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the display connection to close", func() bool { return e.vnc.open() == 0 })

	// Admins see where the display listens.
	if a := e.console("admin-token", e.box); a.Direct == nil || a.Direct.Port != e.vnc.port() || a.Direct.Host != "127.0.0.1" {
		t.Errorf("admin's console %+v", a.Direct)
	}
	// A display that listens everywhere is reached at the request's host.
	e.consoles.mu.Lock()
	e.consoles.con.Host = "0.0.0.0"
	e.consoles.mu.Unlock()
	if a := e.console("admin-token", e.box); a.Direct == nil || a.Direct.Host != "127.0.0.1" {
		t.Errorf("admin's console of a display on 0.0.0.0: %+v", a.Direct)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConsoleRefusals: who may not, what may not, and that a refusal leaves
// nothing open.
func TestConsoleRefusals(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := e.runningVM("ann", "stopped-one")
	e.setState(stopped, store.VMStopped)

	// Ticket requests.
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		detail                          string
	}{
		{"another user's VM", "GET", "/v1/vms/" + e.other.ID + "/console", "ann-token", "", 404, "no VM"},
		{"another user's VM by name", "GET", "/v1/vms/other/console.vv", "ann-token", "", 404, "no VM"},
		{"no token", "GET", "/v1/vms/" + e.box.ID + "/console", "", "", 401, ""},
		{"not running", "GET", "/v1/vms/" + stopped.ID + "/console", "ann-token", "", 409, "is stopped, not running"},
		{"not running .vv", "GET", "/v1/vms/stopped-one/console.vv", "ann-token", "", 409, "not running"},
		{"tunnel of another's VM", "POST", "/v1/vms/" + e.other.ID + "/tunnel", "ann-token", `{"port":22}`, 404, "no VM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.call(tc.method, tc.path, tc.token, tc.body)
			var p api.Problem
			_ = json.Unmarshal(b, &p)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
		})
	}

	wsURL := "ws" + strings.TrimPrefix(e.http.URL, "http") + "/v1/console/ws"
	fresh := func(vm *store.VM, kind string, port int) string {
		plain, err := e.st.IssueTicket(ctx, &store.ConsoleTicket{VMID: vm.ID, User: vm.Owner, Kind: kind, Port: port}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	expired := fresh(e.box, store.TicketConsole, 0)
	e.clock.Advance(2 * time.Minute)
	forOther := fresh(e.other, store.TicketConsole, 0)
	tunnel := fresh(e.box, store.TicketTunnel, 22)
	stoppedTicket := fresh(e.box, store.TicketConsole, 0)
	for _, tc := range []struct {
		name, query string
		status      int
		detail      string
	}{
		{"missing ticket", "", 401, "send ?ticket="},
		{"unknown ticket", "?ticket=gvt_nothing", 403, "unknown"},
		{"expired ticket", "?ticket=" + url.QueryEscape(expired), 403, "expired"},
		{"ticket for another VM", "?" + url.Values{"vm": {e.box.ID}, "ticket": {forOther}}.Encode(), 403, "another VM"},
		{"tunnel ticket on the console", "?ticket=" + url.QueryEscape(tunnel), 403, "tunnel ticket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, code, detail := e.dialWS(ctx, wsURL+tc.query)
			if ws != nil {
				ws.CloseNow()
			}
			if code != tc.status || !strings.Contains(detail, tc.detail) {
				t.Errorf("%d %q", code, detail)
			}
		})
	}
	// Refused for the wrong VM, the ticket is spent: it opens nothing now.
	if ws, code, _ := e.dialWS(ctx, wsURL+"?ticket="+url.QueryEscape(forOther)); ws != nil || code != 403 {
		t.Errorf("a ticket refused for the wrong VM is spent: %d", code)
	}
	// A plain GET does not spend the ticket.
	resp, b := e.call("GET", "/v1/console/ws?ticket="+url.QueryEscape(stoppedTicket), "", "")
	if resp.StatusCode != 400 || !strings.Contains(string(b), "websocket") {
		t.Errorf("plain GET: %d %s", resp.StatusCode, b)
	}
	// A VM that stopped since its ticket was issued.
	e.setState(e.box, store.VMStopping)
	if ws, code, detail := e.dialWS(ctx, wsURL+"?ticket="+url.QueryEscape(stoppedTicket)); ws != nil || code != 409 || !strings.Contains(detail, "stopping") {
		t.Errorf("ticket of a stopped VM: %d %q", code, detail)
	}
	e.setState(e.box, store.VMRunning)
	// A display that refuses gpuvmd's password: 502, and why.
	e.consoles.mu.Lock()
	e.consoles.con.Password = "wrong"
	e.consoles.mu.Unlock()
	c := e.console("ann-token", e.box)
	if ws, code, detail := e.dialWS(ctx, c.WebSocketURL); ws != nil || code != 502 || !strings.Contains(detail, "Authentication failed") {
		t.Errorf("wrong display password: %d %q", code, detail)
	}
	// No display at all.
	e.consoles.mu.Lock()
	e.consoles.conErr = fmt.Errorf("vm x: %w", domain.ErrNoConsole)
	e.consoles.mu.Unlock()
	if resp, b := e.call("GET", "/v1/vms/box/console", "ann-token", ""); resp.StatusCode != 409 || !strings.Contains(string(b), "no VNC or SPICE display") {
		t.Errorf("no display: %d %s", resp.StatusCode, b)
	}
	waitFor(t, "every display connection to close", func() bool { return e.vnc.open() == 0 })
}

// TestConsoleVV: the virt-viewer file of the VM's display.
func TestConsoleVV(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	resp, b := e.call("GET", "/v1/vms/box/console.vv", "ann-token", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.VVContentType ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="box.vv"` || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	want := fmt.Sprintf("[virt-viewer]\ntype=vnc\nhost=127.0.0.1\nport=%d\npassword=%s\ntitle=box (gpuvm)\ndelete-this-file=1\nrelease-cursor=shift+f12\n",
		e.vnc.port(), e.box.DisplayPassword)
	if string(b) != want {
		t.Errorf(".vv:\n%s\nwant:\n%s", b, want)
	}
	// SPICE, listening everywhere: the host the request came to.
	e.consoles.mu.Lock()
	e.consoles.con = domain.Console{Protocol: domain.GraphicsSpice, Host: "::", Port: 5930, Password: "sp1ce"}
	e.consoles.mu.Unlock()
	_, b = e.call("GET", "/v1/vms/"+e.box.ID+"/console.vv", "admin-token", "")
	if !strings.Contains(string(b), "type=spice\nhost=127.0.0.1\nport=5930\npassword=sp1ce\n") {
		t.Errorf("SPICE .vv:\n%s", b)
	}
	// No browser console for SPICE.
	if c := e.console("ann-token", e.box); c.Protocol != "spice" || c.BrowserURL != "" {
		t.Errorf("SPICE console %+v", c)
	}
}

// TestConsoleTimeouts: an idle connection, a stalled client, an oversized
// message, a VM that stops and gpuvmd's Close each end the proxy with a
// reason, and leave no goroutine or socket behind.
func TestConsoleTimeouts(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{IdleTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		CheckInterval: 20 * time.Millisecond, MaxMessage: 64 << 10, MaxDuration: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.http.Client().CloseIdleConnections()
	leaks := goleak.IgnoreCurrent()

	open := func() *websocket.Conn {
		t.Helper()
		ws, code, detail := e.dialWS(ctx, e.console("ann-token", e.box).WebSocketURL)
		if ws == nil {
			t.Fatalf("websocket refused: %d %s", code, detail)
		}
		return ws
	}
	handshake := func(ws *websocket.Conn) {
		t.Helper()
		if _, _, err := rfbFrame(websocket.NetConn(ctx, ws, websocket.MessageBinary)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		act    func(ws *websocket.Conn)
		code   websocket.StatusCode
		reason string
	}{
		{"idle", func(ws *websocket.Conn) { handshake(ws) }, websocket.StatusPolicyViolation, "idle for 300ms"},
		{"VM stops", func(ws *websocket.Conn) {
			handshake(ws)
			e.setState(e.box, store.VMStopping)
		}, websocket.StatusGoingAway, "VM box is stopping"},
		{"message too large", func(ws *websocket.Conn) {
			handshake(ws)
			_ = ws.Write(ctx, websocket.MessageBinary, make([]byte, 65<<10))
		}, websocket.StatusMessageTooBig, ""},
		{"text message", func(ws *websocket.Conn) {
			handshake(ws)
			_ = ws.Write(ctx, websocket.MessageText, []byte("hello"))
		}, websocket.StatusUnsupportedData, "binary messages only"},
		{"client closes", func(ws *websocket.Conn) {
			handshake(ws)
			ws.Close(websocket.StatusNormalClosure, "bye")
		}, -1, ""},
		{"gpuvmd closes", func(ws *websocket.Conn) {
			handshake(ws)
			e.srv.Close()
		}, websocket.StatusGoingAway, "gpuvmd is shutting down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.setState(e.box, store.VMRunning)
			ws := open()
			start := time.Now()
			tc.act(ws)
			if tc.code == -1 {
				waitFor(t, "the display connection to close", func() bool { return e.vnc.open() == 0 })
				return
			}
			code, reason := readClose(ctx, ws)
			if code != tc.code || !strings.Contains(reason, tc.reason) {
				t.Errorf("closed with %d %q, want %d %q", code, reason, tc.code, tc.reason)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			waitFor(t, "the display connection to close", func() bool { return e.vnc.open() == 0 })
		})
	}

	// A client that stops reading while the display floods it is cut
	// after WriteTimeout; its display connection is closed.
	t.Run("stalled client", func(t *testing.T) {
		e2 := newConsoleEnv(t, ConsoleOptions{WriteTimeout: 300 * time.Millisecond, CheckInterval: 20 * time.Millisecond})
		e2.vnc.flood = true
		ws, code, detail := e2.dialWS(ctx, e2.console("ann-token", e2.box).WebSocketURL)
		if ws == nil {
			t.Fatalf("websocket refused: %d %s", code, detail)
		}
		defer ws.CloseNow()
		nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
		// Through ClientInit, then never read again.
		buf := make([]byte, 12)
		io.ReadFull(nc, buf)
		nc.Write([]byte("RFB 003.008\n"))
		io.ReadFull(nc, buf[:2])
		nc.Write([]byte{rfb.SecNone})
		io.ReadFull(nc, buf[:4])
		nc.Write([]byte{1})
		waitFor(t, "the stalled proxy to close the display connection", func() bool { return e2.vnc.closed.Load() == 1 && e2.vnc.open() == 0 })
	})

	e.http.Client().CloseIdleConnections()
	goleak.VerifyNone(t, leaks)
}

// TestConsoleMaxDuration: a busy connection still ends at its limit.
func TestConsoleMaxDuration(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{MaxDuration: 400 * time.Millisecond, CheckInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, code, detail := e.dialWS(ctx, e.console("ann-token", e.box).WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", code, detail)
	}
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	if _, _, err := rfbFrame(nc); err != nil {
		t.Fatal(err)
	}
	// Keep it busy: a pointer event every 50ms.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := nc.Write([]byte{5, 0, 0, 1, 0, 1}); err != nil {
					return
				}
			}
		}
	}()
	code2, reason := readClose(ctx, ws)
	close(stop)
	if code2 != websocket.StatusPolicyViolation || !strings.Contains(reason, "open for 400ms") {
		t.Errorf("closed with %d %q", code2, reason)
	}
}

// TestConsolePageRoute: the browser page checks its ticket without
// spending it, and says plainly why it cannot open.
func TestConsolePageRoute(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	issue := func(vm *store.VM, kind string, port int) string {
		plain, err := e.st.IssueTicket(ctx, &store.ConsoleTicket{VMID: vm.ID, User: vm.Owner, Kind: kind, Port: port}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	expired := issue(e.box, store.TicketConsole, 0)
	e.clock.Advance(2 * time.Minute)
	used := issue(e.box, store.TicketConsole, 0)
	if _, err := e.st.ConsumeTicket(ctx, used); err != nil {
		t.Fatal(err)
	}
	c := e.console("ann-token", e.box)
	okStatus := 200
	if web.NoVNC() == "" {
		okStatus = 503
	}
	page := "/console/" + e.box.ID + "?ticket="
	for _, tc := range []struct {
		name, path string
		status     int
		want       string
	}{
		{"valid", page + c.Ticket, okStatus, `data-ticket="` + c.Ticket + `"`},
		{"no ticket", "/console/" + e.box.ID, 401, "has no ticket"},
		{"used", page + used, 403, "was used already"},
		{"expired", page + expired, 403, "has expired"},
		{"unknown", page + "gvt_x", 403, "is unknown"},
		{"another VM's page", "/console/" + e.other.ID + "?ticket=" + c.Ticket, 403, "not for this VM"},
		{"tunnel ticket", page + issue(e.box, store.TicketTunnel, 22), 403, "not for this VM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.call("GET", tc.path, "", "")
			h := resp.Header
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) || h.Get("Content-Type") != "text/html; charset=utf-8" ||
				h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
				t.Errorf("%d %v\n%s", resp.StatusCode, h, b)
			}
		})
	}
	// Loading the page did not spend the ticket: its websocket works.
	ws, code, detail := e.dialWS(ctx, c.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket after the page: %d %s", code, detail)
	}
	ws.CloseNow()
	resp, b := e.call("GET", "/console-assets/static/console.js", "", "")
	if resp.StatusCode != 200 || !strings.Contains(string(b), "new RFB(") {
		t.Errorf("console.js: %d", resp.StatusCode)
	}
}
