package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// desktopEnv is a gpuvmd API with ann's running VMs of every desktop
// protocol: "win" (rdp), "broken" (rdp on a port nothing listens on),
// "dcv" (dcv, session work), "stream" (sunshine, no display), "seat" (the
// VNC display) and the stopped "off" (rdp). The guest's RDP, DCV and
// Sunshine streaming ports echo; Sunshine's web UI is sunshine.
type desktopEnv struct {
	url, token string
	base       int // Sunshine's base port, free here
	sunshine   *fakeSunshine
}

type staticConfig struct{ cfg *config.Config }

func (s staticConfig) Load() *config.Config  { return s.cfg }
func (staticConfig) Reload() (string, error) { return "", nil }

// fakeSunshine is Sunshine's web UI API: POST /api/pin with basic auth
// gpuvm:pw; it takes the PIN on the second try (Moonlight was not waiting
// yet on the first).
type fakeSunshine struct {
	mu    sync.Mutex
	tries int
	pins  []string
}

func (f *fakeSunshine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, p, ok := r.BasicAuth()
	if r.URL.Path != "/api/pin" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	if !ok || u != "gpuvm" || p != "pw" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var body struct{ Pin, Name string }
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if f.tries == 1 {
		fmt.Fprint(w, `{"status":false}`)
		return
	}
	f.pins = append(f.pins, body.Pin)
	fmt.Fprint(w, `{"status":"true"}`)
}

// freeSunshineBase finds a base port whose Sunshine TCP ports are free
// here.
func freeSunshineBase(t *testing.T) int {
	t.Helper()
	for base := 20000 + os.Getpid()%20000; base < 65000; base += 97 {
		free := true
		for _, off := range []int{-5, 0, 1, 21} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports for Sunshine")
	return 0
}

func newDesktopEnv(t *testing.T) *desktopEnv {
	t.Helper()
	ctx := context.Background()
	e := &desktopEnv{base: freeSunshineBase(t), sunshine: &fakeSunshine{}}
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(fmt.Sprintf(`
profile "seat" {
  boot { kernel = "/k" }
}
profile "rdp" {
  boot { kernel = "/k" }
  desktop {
    protocol = "rdp"
  }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
profile "rdp-3390" {
  boot { kernel = "/k" }
  desktop {
    protocol = "rdp"
    port     = 3390
  }
}
profile "dcv" {
  boot { kernel = "/k" }
  desktop {
    protocol = "dcv"
    session  = "work"
  }
}
profile "sunshine" {
  boot { kernel = "/k" }
  display {
    type = "none"
  }
  desktop {
    protocol = "sunshine"
    port     = %d
  }
}
`, e.base))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	log := slog.New(slog.DiscardHandler)
	st := storetest.New(t, storetest.WithLogger(log))
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := st.CreateToken(ctx, "ann", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.token = token
	for _, v := range []struct{ name, profile, state string }{
		{"win", "rdp", store.VMRunning}, {"broken", "rdp-3390", store.VMRunning}, {"dcv", "dcv", store.VMRunning},
		{"stream", "sunshine", store.VMRunning}, {"seat", "seat", store.VMRunning}, {"off", "rdp", store.VMStopped},
	} {
		vm := &store.VM{Name: v.name, Owner: "ann", Profile: v.profile, Hours: 1, DisplayPassword: "s3cretpw"}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: v.state}); err != nil {
			t.Fatal(err)
		}
	}
	vnc := listen(t, func(c net.Conn) { serveVNC(c, "s3cretpw") })
	echo := listen(t, func(c net.Conn) { io.Copy(c, c) })
	sun := httptest.NewUnstartedServer(e.sunshine)
	sun.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the tunnels' probes are no TLS handshakes
	sun.StartTLS()
	t.Cleanup(sun.Close)
	open := map[string]string{"3389": echo.Addr().String(), "8443": echo.Addr().String(), strconv.Itoa(e.base + 1): sun.Listener.Addr().String()}
	for _, off := range []int{-5, 0, 21} {
		open[strconv.Itoa(e.base+off)] = echo.Addr().String()
	}
	srv := server.New(server.Deps{Auth: st, Backends: noBackends{}, Store: st, Log: log, Config: staticConfig{cfg},
		Consoles: fixedConsoles{con: domain.Console{Protocol: domain.GraphicsVNC, Host: "127.0.0.1", Port: vnc.Addr().(*net.TCPAddr).Port, Password: "s3cretpw"}},
		Console: server.ConsoleOptions{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			if host == guestAddr {
				if open[port] == "" {
					return nil, errors.New("connect: connection refused")
				}
				addr = open[port]
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); hs.Close(); st.Close() })
	e.url = hs.URL
	return e
}

// startDesktop runs 'gpuvm ARGS' until stop, once it listens on n
// addresses (which it returns).
//
// stop(until...) first waits (20 s at most) for stderr to hold each of
// until: what the command says once it has done what the test checks, so
// the cancel never cuts it short.
func startDesktop(t *testing.T, e *desktopEnv, seams *consoleSeams, n int, stdin io.Reader, stdout io.Writer, args ...string) ([]string, func(until ...string) (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 16)
	seams.listening = func(a string) { addrs <- a }
	done := make(chan int, 1)
	var errb logtest.Buffer
	go func() {
		done <- runGPUVMTo(ctx, t, nil, seams, stdin, stdout, &errb, append(args, "--url", e.url, "--token", e.token)...)
	}()
	var got []string
	for len(got) < n {
		select {
		case a := <-addrs:
			got = append(got, a)
		case code := <-done:
			cancel()
			t.Fatalf("gpuvm %s: exit %d before listening: %s", strings.Join(args, " "), code, errb.String())
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("gpuvm %s never listened", strings.Join(args, " "))
		}
	}
	return got, func(until ...string) (int, string) {
		for _, u := range until {
			waitUntil(t, "gpuvm says "+strconv.Quote(u), func() bool { return strings.Contains(errb.String(), u) })
		}
		cancel()
		code := <-done
		return code, errb.String()
	}
}

// TestDesktopRDPClient: FreeRDP found on PATH runs on the tunnel, as the
// guest's user unless --user or $GPUVM_DESKTOP_USER names another, with the
// arguments after --, and its end ends the command.
func TestDesktopRDPClient(t *testing.T) {
	e := newDesktopEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		wantU string
	}{
		// As the portal and 'gpuvm show' say it: the guest's user, the
		// account gpuvm made for ann (never the local user).
		{"gpuvm rdp", []string{"rdp", "win"}, nil, "/u:ann"},
		{"gpuvm desktop", []string{"desktop", "win"}, nil, "/u:ann"},
		{"--user", []string{"desktop", "win", "--user", "Administrator"}, nil, "/u:Administrator"},
		{"$GPUVM_DESKTOP_USER", []string{"rdp", "win"}, map[string]string{"GPUVM_DESKTOP_USER": "bob"}, "/u:bob"},
		{"--user beats $GPUVM_DESKTOP_USER", []string{"rdp", "win", "--user", "Administrator"}, map[string]string{"GPUVM_DESKTOP_USER": "bob"}, "/u:Administrator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotArgs []string
			seams := &consoleSeams{
				lookPath: func(f string) (string, error) {
					if f == "xfreerdp" {
						return "/usr/bin/xfreerdp", nil
					}
					return "", errors.New("not found")
				},
				run: func(_ context.Context, path string, args, _ []string, _ io.Reader, _, _ io.Writer) (int, error) {
					gotArgs = append([]string{path}, args...)
					echoThrough(t, strings.TrimPrefix(args[0], "/v:"), "RDP through the tunnel")
					return 0, nil
				},
			}
			args := append(append([]string{}, tc.args...), "--url", e.url, "--token", e.token, "--", "/cert:tofu")
			stderr, code := runGPUVMEnv(ctx, t, tc.env, seams, nil, io.Discard, args...)
			if code != 0 || len(gotArgs) != 4 || gotArgs[0] != "/usr/bin/xfreerdp" || !strings.HasPrefix(gotArgs[1], "/v:127.0.0.1:") || gotArgs[2] != tc.wantU || gotArgs[3] != "/cert:tofu" {
				t.Errorf("exit %d, ran %q, want %s: %s", code, gotArgs, tc.wantU, stderr)
			}
			// The vGPU's note comes with it.
			if !strings.Contains(stderr, "does not show a vGPU's framebuffer") || !strings.Contains(stderr, "Starting xfreerdp") {
				t.Errorf("stderr %s", stderr)
			}
		})
	}
}

// TestDesktopRDPFile: --rdp-file writes the file for the tunnel and starts
// nothing; --print prints the address only; gpuvm rdp is the same.
func TestDesktopRDPFile(t *testing.T) {
	e := newDesktopEnv(t)
	path := filepath.Join(t.TempDir(), "win.rdp")
	seams := &consoleSeams{lookPath: func(string) (string, error) { return "/usr/bin/xfreerdp", nil }, open: func(string) error {
		t.Error("opened something")
		return nil
	}}
	var out logtest.Buffer
	// No --user: the guest's user, as GET /v1/vms/{id}/desktop.rdp has it.
	addrs, stop := startDesktop(t, e, seams, 1, nil, &out, "desktop", "win", "--rdp-file", path, "--local-port", "0")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "full address:s:" + addrs[0] + "\r\nusername:s:ann\r\nprompt for credentials:i:1\r\n"
	if fi, _ := os.Stat(path); !strings.HasPrefix(string(b), want) || fi.Mode().Perm() != 0o600 {
		t.Errorf(".rdp %v:\n%q", fi.Mode(), b)
	}
	if out.String() != "RDP file: "+path+"\n" {
		t.Errorf("stdout %q", out.String())
	}
	echoThrough(t, addrs[0], "RDP")
	if code, stderr := stop(); code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the file asked for is kept: %v", err)
	}

	for _, cmd := range []string{"desktop", "rdp"} {
		var out logtest.Buffer
		addrs, stop := startDesktop(t, e, &consoleSeams{lookPath: noProgram}, 1, nil, &out, cmd, "win", "--print")
		if out.String() != addrs[0]+"\n" {
			t.Errorf("%s --print: stdout %q", cmd, out.String())
		}
		echoThrough(t, addrs[0], "RDP")
		stop()
	}
}

// TestDesktopDCV: the web URL and the dcv:// link through the tunnel.
func TestDesktopDCV(t *testing.T) {
	e := newDesktopEnv(t)
	var out logtest.Buffer
	var opened string
	var mu sync.Mutex
	seams := &consoleSeams{open: func(u string) error { mu.Lock(); opened = u; mu.Unlock(); return nil }}
	addrs, stop := startDesktop(t, e, seams, 1, nil, &out, "desktop", "dcv", "--auth-token", "t0k+n")
	web := "https://" + addrs[0] + "/?authToken=t0k%2Bn#work"
	if out.String() != web+"\ndcv://"+addrs[0]+"/?authToken=t0k%2Bn#work\n" {
		t.Errorf("stdout %q", out.String())
	}
	mu.Lock()
	if opened != web {
		t.Errorf("opened %q", opened)
	}
	mu.Unlock()
	echoThrough(t, addrs[0], "DCV")
	if code, stderr := stop(); code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// TestDesktopSunshine: the TCP tunnels at the guest's ports, pairing with
// a PIN through Sunshine's API; the UDP ports need the UDP hook.
func TestDesktopSunshine(t *testing.T) {
	e := newDesktopEnv(t)
	var udpPorts []int
	defer func(prev func(context.Context, *client.Client, *cobra.Command, string, []int, string) error) {
		openUDPForwards = prev
	}(openUDPForwards)
	openUDPForwards = func(_ context.Context, _ *client.Client, _ *cobra.Command, ref string, ports []int, bind string) error {
		udpPorts = ports
		return nil
	}
	var moonlight []string
	var mu sync.Mutex
	seams := &consoleSeams{
		lookPath: func(f string) (string, error) { return "/usr/bin/" + f, nil },
		run: func(_ context.Context, path string, args, _ []string, _ io.Reader, _, _ io.Writer) (int, error) {
			mu.Lock()
			moonlight = append([]string{path}, args...)
			mu.Unlock()
			return 0, nil
		},
	}
	var out logtest.Buffer
	addrs, stop := startDesktop(t, e, seams, 4, strings.NewReader("pw\n"), &out, "desktop", "stream", "--pin", "4321", "--user", "gpuvm")
	for i, off := range []int{-5, 0, 1, 21} {
		if addrs[i] != "127.0.0.1:"+strconv.Itoa(e.base+off) {
			t.Errorf("tunnels at %v", addrs)
		}
	}
	echoThrough(t, addrs[3], "RTSP")
	waitUntil(t, "Sunshine takes the PIN", func() bool {
		e.sunshine.mu.Lock()
		defer e.sunshine.mu.Unlock()
		return len(e.sunshine.pins) == 1 && e.sunshine.pins[0] == "4321"
	})
	code, stderr := stop("Sunshine took the PIN")
	if code != 0 || !strings.Contains(stderr, "Sunshine took the PIN") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if fmt.Sprint(udpPorts) != fmt.Sprint([]int{e.base + 9, e.base + 10, e.base + 11}) {
		t.Errorf("UDP ports %v", udpPorts)
	}
	mu.Lock()
	if strings.Join(moonlight, " ") != "/usr/bin/moonlight pair 127.0.0.1 --pin 4321" {
		t.Errorf("ran %q", moonlight)
	}
	mu.Unlock()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting: %s", what)
}

// TestDesktopRefusals: bad input and what cannot be reached, each with a
// clear message.
func TestDesktopRefusals(t *testing.T) {
	e := newDesktopEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The test's guest is not reachable over UDP: its forwards fail.
	defer func(prev func(context.Context, *client.Client, *cobra.Command, string, []int, string) error) {
		openUDPForwards = prev
	}(openUDPForwards)
	openUDPForwards = func(context.Context, *client.Client, *cobra.Command, string, []int, string) error {
		return errors.New("UDP port 47998: tunnel refused")
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string
	}{
		{"not running", []string{"desktop", "off"}, "", 1, []string{"VM off is stopped, not running"}},
		{"no such VM", []string{"desktop", "nope"}, "", 1, []string{`no VM "nope"`}},
		{"nothing listens on the desktop's port", []string{"desktop", "broken", "--print"}, "", 1,
			[]string{"cannot connect to port 3390 of VM broken", "nothing answers on port 3390 of the guest: is the RDP (xrdp, or Windows' Remote Desktop) server installed and running"}},
		{"sunshine whose UDP forwards fail", []string{"desktop", "stream"}, "", 1, []string{"UDP " + strconv.Itoa(e.base+9) + ", ", "need UDP tunnels: UDP port 47998: tunnel refused"}},
		{"sunshine wrong password", []string{"desktop", "stream", "--pin", "1234", "--user", "gpuvm"}, "nope\n", 1, []string{"Sunshine refused the web UI's user \"gpuvm\" and password (401)"}},
		{"sunshine pin without user", []string{"desktop", "stream", "--pin", "1234"}, "", 2, []string{"--user NAME or $GPUVM_DESKTOP_USER"}},
		{"bad pin", []string{"desktop", "stream", "--pin", "12"}, "", 2, []string{`--pin "12" is not a 4-digit PIN`}},
		{"local port for sunshine", []string{"desktop", "stream", "--local-port", "5000"}, "", 2, []string{"--local-port does not apply to Sunshine"}},
		{"client arguments for vnc", []string{"desktop", "seat", "--", "/cert:tofu"}, "", 2, []string{"arguments after -- go to the RDP client; the desktop of seat is vnc"}},
		{"two VMs", []string{"desktop", "win", "seat"}, "", 2, []string{"takes one VM name or ID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{}, tc.args...)
			at := len(args)
			for i, a := range args {
				if a == "--" {
					at = i
				}
			}
			args = append(args[:at], append([]string{"--url", e.url, "--token", e.token}, tc.args[at:]...)...)
			stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, strings.NewReader(tc.stdin), io.Discard, args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestDesktopConsole: a VNC desktop is the display console, as gpuvm
// console shows it.
func TestDesktopConsole(t *testing.T) {
	e := newDesktopEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, nil, &out, "desktop", "seat", "--print", "--url", e.url, "--token", e.token)
	if code != 0 || !strings.Contains(out.String(), "/console/") || !strings.Contains(out.String(), "ticket=") {
		t.Errorf("exit %d, stdout %q: %s", code, out.String(), stderr)
	}
	out.Reset()
	if _, code := runGPUVM(ctx, t, &consoleSeams{}, nil, &out, "desktop", "stream", "--json", "--url", e.url, "--token", e.token); code != 0 || !strings.Contains(out.String(), `"protocol": "sunshine"`) {
		t.Errorf("--json: exit %d %s", code, out.String())
	}
}

// TestProfileShowDesktop: gpuvm profile show says the desktop in the guest.
func TestProfileShowDesktop(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(`
profile "dcv" {
  boot { kernel = "/k" }
  desktop {
    protocol = "dcv"
    session  = "work"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "profile", "show", "dcv", "--config", dir)
	if code != 0 || !strings.Contains(out, "Desktop:") || !strings.Contains(out, "dcv in the guest, port 8443 (gpuvm desktop), session work") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
	js, _, code := runCLI(t, "profile", "show", "dcv", "--config", dir, "--json")
	if code != 0 || !strings.Contains(js, `"desktop": {`) || !strings.Contains(js, `"session": "work"`) {
		t.Errorf("--json: %s", js)
	}
}

// TestShowNamesTheDesktop: gpuvm show says how to reach the desktop the
// profile names (GET /v1/vms/{id}'s desktop).
func TestShowNamesTheDesktop(t *testing.T) {
	e := newDesktopEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, want := range map[string]string{
		"win":    "Remote desktop: gpuvm desktop win (RDP in the guest)",
		"stream": "Remote desktop: gpuvm desktop stream (Sunshine in the guest)",
		"dcv":    "Remote desktop: gpuvm desktop dcv (DCV in the guest)",
		"seat":   "Display: gpuvm console seat (VNC) SSH: gpuvm ssh seat",
	} {
		var out strings.Builder
		stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, strings.NewReader(""), &out, "show", name, "--url", e.url, "--token", e.token)
		if got := strings.Join(strings.Fields(out.String()), " "); code != 0 || !strings.Contains(got, want) {
			t.Errorf("show %s: exit %d, lacks %q:\n%s%s", name, code, want, out.String(), stderr)
		}
		// Only what the profile has: no RDP for a seat.
		if name == "seat" && (strings.Contains(out.String(), "gpuvm rdp") || strings.Contains(out.String(), "Remote desktop")) {
			t.Errorf("show seat offers a remote desktop:\n%s", out.String())
		}
	}
}

// A desktop server that cannot be reached is said once: the guest's own
// refusal says nothing listens there; another failure says nothing answers.
func TestDesktopUnreachable(t *testing.T) {
	for _, tc := range []struct {
		kind, detail, want string
	}{
		{"guest-refused", "the guest refused the connection on port 3389 of VM s1 (192.168.122.9): nothing listens there",
			"the guest refused the connection on port 3389 of VM s1 (192.168.122.9): nothing listens there: is the RDP (xrdp, or Windows' Remote Desktop) server installed and running there? cloud-init may still be setting it up (see docs/config.md, \"Desktops in the guest\"; 'gpuvm ssh s1' to look)"},
		{"bad-gateway", "cannot connect to port 3389 of VM s1: i/o timeout",
			"cannot connect to port 3389 of VM s1: i/o timeout: nothing answers on port 3389 of the guest: is the RDP (xrdp, or Windows' Remote Desktop) server installed and running there? cloud-init may still be setting it up (see docs/config.md, \"Desktops in the guest\"; 'gpuvm ssh s1' to look)"},
	} {
		p := &client.Problem{Problem: api.Problem{Type: "https://gpuvm.dev/problems/" + tc.kind, Status: 502, Detail: tc.detail}}
		if got := desktopUnreachable(p, "s1", api.DesktopRDP, "rdp", 3389); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.kind, got, tc.want)
		}
	}
}
