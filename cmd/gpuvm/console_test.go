package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/rfb"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// consoleEnv is a gpuvmd API whose VM "box" of user ann runs, with a VNC
// server (password-protected, speaking RFB 3.8) as its display, a TCP echo
// server as its guest's ports 7, 22 and 3389, and a UDP echo server as its
// UDP port 7 (its other UDP ports: a loopback port nobody listens on).
type consoleEnv struct {
	url, token string
	vm         *store.VM
	vncAddr    string
	st         *store.Store
}

var guestAddr = "192.0.2.20"

func newConsoleEnv(t *testing.T) *consoleEnv {
	t.Helper()
	return newConsoleEnvWith(t, nil)
}

// newConsoleEnvWith is newConsoleEnv with set changing the server's Deps.
func newConsoleEnvWith(t *testing.T, set func(*server.Deps)) *consoleEnv {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st := storetest.New(t, storetest.WithLogger(log))
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := st.CreateToken(ctx, "ann", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "box", Owner: "ann", Profile: "seat", Hours: 1, DisplayPassword: "s3cretpw"}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if vm, err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning}); err != nil {
		t.Fatal(err)
	}
	vnc := listen(t, func(c net.Conn) { serveVNC(c, vm.DisplayPassword) })
	echo := listen(t, func(c net.Conn) { io.Copy(c, c) })
	udpEcho, closedUDP := udpEchoServer(t), closedUDPPort(t)
	vncPort := vnc.Addr().(*net.TCPAddr).Port
	deps := server.Deps{Auth: st, Backends: noBackends{}, Store: st, Log: log,
		Consoles: fixedConsoles{con: domain.Console{Protocol: domain.GraphicsVNC, Host: "127.0.0.1", Port: vncPort, Password: vm.DisplayPassword}},
		Console: server.ConsoleOptions{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			if host == guestAddr && network == "udp" {
				addr = closedUDP
				if port == "7" {
					addr = udpEcho
				}
			} else if host == guestAddr {
				if port != "7" && port != "22" && port != "3389" {
					return nil, errors.New("connect: connection refused")
				}
				addr = echo.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	if set != nil {
		set(&deps)
	}
	srv := server.New(deps)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); hs.Close(); st.Close() })
	return &consoleEnv{url: hs.URL, token: token, vm: vm, vncAddr: vnc.Addr().String(), st: st}
}

type noBackends struct{}

func (noBackends) Names() []string                        { return nil }
func (noBackends) Backend(string) (backend.Backend, bool) { return nil, false }

type fixedConsoles struct{ con domain.Console }

func (f fixedConsoles) Console(context.Context, string) (domain.Console, error) { return f.con, nil }
func (f fixedConsoles) Addresses(context.Context, string) ([]hypervisor.Address, error) {
	return []hypervisor.Address{{IP: netip.MustParseAddr(guestAddr), Source: hypervisor.SourceLease}}, nil
}

// listen serves each connection with serve until the test ends.
func listen(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln
}

// serveVNC is a VNC server's side of RFB 3.8 with VNC authentication, to
// the ServerInit of a 32×16 desktop and one raw update per request.
func serveVNC(c net.Conn, password string) {
	if rfb.ServeVNCAuth(c, password, [16]byte(bytes.Repeat([]byte{7}, 16))) != nil {
		return
	}
	buf := make([]byte, 64)
	io.ReadFull(c, buf[:1])
	c.Write([]byte{0, 32, 0, 16, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0, 0, 0, 0, 3, 'b', 'o', 'x'})
	r := bufio.NewReader(c)
	for {
		typ, err := r.ReadByte()
		if err != nil || typ != 3 { // FramebufferUpdateRequest only
			return
		}
		if _, err := io.ReadFull(r, buf[:9]); err != nil {
			return
		}
		upd := []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 32, 0, 16, 0, 0, 0, 0}
		c.Write(append(upd, bytes.Repeat([]byte{255, 0, 0, 0}, 32*16)...))
	}
}

// rfbOverNone is a client's RFB 3.8 with security None (gpuvm's proxy
// answers the display's password): it reads the desktop's name and one
// update of the whole screen.
func rfbOverNone(rw io.ReadWriter) (string, error) {
	be := binary.BigEndian
	buf := make([]byte, 32*16*4+64)
	if _, err := io.ReadFull(rw, buf[:12]); err != nil {
		return "", err
	}
	rw.Write([]byte("RFB 003.008\n"))
	if _, err := io.ReadFull(rw, buf[:2]); err != nil || buf[1] != 1 {
		return "", errors.New("no security type None")
	}
	rw.Write([]byte{1})
	if _, err := io.ReadFull(rw, buf[:4]); err != nil || be.Uint32(buf) != 0 {
		return "", errors.New("security refused")
	}
	rw.Write([]byte{1})
	if _, err := io.ReadFull(rw, buf[:24]); err != nil {
		return "", err
	}
	name := make([]byte, be.Uint32(buf[20:]))
	io.ReadFull(rw, name)
	rw.Write([]byte{3, 0, 0, 0, 0, 0, 0, 32, 0, 16})
	if _, err := io.ReadFull(rw, buf[:16+32*16*4]); err != nil {
		return "", err
	}
	return string(name), nil
}

// runGPUVM runs the CLI with seams; it returns its output and exit code.
func runGPUVM(ctx context.Context, t *testing.T, seams *consoleSeams, stdin io.Reader, stdout io.Writer, args ...string) (string, int) {
	t.Helper()
	return runGPUVMEnv(ctx, t, nil, seams, stdin, stdout, args...)
}

// runGPUVMEnv is runGPUVM with these environment variables (and HOME).
func runGPUVMEnv(ctx context.Context, t *testing.T, vars map[string]string, seams *consoleSeams, stdin io.Reader, stdout io.Writer, args ...string) (string, int) {
	t.Helper()
	var errb bytes.Buffer
	code := runGPUVMTo(ctx, t, vars, seams, stdin, stdout, &errb, args...)
	return errb.String(), code
}

// runGPUVMTo is runGPUVMEnv writing stderr to errw as the command runs.
func runGPUVMTo(ctx context.Context, t *testing.T, vars map[string]string, seams *consoleSeams, stdin io.Reader, stdout, errw io.Writer, args ...string) int {
	t.Helper()
	ctx = context.WithValue(ctx, testSeamsKey{}, &testSeams{term: &terminal{in: stdin}})
	ctx = context.WithValue(ctx, consoleSeamsKey{}, seams)
	env := map[string]string{"HOME": t.TempDir()}
	for k, v := range vars {
		env[k] = v
	}
	root := newRoot(func(k string) string { return env[k] }, stdout, errw)
	root.SetIn(stdin)
	root.SetArgs(args)
	return exitCode(root.ExecuteContext(ctx), errw)
}

func noProgram(string) (string, error) { return "", errors.New("not found") }

func TestConsolePrint(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := []string{"--url", e.url, "--token", e.token}
	var out bytes.Buffer
	stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, nil, &out, append([]string{"console", "box", "--print"}, conn...)...)
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(e.url+"/console/"+e.vm.ID+"?ticket=gvt_") + `[A-Za-z0-9_-]{43}\n$`)
	if code != 0 || !want.MatchString(out.String()) {
		t.Errorf("console --print: exit %d, %q, %s", code, out.String(), stderr)
	}
	out.Reset()
	stderr, code = runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, nil, &out, append([]string{"console", "box", "--print", "--json"}, conn...)...)
	var con api.ConsoleResponse
	decodeStrict(t, out.String(), &con)
	if code != 0 || con.VMID != e.vm.ID || con.Protocol != "vnc" || !strings.HasPrefix(con.WebSocketURL, "ws://") {
		t.Errorf("console --print --json: exit %d, %+v, %s", code, con, stderr)
	}
	if _, code := runGPUVM(ctx, t, &consoleSeams{}, nil, io.Discard, append([]string{"console", "box", "--json"}, conn...)...); code != 2 {
		t.Errorf("--json without --print: exit %d", code)
	}
	// Without remote-viewer: the browser, opened on the desktop.
	var opened []string
	stderr, code = runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram, open: func(u string) error { opened = append(opened, u); return nil }}, nil, io.Discard,
		append([]string{"console", "box"}, conn...)...)
	if code != 0 || len(opened) != 1 || !strings.HasPrefix(opened[0], e.url+"/console/"+e.vm.ID+"?ticket=") || !strings.Contains(stderr, "in your browser") {
		t.Errorf("console in the browser: exit %d, opened %q, %s", code, opened, stderr)
	}
	// No browser either: the URL is printed.
	out.Reset()
	stderr, code = runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram, open: func(string) error { return errors.New("xdg-open is not installed") }}, nil, &out,
		append([]string{"console", "box"}, conn...)...)
	if code != 0 || !strings.HasPrefix(out.String(), e.url+"/console/") || !strings.Contains(stderr, "xdg-open is not installed") {
		t.Errorf("console without a browser: exit %d, %q, %s", code, out.String(), stderr)
	}
	// Unknown VM: the server's problem, exit 1.
	if stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, nil, io.Discard, append([]string{"console", "nope", "--print"}, conn...)...); code != 1 || !strings.Contains(stderr, `no VM "nope"`) {
		t.Errorf("unknown VM: exit %d %s", code, stderr)
	}
}

// fakeXDGOpen puts an xdg-open alone on PATH that appends its argument to
// the file it returns, then runs then (shell).
func fakeXDGOpen(t *testing.T, then string) string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "opened")
	script := "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '" + log + "'\n" + then + "\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return log
}

func readOpened(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// TestOpenWith: xdg-open's failure, or no graphical session, is an error;
// an xdg-open that succeeds, or still runs after openWait, opened it.
func TestOpenWith(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake xdg-open is a shell script")
	}
	defer func(w time.Duration) { openWait = w }(openWait)
	openWait = 200 * time.Millisecond
	const url = "http://127.0.0.1:1/console/x?ticket=t"
	x11 := map[string]string{"DISPLAY": ":0"}
	for _, tc := range []struct {
		name    string
		then    string // the fake xdg-open's end; "-": none on PATH
		env     map[string]string
		wantErr string // "" opened
		ran     bool
	}{
		{"xdg-open fails", "exit 3", x11, "xdg-open failed: exit status 3", true},
		{"xdg-open opens", "exit 0", x11, "", true},
		{"Wayland", "exit 0", map[string]string{"WAYLAND_DISPLAY": "wayland-0"}, "", true},
		{"still running", "exec /bin/sleep 2", x11, "", true},
		{"no graphical session (SSH)", "exit 0", map[string]string{}, "neither DISPLAY nor WAYLAND_DISPLAY", false},
		{"no xdg-open", "-", x11, "xdg-open is not installed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := fakeXDGOpen(t, tc.then)
			if tc.then == "-" {
				t.Setenv("PATH", t.TempDir())
			}
			err := openWith("linux", func(k string) string { return tc.env[k] }, url)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("openWith: %v, want %q", err, tc.wantErr)
			}
			if got, want := readOpened(t, log), map[bool]string{true: url + "\n"}[tc.ran]; got != want {
				t.Errorf("xdg-open got %q, want %q", got, want)
			}
		})
	}
}

// TestConsoleNoBrowser: where xdg-open fails, or over SSH (no DISPLAY nor
// WAYLAND_DISPLAY), gpuvm console prints the URL and says nothing opened
// it.
func TestConsoleNoBrowser(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "darwin" {
		t.Skip("xdg-open is Linux's opener")
	}
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, display, then, wantWhy string
		ran                          bool
	}{
		{"xdg-open fails", ":0", "exit 4", "xdg-open failed", true},
		{"over SSH", "", "exit 0", "neither DISPLAY nor WAYLAND_DISPLAY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := fakeXDGOpen(t, tc.then)
			t.Setenv("DISPLAY", tc.display)
			t.Setenv("WAYLAND_DISPLAY", "")
			var out bytes.Buffer
			stderr, code := runGPUVM(ctx, t, &consoleSeams{lookPath: noProgram}, nil, &out, "console", "box", "--url", e.url, "--token", e.token)
			if code != 0 || !strings.HasPrefix(out.String(), e.url+"/console/"+e.vm.ID+"?ticket=") || !strings.Contains(stderr, "Nothing opened the console") ||
				!strings.Contains(stderr, tc.wantWhy) || strings.Contains(stderr, "Opened") {
				t.Errorf("exit %d, stdout %q, stderr %s", code, out.String(), stderr)
			}
			if ran := readOpened(t, log) != ""; ran != tc.ran {
				t.Errorf("xdg-open ran: %v", ran)
			}
		})
	}
}

// TestConsoleViewer: with remote-viewer on the PATH, gpuvm hands it a .vv
// file for a local port that leads through gpuvmd to the display.
func TestConsoleViewer(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var vvPath, vv, desktop string
	var viewerErr error
	seams := &consoleSeams{
		tempDir:  dir,
		lookPath: func(f string) (string, error) { return "/usr/bin/" + f, nil },
		run: func(ctx context.Context, path string, args, env []string, _ io.Reader, _, _ io.Writer) (int, error) {
			if path != "/usr/bin/remote-viewer" || len(args) != 1 {
				return 1, errors.New("not remote-viewer")
			}
			vvPath = args[0]
			fi, err := os.Stat(vvPath)
			if err != nil || fi.Mode().Perm() != 0o600 {
				viewerErr = errors.New("the .vv file is not private")
			}
			b, _ := os.ReadFile(vvPath)
			vv = string(b)
			m := regexp.MustCompile(`(?m)^port=(\d+)$`).FindStringSubmatch(vv)
			if m == nil {
				viewerErr = errors.New("no port in the .vv file")
				return 1, nil
			}
			// The viewer connects twice, as viewers reconnect: each
			// connection gets its own ticket.
			for range 2 {
				c, err := net.Dial("tcp", "127.0.0.1:"+m[1])
				if err != nil {
					viewerErr = err
					return 1, nil
				}
				desktop, err = rfbOverNone(c)
				c.Close()
				if err != nil {
					viewerErr = err
					return 1, nil
				}
			}
			return 0, nil
		},
	}
	stderr, code := runGPUVM(ctx, t, seams, nil, io.Discard, "console", "box", "--url", e.url, "--token", e.token)
	if code != 0 || viewerErr != nil || desktop != "box" {
		t.Fatalf("console: exit %d, viewer %v, desktop %q, %s", code, viewerErr, desktop, stderr)
	}
	wantVV := regexp.MustCompile(`^\[virt-viewer\]\ntype=vnc\nhost=127\.0\.0\.1\nport=\d+\npassword=s3cretpw\ntitle=box \(gpuvm\)\ndelete-this-file=1\n`)
	if !wantVV.MatchString(vv) || strings.Contains(vv, e.vncAddr) {
		t.Errorf(".vv file:\n%s", vv)
	}
	if _, err := os.Stat(vvPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the .vv file is left: %v", err)
	}
	// --browser skips the viewer.
	var opened string
	seams.open = func(u string) error { opened = u; return nil }
	if _, code := runGPUVM(ctx, t, seams, nil, io.Discard, "console", "box", "--browser", "--url", e.url, "--token", e.token); code != 0 || !strings.Contains(opened, "/console/") {
		t.Errorf("--browser: exit %d, opened %q", code, opened)
	}
}

// startTunnel runs 'gpuvm ARGS' until cancel, and returns the address it
// listens on.
func startTunnel(t *testing.T, e *consoleEnv, seams *consoleSeams, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	seams.listening = func(a string) { addr <- a }
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		stderr, code = runGPUVM(ctx, t, seams, nil, io.Discard, append(args, "--url", e.url, "--token", e.token)...)
		done <- code
	}()
	select {
	case a := <-addr:
		return a, func() int { cancel(); return <-done }
	case code := <-done:
		cancel()
		t.Fatalf("gpuvm %s: exit %d before listening: %s", strings.Join(args, " "), code, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("gpuvm %s never listened", strings.Join(args, " "))
	}
	return "", nil
}

func echoThrough(t *testing.T, addr, msg string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Errorf("echo %q, %v; want %q", got, err, msg)
	}
}

func TestTunnelCommand(t *testing.T) {
	e := newConsoleEnv(t)
	addr, stop := startTunnel(t, e, &consoleSeams{}, "tunnel", "box", "7")
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("listens on %s", addr)
	}
	// Two connections at once, each with its own ticket.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); echoThrough(t, addr, strings.Repeat("x", 1000*(i+1))) }()
	}
	wg.Wait()
	echoThrough(t, addr, "once more")
	if code := stop(); code != 0 {
		t.Errorf("exit %d after Ctrl-C", code)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("still listening after the command ended")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tunnel", "box", "23"}, 1, "cannot connect to port 23 of VM box"},
		{[]string{"tunnel", "box", "0"}, 2, `PORT "0" is not a TCP port`},
		{[]string{"tunnel", "box", "0/tcp"}, 2, `PORT "0/tcp" is not a TCP port`},
		{[]string{"tunnel", "box", "22", "--local-port", "70000"}, 2, "--local-port 70000"},
		{[]string{"tunnel", "nope", "22"}, 1, `no VM "nope"`},
	} {
		stderr, code := runGPUVM(ctx, t, &consoleSeams{}, nil, io.Discard, append(tc.args, "--url", e.url, "--token", e.token)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("gpuvm %v: exit %d %q", tc.args, code, stderr)
		}
	}
}

func TestTunnelStdio(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		_, code := runGPUVM(ctx, t, &consoleSeams{}, inR, outW, "tunnel", "--stdio", e.vm.ID, "22", "--url", e.url, "--token", e.token)
		outW.Close()
		done <- code
	}()
	go inW.Write([]byte("SSH-2.0-test\r\n"))
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Errorf("read %q, %v", line, err)
	}
	inW.Close() // ssh is done
	go io.Copy(io.Discard, outR)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tunnel --stdio did not end with its input")
	}
}

func TestRDPCommand(t *testing.T) {
	e := newConsoleEnv(t)
	dir := t.TempDir()
	var opened string
	var mu sync.Mutex
	seams := &consoleSeams{tempDir: dir, lookPath: noProgram, open: func(p string) error { mu.Lock(); opened = p; mu.Unlock(); return nil }}
	addr, stop := startTunnel(t, e, seams, "rdp", "box", "--user", "Administrator")
	files, _ := filepath.Glob(filepath.Join(dir, "gpuvm-*.rdp"))
	if len(files) != 1 {
		t.Fatalf("rdp files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	fi, _ := os.Stat(files[0])
	want := "full address:s:" + addr + "\r\nusername:s:Administrator\r\n"
	if !strings.HasPrefix(string(b), want) || fi.Mode().Perm() != 0o600 {
		t.Errorf(".rdp %v:\n%s", fi.Mode(), b)
	}
	mu.Lock()
	if opened != files[0] {
		t.Errorf("opened %q", opened)
	}
	mu.Unlock()
	echoThrough(t, addr, "RDP")
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the .rdp file is left: %v", err)
	}
}

func TestSSHCommand(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var gotArgs, gotEnv []string
	seams := &consoleSeams{
		lookPath:   func(f string) (string, error) { return "/usr/bin/" + f, nil },
		executable: func() (string, error) { return "/opt/my tools/gpuvm", nil },
		run: func(_ context.Context, path string, args, env []string, _ io.Reader, _, _ io.Writer) (int, error) {
			if path != "/usr/bin/ssh" {
				return 1, errors.New("not ssh")
			}
			gotArgs, gotEnv = args, env
			return 5, nil
		},
	}
	stderr, code := runGPUVM(ctx, t, seams, nil, io.Discard, "ssh", "box", "-l", "ubuntu", "--url", e.url, "--token", e.token, "--", "nvidia-smi", "-L")
	// gpuvmd knows no host key of this VM: ssh asks as it always has.
	if want := "gpuvm: gpuvmd does not know the SSH host key of VM box (made without a cloud-init seed, or by an older gpuvmd): ssh asks you to check it the first time.\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	want := []string{"-o", "ProxyCommand='/opt/my tools/gpuvm' tunnel --stdio " + e.vm.ID + " 22", "-o", "HostKeyAlias=gpuvm-" + e.vm.ID,
		"-l", "ubuntu", "box", "nvidia-smi", "-L"}
	if code != 5 || strings.Join(gotArgs, "|") != strings.Join(want, "|") {
		t.Errorf("exit %d, ssh %q\nwant %q", code, gotArgs, want)
	}
	env := strings.Join(gotEnv, "\n")
	if !strings.Contains(env, "\nGPUVM_URL="+e.url+"\n") || !strings.HasSuffix(env, "\nGPUVM_TOKEN="+e.token) {
		t.Errorf("ssh's environment lacks the server and token")
	}
	// Without -l, the owner's account (cloud-init made it); an -l or
	// -o User= of ssh's own, after --, wins.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--", "cat", "/etc/hostname"}, []string{"-l", "ann", "box", "cat", "/etc/hostname"}},
		{[]string{"--", "-i", "k", "-l", "bob"}, []string{"box", "-i", "k", "-l", "bob"}},
		{[]string{"--", "-oUser=bob", "id"}, []string{"box", "-oUser=bob", "id"}},
	} {
		gotArgs = nil
		runGPUVM(ctx, t, seams, nil, io.Discard, append([]string{"ssh", "box", "--url", e.url, "--token", e.token}, tc.args...)...)
		if len(gotArgs) < 4 || strings.Join(gotArgs[4:], "|") != strings.Join(tc.want, "|") {
			t.Errorf("gpuvm ssh box %q: ssh %q, want the options then %q", tc.args, gotArgs, tc.want)
		}
	}
	for _, args := range [][]string{{"ssh"}, {"ssh", "box", "extra"}, {"ssh", "--", "box"}} {
		if _, code := runGPUVM(ctx, t, seams, nil, io.Discard, append(args, "--url", e.url)...); code != 2 {
			t.Errorf("gpuvm %v: exit %d, want 2", args, code)
		}
	}
}

func TestSSHNamesUser(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"nvidia-smi", "-l", "x"}, false}, // the command's own -l
		{[]string{"-l", "bob"}, true},
		{[]string{"-lbob"}, true},
		{[]string{"-vvl", "bob"}, true},
		{[]string{"-i", "key", "-l", "bob", "id"}, true},
		{[]string{"-i", "-lkey", "id"}, false}, // -i's value
		{[]string{"-o", "User=bob"}, true},
		{[]string{"-o", "user bob"}, true},
		{[]string{"-oUser=bob"}, true},
		{[]string{"-o", "UserKnownHostsFile=/dev/null", "id"}, false},
		{[]string{"-p", "22", "--", "-l", "x"}, false},
	} {
		if got := sshNamesUser(tc.args); got != tc.want {
			t.Errorf("sshNamesUser(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A VM whose host key gpuvmd made: gpuvm ssh writes the VM's own
// known_hosts file (owner-only, under gpuvm's configuration directory)
// with that key under the VM's alias, and has ssh trust it and nothing
// else, asking nothing. ssh's own host key options, after --, take over.
func TestSSHPinsHostKey(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFkzzSkOyQ0O2pY6v1O7m6Y6J5h0kz9QSlKXo5bBvtNY"
	spec := `{"hours":1,"ssh_host_keys":["` + key + ` gpuvm-` + e.vm.ID + `"]}`
	if _, err := e.st.UpdateVMState(ctx, e.vm.ID, e.vm.Version, store.VMUpdate{State: store.VMRunning, Spec: &spec}); err != nil {
		t.Fatal(err)
	}
	var gotArgs []string
	seams := &consoleSeams{
		lookPath:   func(f string) (string, error) { return "/usr/bin/" + f, nil },
		executable: func() (string, error) { return "/usr/bin/gpuvm", nil },
		run: func(_ context.Context, _ string, args, _ []string, _ io.Reader, _, _ io.Writer) (int, error) {
			gotArgs = args
			return 0, nil
		},
	}
	cfg := filepath.Join(t.TempDir(), "my config")
	vars := map[string]string{"XDG_CONFIG_HOME": cfg}
	stderr, code := runGPUVMEnv(ctx, t, vars, seams, nil, io.Discard, "ssh", "box", "--url", e.url, "--token", e.token, "--", "true")
	file := filepath.Join(cfg, "gpuvm", "known_hosts", e.vm.ID)
	want := []string{"-o", "ProxyCommand='/usr/bin/gpuvm' tunnel --stdio " + e.vm.ID + " 22", "-o", "HostKeyAlias=gpuvm-" + e.vm.ID,
		"-o", `UserKnownHostsFile="` + file + `"`, "-o", "StrictHostKeyChecking=yes", "-l", "ann", "box", "true"}
	if code != 0 || stderr != "" || strings.Join(gotArgs, "|") != strings.Join(want, "|") {
		t.Fatalf("exit %d, stderr %q, ssh %q\nwant %q", code, stderr, gotArgs, want)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "gpuvm-" + e.vm.ID + " " + key + "\n"; string(b) != want {
		t.Errorf("known_hosts %q, want %q", b, want)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts: %v %v, want mode 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(file)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("known_hosts directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	// OpenSSH's own reading of the file finds the key under the alias.
	if kg, err := exec.LookPath("ssh-keygen"); err == nil {
		out, err := exec.Command(kg, "-F", "gpuvm-"+e.vm.ID, "-f", file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), key) {
			t.Errorf("ssh-keygen -F gpuvm-%s -f %s: %v\n%s", e.vm.ID, file, err, out)
		}
	}
	// ssh's own choice of host key checking is left alone.
	gotArgs = nil
	runGPUVMEnv(ctx, t, vars, seams, nil, io.Discard, "ssh", "box", "--url", e.url, "--token", e.token, "--", "-o", "StrictHostKeyChecking=accept-new", "true")
	if strings.Contains(strings.Join(gotArgs, " "), "UserKnownHostsFile") {
		t.Errorf("ssh %q: gpuvm's known_hosts file overrides the user's own choice", gotArgs)
	}
	// A key gpuvmd sends that is not a key line is refused, and no file
	// is written.
	vm, err := e.st.GetVM(ctx, e.vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	spec = `{"hours":1,"ssh_host_keys":["ssh-ed25519 not%base64"]}`
	if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Spec: &spec}); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "cfg")
	stderr, code = runGPUVMEnv(ctx, t, map[string]string{"XDG_CONFIG_HOME": other}, seams, nil, io.Discard, "ssh", "box", "--url", e.url, "--token", e.token)
	if code == 0 || !strings.Contains(stderr, "ssh_host_keys[0]") {
		t.Errorf("a bad key: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(other, "gpuvm", "known_hosts")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a bad key: the known_hosts directory exists: %v", err)
	}
}

func TestSSHPathValue(t *testing.T) {
	for in, want := range map[string]string{
		"/home/ann/.config/gpuvm/known_hosts/v1": "/home/ann/.config/gpuvm/known_hosts/v1",
		"/home/a b/x":                            `"/home/a b/x"`,
		"/home/100%/x":                           "/home/100%%/x",
		`C:\Users\A B\x`:                         `"C:\\Users\\A B\\x"`,
		`/q"uote`:                                `"/q\"uote"`,
	} {
		if got := sshPathValue(in); got != want {
			t.Errorf("sshPathValue(%q) = %q, want %q", in, got, want)
		}
	}
}
