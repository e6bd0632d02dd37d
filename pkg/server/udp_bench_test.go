package server

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The UDP tunnel against the same UDP echo service reached directly, on
// loopback, with 1200-byte datagrams (a streaming desktop's size):
//
//	go test ./pkg/server -run '^$' -bench TunnelUDP -benchtime 20000x
//
// rtt: one datagram at a time; p50_us and p99_us are the round trip.
// flood: datagrams sent as fast as the sender can, echoes read at once;
// datagrams/s is the echoes received a second, loss_% and reordered_%
// (an echo whose sequence number is below one seen before) of those sent.
// paced: 20000 datagrams a second (a ~190 Mbit/s stream), loss and
// reordering. udp_leg_loss_% is the part of the tunnel's loss between
// gpuvmd's relay and the echo service (UDP both ways, from the relay's
// counters); the websocket legs are TCP and lose nothing. The tunnel's rate caps are lifted (they would be what is
// measured); the client, gpuvmd and the echo service share this machine's
// CPUs.

const benchDatagram = 1200

// benchPath is one way to the echo service: send a datagram, receive one.
type benchPath struct {
	send    func([]byte) error
	receive func([]byte) (int, error) // into the buffer; error at the end
	close   func()
	// relayed, after close, is what the tunnel's relay forwarded each
	// way (nil: no relay).
	relayed func() (up, down int)
}

func benchDirect(b *testing.B, echo *net.UDPConn) benchPath {
	c, err := net.DialUDP("udp", nil, echo.LocalAddr().(*net.UDPAddr))
	if err != nil {
		b.Fatal(err)
	}
	_ = c.SetReadBuffer(4 << 20)
	return benchPath{
		send:    func(p []byte) error { _, err := c.Write(p); return err },
		receive: func(p []byte) (int, error) { return c.Read(p) },
		close:   func() { c.Close() },
	}
}

func benchTunnel(b *testing.B, e *consoleEnv) benchPath {
	ctx, cancel := context.WithCancel(context.Background())
	before := len(e.logEntries("proxy closed"))
	ws := e.udpTunnel(ctx, "ann-token", "box")
	ws.SetReadLimit(udpReadLimit)
	return benchPath{
		send: func(p []byte) error { return ws.Write(ctx, websocket.MessageBinary, p) },
		receive: func(p []byte) (int, error) {
			_, data, err := ws.Read(ctx)
			return copy(p, data), err
		},
		close: func() { ws.Close(websocket.StatusNormalClosure, ""); cancel() },
		relayed: func() (int, int) {
			waitFor(b, "the tunnel's close", func() bool { return len(e.logEntries("proxy closed")) > before })
			all := e.logEntries("proxy closed")
			m := all[len(all)-1]
			return udpCount(m, "client_to_guest", "forwarded"), udpCount(m, "guest_to_client", "forwarded")
		},
	}
}

func BenchmarkTunnelUDP(b *testing.B) {
	e := newConsoleEnv(b, ConsoleOptions{})
	e.srv.HTTP = HTTPLimits{UDPDatagramsPerSecond: 10_000_000, UDPBytesPerSecond: 10 << 30}.withDefaults()
	_ = e.udpEcho.SetReadBuffer(4 << 20)
	_ = e.udpEcho.SetWriteBuffer(4 << 20)
	paths := []struct {
		name string
		open func() benchPath
	}{
		{"direct", func() benchPath { return benchDirect(b, e.udpEcho) }},
		{"tunnel", func() benchPath { return benchTunnel(b, e) }},
	}
	for _, p := range paths {
		b.Run("rtt/"+p.name, func(b *testing.B) { benchRTT(b, p.open()) })
	}
	for _, p := range paths {
		b.Run("flood/"+p.name, func(b *testing.B) { benchLoad(b, p.open(), 0) })
	}
	for _, p := range paths {
		b.Run("paced/"+p.name, func(b *testing.B) { benchLoad(b, p.open(), 20000) })
	}
}

func benchRTT(b *testing.B, p benchPath) {
	defer p.close()
	msg := make([]byte, benchDatagram)
	buf := make([]byte, 64<<10)
	rtts := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		binary.BigEndian.PutUint64(msg, uint64(i))
		start := time.Now()
		if err := p.send(msg); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := p.receive(buf)
			if err != nil {
				b.Fatal(err)
			}
			if n >= 8 && binary.BigEndian.Uint64(buf) == uint64(i) {
				break
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds())/1e3, "p99_us")
}

// benchLoad sends b.N datagrams, at rate a second (0: as fast as it can),
// and counts the echoes: how many, how many out of order.
func benchLoad(b *testing.B, p benchPath, rate int) {
	var received, reordered int
	var last time.Time
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		highest := -1
		for {
			n, err := p.receive(buf)
			if err != nil {
				return
			}
			if n < 8 {
				continue
			}
			seq := int(binary.BigEndian.Uint64(buf))
			mu.Lock()
			received++
			if seq < highest {
				reordered++
			} else {
				highest = seq
			}
			last = time.Now()
			mu.Unlock()
		}
	}()
	msg := make([]byte, benchDatagram)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if rate > 0 {
			if ahead := time.Duration(i)*time.Second/time.Duration(rate) - time.Since(start); ahead > time.Millisecond {
				time.Sleep(ahead)
			}
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		if err := p.send(msg); err != nil {
			b.Fatal(err)
		}
	}
	// The echoes still under way (a tunnel's wait in its websocket's
	// buffers): until none came for a second.
	for {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		quiet := received == b.N || !last.IsZero() && time.Since(last) > time.Second || last.IsZero() && time.Since(start) > 5*time.Second
		mu.Unlock()
		if quiet {
			break
		}
	}
	b.StopTimer()
	p.close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if !last.IsZero() {
		b.ReportMetric(float64(received)/last.Sub(start).Seconds(), "datagrams/s")
	}
	b.ReportMetric(100*float64(b.N-received)/float64(b.N), "loss_%")
	b.ReportMetric(100*float64(reordered)/float64(b.N), "reordered_%")
	if p.relayed != nil {
		// Where the loss is: between the relay and the echo service
		// (UDP, both ways), the rest in the relay's own drops.
		up, down := p.relayed()
		b.ReportMetric(100*float64(up-down)/float64(b.N), "udp_leg_loss_%")
	}
}
