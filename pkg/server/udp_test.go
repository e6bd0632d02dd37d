package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/monitor"
)

// udpEchoServer answers every datagram with itself, on loopback: the
// guest's UDP service.
func udpEchoServer(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// closedUDPPort is a loopback UDP address nobody listens on: datagrams to
// it are answered with ICMP port unreachable.
func closedUDPPort(t testing.TB) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr
}

// closedTCPPort is a local TCP address nothing listens on (a connection
// is refused).
func closedTCPPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// logEntries are gpuvmd's log lines with the message msg.
func (e *consoleEnv) logEntries(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(e.log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// closedLog is the "proxy closed" entry of the tunnel to what, once it is
// written.
func (e *consoleEnv) closedLog(what string) map[string]any {
	e.t.Helper()
	var got map[string]any
	waitFor(e.t, "the close of "+what+" in the log", func() bool {
		for _, m := range e.logEntries("proxy closed") {
			if m["to"] == what {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

// count reads a UDP counter from a log entry: direction.name.
func udpCount(m map[string]any, direction, name string) int {
	g, _ := m[direction].(map[string]any)
	f, _ := g[name].(float64)
	return int(f)
}

// udpTunnel opens a UDP tunnel of token to port 7 of vm.
func (e *consoleEnv) udpTunnel(ctx context.Context, token, vm string) *websocket.Conn {
	e.t.Helper()
	code, tun, p := e.tunnel(token, vm, `{"port":7,"protocol":"udp"}`)
	if code != 200 {
		e.t.Fatalf("%d %+v", code, p)
	}
	ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
	if ws == nil {
		e.t.Fatalf("websocket refused: %d %s", status, detail)
	}
	return ws
}

// pingPong sends n datagrams one at a time and checks each echo.
func pingPong(ctx context.Context, t *testing.T, ws *websocket.Conn, n int, tag string) {
	t.Helper()
	for i := range n {
		msg := fmt.Appendf(nil, "%s %d %s", tag, i, strings.Repeat("x", i*7%1400))
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatalf("%s: send %d: %v", tag, i, err)
		}
		typ, got, err := ws.Read(ctx)
		if err != nil || typ != websocket.MessageBinary || !bytes.Equal(got, msg) {
			t.Fatalf("%s: echo %d: %v %v %q", tag, i, typ, err, clip(string(got), 40))
		}
	}
}

// TestTunnelUDPEcho: a UDP ticket opens a websocket whose binary messages
// are datagrams to and from the guest's port (a UDP echo server stands
// in), whole, of any size up to the cap; a larger one is dropped and
// counted, a message larger than any datagram closes the tunnel.
func TestTunnelUDPEcho(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.http.Client().CloseIdleConnections()
	leaks := goleak.IgnoreCurrent()

	code, tun, p := e.tunnel("ann-token", "box", `{"port":7,"protocol":"udp"}`)
	if code != 200 || tun.Port != 7 || tun.Protocol != "udp" || tun.VMID != e.box.ID || !strings.Contains(tun.WebSocketURL, "/v1/tunnel/udp/ws?") {
		t.Fatalf("%d %+v %+v", code, tun, p)
	}
	ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", status, detail)
	}
	pingPong(ctx, t, ws, 100, "ping")
	// The empty datagram and the largest one pass, whole.
	for _, size := range []int{0, 1, DefaultUDPMaxDatagram} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		if _, got, err := ws.Read(ctx); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("datagram of %d bytes: %d bytes back, %v", size, len(got), err)
		}
	}
	// One byte more is dropped: the next echo is the marker's.
	if err := ws.Write(ctx, websocket.MessageBinary, make([]byte, DefaultUDPMaxDatagram+1)); err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ws.Read(ctx); err != nil || string(got) != "marker" {
		t.Fatalf("after an oversize datagram: %q, %v", clip(string(got), 40), err)
	}
	// A text message is no datagram.
	if err := ws.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if code, reason := readClose(ctx, ws); code != websocket.StatusUnsupportedData || !strings.Contains(reason, "binary") {
		t.Errorf("text message: closed with %d %q", code, reason)
	}
	closed := e.closedLog("port 7/udp of VM box (192.0.2.10)")
	if udpCount(closed, "client_to_guest", "dropped_oversize") != 1 || udpCount(closed, "client_to_guest", "forwarded") != 104 ||
		udpCount(closed, "guest_to_client", "forwarded") != 104 || udpCount(closed, "client_to_guest", "dropped_rate") != 0 {
		t.Errorf("close log: %v", closed)
	}
	if len(e.logEntries("udp tunnel: datagrams dropped (counts since the tunnel opened; logged at most every 10s)")) != 1 {
		t.Errorf("drop warnings: %s", e.log.String())
	}
	if ws2, status, detail := e.dialWS(ctx, tun.WebSocketURL); ws2 != nil || status != 403 || !strings.Contains(detail, "already used") {
		t.Errorf("second use: %d %q", status, detail)
	}

	// A message larger than any datagram closes the tunnel.
	ws = e.udpTunnel(ctx, "ann-token", "box")
	if err := ws.Write(ctx, websocket.MessageBinary, make([]byte, udpReadLimit+1)); err != nil {
		t.Fatal(err)
	}
	if code, _ := readClose(ctx, ws); code != websocket.StatusMessageTooBig {
		t.Errorf("a message past 64 KiB: closed with %d", code)
	}
	e.http.Client().CloseIdleConnections()
	goleak.VerifyNone(t, leaks)
}

// TestTunnelUDPWrongTicket: a TCP ticket does not open the UDP websocket, a
// UDP ticket not the TCP one, a console ticket neither; each is spent.
func TestTunnelUDPWrongTicket(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wsBase := "ws" + strings.TrimPrefix(e.http.URL, "http")
	_, tcp, _ := e.tunnel("ann-token", "box", `{"port":7}`)
	_, tcpExplicit, _ := e.tunnel("ann-token", "box", `{"port":7,"protocol":"tcp"}`)
	_, udp, _ := e.tunnel("ann-token", "box", `{"port":7,"protocol":"udp"}`)
	if tcp.Protocol != "tcp" || tcpExplicit.Protocol != "tcp" || !strings.Contains(tcp.WebSocketURL, "/v1/tunnel/ws?") {
		t.Fatalf("%+v %+v", tcp, tcpExplicit)
	}
	con := e.console("ann-token", e.box)
	for _, tc := range []struct{ name, url, want string }{
		{"tcp ticket, udp websocket", wsBase + tunnelUDPWSPath + "?ticket=" + tcp.Ticket, "this is a TCP tunnel ticket; it opens /v1/tunnel/ws, not /v1/tunnel/udp/ws"},
		{"udp ticket, tcp websocket", wsBase + tunnelWSPath + "?ticket=" + udp.Ticket, "this is a UDP tunnel ticket; it opens /v1/tunnel/udp/ws, not /v1/tunnel/ws"},
		{"console ticket, udp websocket", wsBase + tunnelUDPWSPath + "?ticket=" + con.Ticket, "console ticket"},
		{"the spent tcp ticket, tcp websocket", wsBase + tunnelWSPath + "?ticket=" + tcp.Ticket, "already used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ws, status, detail := e.dialWS(ctx, tc.url); ws != nil || status != 403 || !strings.Contains(detail, tc.want) {
				t.Errorf("%d %q", status, detail)
			}
		})
	}
	// The right one works.
	ws, status, detail := e.dialWS(ctx, tcpExplicit.WebSocketURL)
	if ws == nil {
		t.Fatalf("%d %s", status, detail)
	}
	ws.CloseNow()
}

// TestTunnelUDPRequests: the protocol field, and ports, as the API checks
// them.
func TestTunnelUDPRequests(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	for _, tc := range []struct {
		name, body  string
		status      int
		field, text string
	}{
		{"sctp", `{"port":22,"protocol":"sctp"}`, 400, "protocol", `protocol "sctp" is neither "tcp" (the default) nor "udp"`},
		{"upper case", `{"port":22,"protocol":"UDP"}`, 400, "protocol", "neither"},
		{"protocol as a number", `{"port":22,"protocol":17}`, 400, "protocol", "JSON string"},
		{"protocol null is the default", `{"port":70000,"protocol":null}`, 422, "port", "not a TCP port"},
		{"udp port 0", `{"port":0,"protocol":"udp"}`, 422, "port", "port 0 is not a UDP port (1–65535)"},
		{"udp port too large", `{"port":70000,"protocol":"udp"}`, 422, "port", "not a UDP port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, p := e.tunnel("ann-token", "box", tc.body)
			if code != tc.status || p.Field != tc.field || !strings.Contains(p.Detail, tc.text) {
				t.Errorf("%d %+v", code, p)
			}
		})
	}
	// Another's VM stays hidden, UDP or not.
	if code, _, p := e.tunnel("ann-token", "other", `{"port":7,"protocol":"udp"}`); code != 404 {
		t.Errorf("bob's VM: %d %+v", code, p)
	}
}

// TestTunnelUDPRefused: a port the guest does not listen on answers ICMP
// port unreachable; the tunnel closes saying so.
func TestTunnelUDPRefused(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, tun, _ := e.tunnel("ann-token", "box", `{"port":9,"protocol":"udp"}`)
	ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", status, detail) // UDP has no connection to refuse
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("anyone?")); err != nil {
		t.Fatal(err)
	}
	if code, reason := readClose(ctx, ws); code != websocket.StatusBadGateway || reason != "port 9/udp of VM box (192.0.2.10): nothing listens there (ICMP port unreachable)" {
		t.Errorf("closed with %d %q", code, reason)
	}
	if m := e.closedLog("port 9/udp of VM box (192.0.2.10)"); !strings.Contains(fmt.Sprint(m["reason"]), "ICMP") {
		t.Errorf("close log: %v", m)
	}
}

// TestTunnelUDPIdle: a UDP tunnel that forwards nothing for its idle
// timeout closes; the VM stopping closes one too.
func TestTunnelUDPIdle(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	e.srv.HTTP = HTTPLimits{UDPIdleTimeout: time.Second}.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws := e.udpTunnel(ctx, "ann-token", "box")
	pingPong(ctx, t, ws, 1, "once")
	if code, reason := readClose(ctx, ws); code != websocket.StatusPolicyViolation || reason != "idle for 1s: closed" {
		t.Errorf("closed with %d %q", code, reason)
	}
	ws = e.udpTunnel(ctx, "ann-token", "box")
	e.setState(e.box, "stopping")
	if code, reason := readClose(ctx, ws); code != websocket.StatusGoingAway || reason != "VM box is stopping" {
		t.Errorf("closed with %d %q", code, reason)
	}
}

// TestTunnelUDPFlood: one tunnel floods far past its rate cap; its excess
// is dropped, counted and logged a bounded number of times, while a tunnel
// of another user's VM and another tunnel of the same user carry every
// datagram, in order.
func TestTunnelUDPFlood(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	e.srv.HTTP = HTTPLimits{UDPDatagramsPerSecond: 400}.withDefaults() // a burst of 100
	box2 := e.runningVM("ann", "box2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	flood := e.udpTunnel(ctx, "ann-token", "box")
	other := e.udpTunnel(ctx, "bob-token", "other")
	same := e.udpTunnel(ctx, "ann-token", box2.ID)

	const sent = 8000
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the flood's echoes, read and forgotten
		defer wg.Done()
		for {
			if _, _, err := flood.Read(ctx); err != nil {
				return
			}
		}
	}()
	floodDone := make(chan error, 1)
	go func() {
		defer wg.Done()
		msg := make([]byte, 1000)
		for range sent {
			if err := flood.Write(ctx, websocket.MessageBinary, msg); err != nil {
				floodDone <- err
				return
			}
		}
		floodDone <- nil
	}()
	// While it floods, and after: the other tunnels lose nothing.
	pingPong(ctx, t, other, 40, "bob")
	pingPong(ctx, t, same, 40, "ann")
	if err := <-floodDone; err != nil {
		t.Fatal(err)
	}
	pingPong(ctx, t, other, 40, "bob after")
	pingPong(ctx, t, same, 40, "ann after")
	flood.Close(websocket.StatusNormalClosure, "")
	other.Close(websocket.StatusNormalClosure, "")
	same.Close(websocket.StatusNormalClosure, "")
	wg.Wait()

	m := e.closedLog("port 7/udp of VM box (192.0.2.10)")
	fwd, limited := udpCount(m, "client_to_guest", "forwarded"), udpCount(m, "client_to_guest", "dropped_rate")
	if fwd+limited != sent || limited < sent/4 || fwd < 100 {
		t.Errorf("flood: %d forwarded, %d dropped of %d: %v", fwd, limited, sent, m)
	}
	for _, what := range []string{"port 7/udp of VM other (192.0.2.10)", "port 7/udp of VM box2 (192.0.2.10)"} {
		m := e.closedLog(what)
		if udpCount(m, "client_to_guest", "forwarded") != 80 || udpCount(m, "guest_to_client", "forwarded") != 80 ||
			udpCount(m, "client_to_guest", "dropped_rate")+udpCount(m, "guest_to_client", "dropped_rate") != 0 {
			t.Errorf("%s: %v", what, m)
		}
	}
	// Logged once, then at most every udpWarnEvery: not per datagram.
	warns := e.logEntries("udp tunnel: datagrams dropped (counts since the tunnel opened; logged at most every 10s)")
	if bound := 1 + int(time.Since(start)/udpWarnEvery); len(warns) < 1 || len(warns) > bound {
		t.Errorf("%d drop warnings for %d drops in %s", len(warns), limited, time.Since(start))
	}
	if len(warns) > 0 && warns[0]["vm"] != e.box.ID {
		t.Errorf("the warning names VM %v", warns[0]["vm"])
	}
}

// TestUDPRate: the token buckets of a direction hold a quarter second of
// both rates, and refill with time.
func TestUDPRate(t *testing.T) {
	now := time.Now()
	r := newUDPRate(HTTPLimits{UDPMaxDatagram: 1000, UDPDatagramsPerSecond: 40, UDPBytesPerSecond: 8000}, now)
	// 10 datagrams, 2000 bytes held: the bytes run out first.
	for i := range 2 {
		if !r.allow(1000, now) {
			t.Fatalf("datagram %d refused", i)
		}
	}
	if r.allow(1, now) {
		t.Error("a datagram past the byte bucket passed")
	}
	if !r.allow(0, now) {
		t.Error("an empty datagram takes no bytes")
	}
	later := now.Add(125 * time.Millisecond) // 1000 bytes, 5 datagrams more
	if !r.allow(1000, later) || r.allow(1, later) {
		t.Error("the byte bucket did not refill by its rate")
	}
	r = newUDPRate(HTTPLimits{UDPMaxDatagram: 1000, UDPDatagramsPerSecond: 8, UDPBytesPerSecond: 1 << 20}, now)
	for i := range 2 {
		if !r.allow(10, now) {
			t.Fatalf("datagram %d refused", i)
		}
	}
	if r.allow(10, now) {
		t.Error("a datagram past the datagram bucket passed")
	}
	if !r.allow(10, now.Add(time.Hour)) || !r.allow(10, now.Add(time.Hour)) || r.allow(10, now.Add(time.Hour)) {
		t.Error("a bucket holds no more than its burst, however long it waits")
	}
}

// TestTunnelUDPClientReadsNothing: a client that sends and never reads
// holds no more than the socket buffers: the guest's datagrams wait in the
// UDP socket (then drop) while the websocket write waits, and the tunnel
// closes after WriteTimeout.
func TestTunnelUDPClientReadsNothing(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := e.udpTunnel(ctx, "ann-token", "box")
	defer ws.CloseNow()
	msg := make([]byte, DefaultUDPMaxDatagram)
	for ctx.Err() == nil {
		// No deadline of its own: a write that waits for gpuvmd to read
		// is not the client going away.
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			break // gpuvmd has closed the connection
		}
		if len(e.logEntries("proxy closed")) > 0 {
			break
		}
	}
	m := e.closedLog("port 7/udp of VM box (192.0.2.10)")
	if m["reason"] != "the client took no data for 300ms" {
		t.Errorf("close log: %v", m)
	}
}

// backedUpGuest is a guest that takes no more datagrams: the tunnel's
// socket (tunnel) sends until its send buffer is full, then its writes
// wait. A UDP socket's do when what it sent still waits below it, charged
// to its send buffer: in the queue of a guest address being resolved
// (ARP), in a shaping queue on the guest's tap. On loopback that never
// happens (the kernel hands a datagram over, or drops it, at once), so a
// unixgram socket pair stands in, its peer never read: its datagrams stay
// charged to the tunnel's socket the same way, and its writes wait the
// same way. received reads what reached the guest, once the tunnel is
// closed: each datagram's sequence number.
func backedUpGuest(t *testing.T) (tunnel net.Conn, received func() []uint32) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int, name string) net.Conn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tunnel, guest := conn(fds[0], "tunnel"), conn(fds[1], "guest")
	t.Cleanup(func() { tunnel.Close(); guest.Close() })
	return tunnel, func() []uint32 {
		var out []uint32
		buf := make([]byte, 64<<10)
		for {
			_ = guest.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := guest.Read(buf)
			if err != nil {
				return out
			}
			if n >= 4 {
				out = append(out, binary.BigEndian.Uint32(buf))
			}
		}
	}
}

// unreadPipe is a guest that is no socket (a ConsoleOptions.Dial of a
// test could return one): a pipe never read, whose writes wait forever.
func unreadPipe(t *testing.T) (net.Conn, func() []uint32) {
	tunnel, guest := net.Pipe()
	t.Cleanup(func() { tunnel.Close(); guest.Close() })
	return tunnel, func() []uint32 { return nil }
}

// TestTunnelUDPGuestBackedUp: a guest that does not take the client's
// datagrams does not hold the tunnel. A client floods it (41,000 small
// datagrams, as a report had it), then closes: the tunnel ends at once,
// not after udp_idle_timeout, because gpuvmd never waits on the guest to
// read the client's next message; what the guest could not take is
// dropped, counted in the log and in /metrics, and warned of once.
func TestTunnelUDPGuestBackedUp(t *testing.T) {
	const bound = 10 * time.Second // from the client's close to the tunnel's end; the idle timeout is 2 minutes
	for _, tc := range []struct {
		name  string
		guest func(*testing.T) (net.Conn, func() []uint32)
		flood int
	}{
		{"socket backed up", backedUpGuest, 41000},
		{"no socket, never read", unreadPipe, 500}, // each waits udpWriteWait
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
			// The rate caps lifted: every drop is the guest's.
			e.srv.HTTP = HTTPLimits{UDPDatagramsPerSecond: 10_000_000, UDPBytesPerSecond: 10 << 30}.withDefaults()
			if e.srv.HTTP.UDPIdleTimeout < 10*bound {
				t.Fatalf("the idle timeout (%s) would close the tunnel soon anyway", e.srv.HTTP.UDPIdleTimeout)
			}
			e.srv.Metrics = monitor.NewExporter("h1", nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			target, received := tc.guest(t)
			dial := e.srv.Console.Dial
			e.srv.Console.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if network == "udp" {
					return target, nil
				}
				return dial(ctx, network, addr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			ws := e.udpTunnel(ctx, "ann-token", "box")
			defer ws.CloseNow()
			// A client whose messages gpuvmd stops reading cannot send
			// the next one: each write has the bound. The flood itself
			// stops after the bound too (a busy machine under -race sends
			// fewer): what counts is that no write waits.
			msg := make([]byte, 32)
			sent := 0
			for flooding := time.Now(); sent < tc.flood && time.Since(flooding) < bound; sent++ {
				binary.BigEndian.PutUint32(msg, uint32(sent))
				wctx, wcancel := context.WithTimeout(ctx, bound)
				err := ws.Write(wctx, websocket.MessageBinary, msg)
				wcancel()
				if err != nil {
					t.Errorf("datagram %d of %d not sent in %s: gpuvmd stopped reading the client: %v", sent, tc.flood, bound, err)
					break
				}
			}
			closing := time.Now()
			_ = ws.Close(websocket.StatusNormalClosure, "")
			var m map[string]any
			for deadline := closing.Add(bound); m == nil; time.Sleep(10 * time.Millisecond) {
				for _, x := range e.logEntries("proxy closed") {
					m = x
				}
				if m == nil && time.Now().After(deadline) {
					t.Fatalf("the tunnel is still open %s after the client's close (it closes when idle for %s)", bound, e.srv.HTTP.UDPIdleTimeout)
				}
			}
			ended := time.Since(closing)
			if m["reason"] != "the client closed the connection" {
				t.Errorf("closed: %v", m["reason"])
			}
			got := received()
			t.Logf("%d datagrams sent in %s, %d reached the guest; the tunnel ended %s after the close",
				sent, closing.Sub(start).Round(time.Millisecond), len(got), ended.Round(time.Millisecond))
			for i, seq := range got {
				if seq != uint32(i) {
					t.Fatalf("the guest's datagram %d is the client's %d", i, seq)
				}
			}
			fwd, backlog := udpCount(m, "client_to_guest", "forwarded"), udpCount(m, "client_to_guest", "dropped_backlog")
			rate, oversize := udpCount(m, "client_to_guest", "dropped_rate"), udpCount(m, "client_to_guest", "dropped_oversize")
			if backlog == 0 || backlog != sent-len(got) || fwd != len(got) || rate+oversize != 0 {
				t.Errorf("%d sent, %d reached the guest; close log: %v", sent, len(got), m)
			}
			_, fams := getMetrics(t, e.srv, "")
			exported := -1.0
			for _, x := range fams["gpuvm_tunnel_udp_dropped_datagrams_total"].GetMetric() {
				l := map[string]string{}
				for _, p := range x.Label {
					l[p.GetName()] = p.GetValue()
				}
				if l["direction"] == "client_to_guest" && l["reason"] == "backlog" {
					exported = x.Counter.GetValue()
				}
			}
			if exported != float64(sent-len(got)) {
				t.Errorf("gpuvm_tunnel_udp_dropped_datagrams_total{client_to_guest,backlog} = %g, want %d", exported, sent-len(got))
			}
			warns := e.logEntries("udp tunnel: datagrams dropped (counts since the tunnel opened; logged at most every 10s)")
			if limit := 1 + int(time.Since(start)/udpWarnEvery); len(warns) < 1 || len(warns) > limit {
				t.Errorf("%d drop warnings for %d drops in %s", len(warns), backlog, time.Since(start))
			}
		})
	}
}
