package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/gpuvm/gpuvm/pkg/server"
)

// udpEchoServer answers every datagram with itself, on loopback (the
// guest's UDP service); it returns its address.
func udpEchoServer(t *testing.T) string {
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
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				_, _ = c.WriteToUDP(buf[:n], from)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c.LocalAddr().String()
}

// closedUDPPort is a loopback UDP address nobody listens on.
func closedUDPPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// startUDPTunnel runs 'gpuvm ARGS' until stop, with its standard error
// readable while it runs, and returns the address it listens on.
func startUDPTunnel(t *testing.T, e *consoleEnv, args ...string) (string, *logtest.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	seams := &consoleSeams{listening: func(a string) { addr <- a }}
	stderr := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() {
		ctx := context.WithValue(ctx, testSeamsKey{}, &testSeams{term: &terminal{in: strings.NewReader("")}})
		ctx = context.WithValue(ctx, consoleSeamsKey{}, seams)
		env := map[string]string{"HOME": t.TempDir()}
		root := newRoot(func(k string) string { return env[k] }, io.Discard, stderr)
		root.SetArgs(append(args, "--url", e.url, "--token", e.token))
		done <- exitCode(root.ExecuteContext(ctx), stderr)
	}()
	select {
	case a := <-addr:
		return a, stderr, func() int { cancel(); return <-done }
	case code := <-done:
		cancel()
		t.Fatalf("gpuvm %s: exit %d before listening: %s", strings.Join(args, " "), code, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("gpuvm %s never listened", strings.Join(args, " "))
	}
	return "", nil, nil
}

// udpEcho sends msg from c and waits for it to come back.
func udpEcho(t *testing.T, c *net.UDPConn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != msg {
		t.Fatalf("echo %d bytes, %v; want %d bytes %.40q", n, err, len(msg), msg)
	}
}

func dialUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	ra, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTunnelUDPCommand: 'gpuvm tunnel VM 7/udp' listens on a local UDP
// port and carries datagrams through gpuvmd to the guest's UDP echo
// service and back to the local peer that sent last.
func TestTunnelUDPCommand(t *testing.T) {
	e := newConsoleEnv(t)
	addr, stderr, stop := startUDPTunnel(t, e, "tunnel", "box", "7/udp")
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("listens on %s", addr)
	}
	a := dialUDP(t, addr)
	for i := range 50 {
		udpEcho(t, a, fmt.Sprintf("datagram %d %s", i, strings.Repeat("x", i*31)))
	}
	udpEcho(t, a, strings.Repeat("y", server.DefaultUDPMaxDatagram))
	// Another local peer: the replies now go to it.
	b := dialUDP(t, addr)
	udpEcho(t, b, "from b")
	udpEcho(t, a, "a again")
	if code := stop(); code != 0 {
		t.Errorf("exit %d after Ctrl-C: %s", code, stderr)
	}
	if s := stderr.String(); s != "" {
		t.Errorf("stderr: %s", s)
	}
}

// TestTunnelUDPCommandReopens: a tunnel that gpuvmd closes (here: idle; or
// the guest's port unreachable) is reported, and the next datagram opens a
// new one.
func TestTunnelUDPCommandReopens(t *testing.T) {
	e := newConsoleEnvWith(t, func(d *server.Deps) {
		d.HTTP.UDPIdleTimeout = 200 * time.Millisecond
		d.Console.CheckInterval = 20 * time.Millisecond
	})
	addr, stderr, stop := startUDPTunnel(t, e, "tunnel", "box", "7/udp")
	a := dialUDP(t, addr)
	udpEcho(t, a, "before")
	waitFor(t, func() bool { return strings.Contains(stderr.String(), "idle for 200ms") })
	udpEcho(t, a, "after") // through a new tunnel
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	if s := stderr.String(); !strings.Contains(s, "gpuvm: gpuvmd closed the tunnel: idle for 200ms: closed; the next datagram opens a new tunnel") {
		t.Errorf("stderr: %s", s)
	}

	// Nothing listens on the guest's port 9: the first datagram's ICMP
	// port unreachable closes the tunnel, saying so.
	addr, stderr, stop = startUDPTunnel(t, e, "tunnel", "box", "9/udp")
	c := dialUDP(t, addr)
	if _, err := c.Write([]byte("anyone?")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(stderr.String(), "ICMP") })
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	if s := stderr.String(); !strings.Contains(s, "gpuvmd closed the tunnel: port 9/udp of VM box (192.0.2.20): nothing listens there (ICMP port unreachable)") {
		t.Errorf("stderr: %s", s)
	}
}

func TestTunnelUDPCommandRefusals(t *testing.T) {
	e := newConsoleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tunnel", "box", "0/udp"}, 2, `PORT "0/udp" is not a UDP port (1–65535)`},
		{[]string{"tunnel", "box", "70000/udp"}, 2, `PORT "70000/udp" is not a UDP port`},
		{[]string{"tunnel", "box", "/udp"}, 2, `PORT "/udp" is not a UDP port`},
		{[]string{"tunnel", "box", "22/sctp"}, 2, `PORT "22/sctp": the protocol is tcp or udp (PORT, PORT/tcp, PORT/udp), not "sctp"`},
		{[]string{"tunnel", "box", "22/UDP"}, 2, `not "UDP"`},
		{[]string{"tunnel", "--stdio", "box", "7/udp"}, 2, "--stdio carries one TCP connection"},
		{[]string{"tunnel", "box", "7/udp", "--local-port", "70000"}, 2, "--local-port 70000"},
		{[]string{"tunnel", "nope", "7/udp"}, 1, `no VM "nope"`},
	} {
		stderr, code := runGPUVM(ctx, t, &consoleSeams{}, nil, io.Discard, append(tc.args, "--url", e.url, "--token", e.token)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("gpuvm %v: exit %d %q", tc.args, code, stderr)
		}
	}
}
