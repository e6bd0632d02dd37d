package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// liveServer serves s as gpuvmd does (HTTPServer on LimitListener) on a
// real listener; it is shut down at the end of the test.
func liveServer(t *testing.T, s *Server) (addr string, ln *ipLimitListener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = s.LimitListener(raw).(*ipLimitListener)
	srv := s.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shut down: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return raw.Addr().String(), ln
}

// dialRaw opens a TCP connection that the test writes by hand; every read
// gives up after 10s, far past the limits the tests set, so that a server
// that never cuts the client off fails the test instead of hanging it.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// readAll reads what the server sends until it closes the connection, and
// fails the test if it does not close it (the client's own 10s deadline).
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server held the connection past 10s; it sent %q", b)
	}
	return string(b) // EOF, or a reset: closed
}

// A client that sends its headers and then its body slowly, or never, or
// stops inside its headers, is cut off within the limits: a stalled body
// gets a 408 problem and the connection is closed; stalled headers close
// the connection; nothing is written to the database; no goroutine is left.
func TestSlowClientsAreCutOff(t *testing.T) {
	s, st, _ := vmServer(t)
	s.HTTP = HTTPLimits{ReadHeaderTimeout: 200 * time.Millisecond, BodyTimeout: 200 * time.Millisecond,
		WriteTimeout: 5 * time.Second, IdleTimeout: 200 * time.Millisecond, MaxConnsPerIP: 16}.withDefaults()
	leaks := goleak.IgnoreCurrent()
	addr, _ := liveServer(t, s)
	post := "POST /v1/users HTTP/1.1\r\nHost: gpuvm\r\nAuthorization: Bearer admin-token\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
	for _, tc := range []struct {
		name, send string
		want       string // the start of the answer; "" none, the connection closed
	}{
		{"body never sent", post, "HTTP/1.1 408"},
		{"body cut short", post + `{"name":"slow`, "HTTP/1.1 408"},
		{"headers cut short", "POST /v1/users HTTP/1.1\r\nHost: gpuvm\r\nAuthor", ""},
		{"request line cut short", "GET /heal", ""},
		{"nothing sent", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, c)
			if tc.want == "" {
				if got != "" && !strings.HasPrefix(got, "HTTP/1.1 408") && !strings.HasPrefix(got, "HTTP/1.1 400") {
					t.Errorf("answer %q, want the connection closed", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.want) || !strings.Contains(got, "application/problem+json") || !strings.Contains(got, ProblemBase+"timeout") {
				t.Errorf("answer %q, want %s with a timeout problem", got, tc.want)
			}
		})
	}
	us, err := st.ListUsers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 3 {
		t.Errorf("%d users after refused requests, want the 3 there were", len(us))
	}
	// A whole request on a kept-alive connection is answered, and the
	// idle connection is closed after IdleTimeout.
	c := dialRaw(t, addr)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: gpuvm\r\n\r\n")
	if got := readAll(t, c); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("healthz on a kept-alive connection: %q", got)
	}
	// What is left is the server's accept loop: every connection's
	// goroutine has ended.
	goleak.VerifyNone(t, leaks, goleak.IgnoreAnyFunction("net/http.(*Server).Serve"))
}

// A source IP holds at most MaxConnsPerIP connections: one more is closed
// at once, unanswered; once one is closed, a new one is served again.
func TestConnectionsPerIP(t *testing.T) {
	s, _, _ := vmServer(t)
	s.HTTP = HTTPLimits{MaxConnsPerIP: 2, IdleTimeout: time.Minute}.withDefaults()
	addr, ln := liveServer(t, s)
	healthz := func(c net.Conn) (string, error) {
		if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: gpuvm\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Status, nil
	}
	held := []net.Conn{dialRaw(t, addr), dialRaw(t, addr)}
	for i, c := range held {
		if st, err := healthz(c); err != nil || st != "200 OK" {
			t.Fatalf("connection %d: %q %v", i, st, err)
		}
	}
	if n := ln.held("127.0.0.1"); n != 2 {
		t.Errorf("the listener counts %d connections, want 2", n)
	}
	extra := dialRaw(t, addr)
	if st, err := healthz(extra); err == nil {
		t.Errorf("a third connection was served: %q", st)
	}
	// The refused one is not counted.
	if n := ln.held("127.0.0.1"); n != 2 {
		t.Errorf("after a refusal the listener counts %d connections, want 2", n)
	}
	held[0].Close()
	// The server sees the close when its read returns: until then a new
	// connection may still be refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := healthz(dialRaw(t, addr))
		if err == nil && st == "200 OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the two was closed: %q %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The streams clear their deadlines: an event stream and a tunnel
// websocket stay open and carry data well past the write timeout that cuts
// ordinary answers off.
func TestStreamsOutliveTheWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	t.Run("events", func(t *testing.T) {
		s, _, _ := vmServer(t)
		s.eventKeepAlive = 50 * time.Millisecond
		s.HTTP = HTTPLimits{WriteTimeout: writeTimeout, BodyTimeout: writeTimeout}.withDefaults()
		addr, _ := liveServer(t, s)
		c := dialRaw(t, addr)
		fmt.Fprint(c, "GET /v1/events HTTP/1.1\r\nHost: gpuvm\r\nAuthorization: Bearer ann-token\r\n\r\n")
		r := bufio.NewReader(c)
		start := time.Now()
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("stream: %q %v", line, err)
		}
		for time.Since(start) < 3*writeTimeout {
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatalf("the stream ended after %s (write timeout %s): %v", time.Since(start), writeTimeout, err)
			}
		}
	})
	t.Run("tunnel", func(t *testing.T) {
		e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
		e.srv.HTTP = HTTPLimits{WriteTimeout: writeTimeout, BodyTimeout: writeTimeout}.withDefaults()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code, tun, p := e.tunnel("ann-token", "box", `{"port":7}`)
		if code != 200 {
			t.Fatalf("%d %+v", code, p)
		}
		ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
		if ws == nil {
			t.Fatalf("websocket refused: %d %s", status, detail)
		}
		defer ws.CloseNow()
		nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
		time.Sleep(3 * writeTimeout)
		if _, err := nc.Write([]byte("still there")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("still there"))
		if _, err := io.ReadFull(nc, got); err != nil || string(got) != "still there" {
			t.Fatalf("echo after %s: %q %v", 3*writeTimeout, got, err)
		}
	})
}

// An event stream whose client stops reading is let go: once the socket's
// buffers are full, a write waits at most the write timeout, and the
// stream ends.
func TestEventStreamLetsAStalledReaderGo(t *testing.T) {
	s, st, _ := vmServer(t)
	s.HTTP = HTTPLimits{WriteTimeout: 300 * time.Millisecond}.withDefaults()
	ctx := context.Background()
	// 12 MB of events, more than loopback's buffers hold.
	big, _ := json.Marshal(strings.Repeat("x", 256<<10))
	for range 48 {
		if err := st.AppendEvent(ctx, &store.Event{Owner: "ann", Type: "vm.state", Payload: big}); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := liveServer(t, s)
	c := dialRaw(t, addr)
	// A bounded receive window (not autotuned to 32 MB), yet wider than
	// loopback's segment size so that the client's window updates are
	// sent once it reads.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10)
	}
	fmt.Fprint(c, "GET /v1/events?after=0 HTTP/1.1\r\nHost: gpuvm\r\nAuthorization: Bearer ann-token\r\n\r\n")
	time.Sleep(time.Second) // the client reads nothing meanwhile
	b, err := io.ReadAll(c)
	got := string(b)
	if !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("stream: %.100q", got)
	}
	n := strings.Count(got, "\nevent: vm.state\n")
	if isTimeout(err) {
		t.Fatalf("the stream was still open after 10s, with %d events and %d bytes sent, ending %q", n, len(got), got[max(0, len(got)-100):])
	}
	if n == 48 {
		t.Errorf("the client got all %d events: the stream did not stall", n)
	}
}
