package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// A UDP tunnel (ticket protocol udp, websocket tunnelUDPWSPath) carries
// datagrams between the websocket and a UDP socket of gpuvmd connected to
// the guest's address and port. The wire format is the websocket's own
// framing: one binary message is one datagram, whole, either way; its
// length is the message's (an empty message is an empty datagram). No
// header is needed: a tunnel carries one pair of addresses, the websocket
// keeps message boundaries and order, and what is not a datagram (why the
// tunnel ended) travels in the close frame.
//
// What a hostile client (or guest) can do is bounded per tunnel, each
// direction on its own (HTTPLimits): a datagram larger than
// UDPMaxDatagram is dropped and counted; datagrams beyond
// UDPDatagramsPerSecond or UDPBytesPerSecond are dropped and counted
// (token buckets holding a quarter second of either); a message larger
// than any UDP datagram (udpReadLimit) closes the tunnel; a tunnel that
// forwards nothing for UDPIdleTimeout is closed. Drops are logged at most
// once every udpWarnEvery per tunnel, with their counts, and counted in
// gpuvm_tunnel_udp_dropped_datagrams_total. A tunnel owns its socket,
// buckets and goroutines: a flood through one is dropped there and costs
// the others nothing but the CPU it takes to drop it.
//
// Neither direction waits on the other side for long. The client's
// messages are read by one goroutine that never waits on the guest: a
// datagram the socket cannot take at once (its send buffer full, the
// guest's path backed up) is dropped and counted (dropBacklog), so that the
// next message, a close frame among them, is always read. The guest's
// datagrams wait for the websocket at most WriteTimeout, which then closes
// the tunnel; meanwhile they wait in the socket's receive buffer, and the
// kernel drops what does not fit.

// Path of the UDP tunnel's websocket.
const tunnelUDPWSPath = "/v1/tunnel/udp/ws"

// udpReadLimit is the largest websocket message a UDP tunnel reads: a
// larger one cannot be a datagram (65535 bytes with its header), and
// closes the tunnel with StatusMessageTooBig.
const udpReadLimit = 64 << 10

// udpWarnEvery bounds how often one tunnel logs its drops.
const udpWarnEvery = 10 * time.Second

// udpSocketBuffer is the receive and send buffer asked for a tunnel's UDP
// socket (the kernel caps them at net.core.rmem_max and wmem_max): the
// receive buffer holds the guest's datagrams while the websocket write of
// one is under way, about 20 ms of a 200 Mbit/s stream; the default (about
// 200 KiB) holds a few. The send buffer holds the client's datagrams while
// the way to the guest is backed up (the guest's address being resolved,
// a shaping queue on its tap: what waits there counts against the
// socket's send buffer): what does not fit is dropped.
const udpSocketBuffer = 1 << 20

// udpWriteWait is how long a datagram waits for a target that is no socket
// (ConsoleOptions.Dial's, in tests): a socket's is never waited for.
const udpWriteWait = time.Millisecond

// udpBurst is how much of a second of its rate a bucket holds.
const udpBurst = 0.25

// Directions of a UDP tunnel, for its counters.
const (
	udpUp   = 0 // client → guest
	udpDown = 1 // guest → client
)

var udpDirection = [2]string{"client_to_guest", "guest_to_client"}

// Why a UDP tunnel drops a datagram, for its counters.
const (
	dropOversize = iota // over UDPMaxDatagram
	dropRate            // over UDPDatagramsPerSecond or UDPBytesPerSecond
	dropBacklog         // the guest's socket could not take it at once
	dropReasons
)

// udpDropReason names the reasons: in the log, "dropped_" and the name; the
// reason label of gpuvm_tunnel_udp_dropped_datagrams_total.
var udpDropReason = [dropReasons]string{"oversize", "rate", "backlog"}

// bucket is a token bucket: rate tokens a second, at most burst held.
// Each is used by one goroutine.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate, burst float64, now time.Time) bucket {
	return bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	b.last = now
}

// udpRate caps one direction of a tunnel: datagrams and bytes a second.
type udpRate struct{ datagrams, bytes bucket }

func newUDPRate(l HTTPLimits, now time.Time) *udpRate {
	dg := float64(l.UDPDatagramsPerSecond)
	by := float64(l.UDPBytesPerSecond)
	return &udpRate{
		datagrams: newBucket(dg, max(1, dg*udpBurst), now),
		bytes:     newBucket(by, max(float64(l.UDPMaxDatagram), by*udpBurst), now),
	}
}

// allow takes one datagram of n bytes from both buckets, or nothing.
func (r *udpRate) allow(n int, now time.Time) bool {
	r.datagrams.refill(now)
	r.bytes.refill(now)
	if r.datagrams.tokens < 1 || r.bytes.tokens < float64(n) {
		return false
	}
	r.datagrams.tokens--
	r.bytes.tokens -= float64(n)
	return true
}

// udpRelay is the datagram side of a proxy: its caps and its counters.
type udpRelay struct {
	limits  HTTPLimits
	rate    [2]*udpRate
	port    int
	metrics MetricsExporter // nil: none

	forwarded [2]atomic.Int64 // datagrams
	drops     [2][dropReasons]atomic.Int64
	lastWarn  atomic.Int64 // unix nanoseconds
}

func newUDPRelay(l HTTPLimits, port int, metrics MetricsExporter) *udpRelay {
	now := time.Now()
	return &udpRelay{limits: l, port: port, metrics: metrics, rate: [2]*udpRate{newUDPRate(l, now), newUDPRate(l, now)}}
}

// dropped counts a datagram dropped going dir for reason and logs the
// counts, at most once every udpWarnEvery.
func (u *udpRelay) dropped(log *slog.Logger, dir, reason int, now time.Time) {
	u.drops[dir][reason].Add(1)
	if u.metrics != nil {
		u.metrics.ObserveUDPDrop(udpDirection[dir], udpDropReason[reason])
	}
	last := u.lastWarn.Load()
	if now.UnixNano()-last < int64(udpWarnEvery) || !u.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	log.Warn("udp tunnel: datagrams dropped (counts since the tunnel opened; logged at most every "+udpWarnEvery.String()+")",
		append(u.counts(), "max_datagram", u.limits.UDPMaxDatagram, "datagrams_per_second", u.limits.UDPDatagramsPerSecond,
			"bytes_per_second", u.limits.UDPBytesPerSecond)...)
}

// counts are the relay's counters as log attributes.
func (u *udpRelay) counts() []any {
	var out []any
	for d, name := range udpDirection {
		attrs := []any{"forwarded", u.forwarded[d].Load()}
		for r, reason := range udpDropReason {
			attrs = append(attrs, "dropped_"+reason, u.drops[d][r].Load())
		}
		out = append(out, slog.Group(name, attrs...))
	}
	return out
}

// isRefused: the guest answered ICMP port unreachable (a connected UDP
// socket reports it on its next read or write).
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// refusedReason is the close reason of a tunnel whose guest port refused.
func (p *proxy) refusedReason() string {
	return fmt.Sprintf("%s: nothing listens there (ICMP port unreachable)", p.what)
}

// errUDPBusy: the target could not take a datagram at once.
var errUDPBusy = errors.New("the socket's send buffer is full")

// udpSender writes datagrams to a tunnel's target without waiting on it.
type udpSender struct {
	conn net.Conn
	raw  syscall.RawConn // nil: the target is no socket
}

func newUDPSender(c net.Conn, log *slog.Logger) udpSender {
	if b, ok := c.(interface{ SetWriteBuffer(int) error }); ok {
		if err := b.SetWriteBuffer(udpSocketBuffer); err != nil {
			log.Debug("udp tunnel: cannot enlarge the socket's send buffer", "err", err)
		}
	}
	s := udpSender{conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			s.raw = raw
		}
	}
	return s
}

// send writes one datagram, or returns errUDPBusy at once when the socket
// cannot take it: a socket's write is tried once, never waited for (Go's
// own Write would wait until the socket is writable).
func (s udpSender) send(b []byte) error {
	if s.raw == nil {
		_ = s.conn.SetWriteDeadline(time.Now().Add(udpWriteWait))
		_, err := s.conn.Write(b)
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return errUDPBusy
		}
		return err
	}
	var werr error
	if err := s.raw.Write(func(fd uintptr) bool {
		for {
			_, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				return true // done, or not now: never wait for writability
			}
		}
	}); err != nil {
		return err // closed
	}
	switch {
	case werr == nil:
		return nil
	case errors.Is(werr, syscall.EAGAIN), errors.Is(werr, syscall.ENOBUFS):
		return errUDPBusy
	}
	return os.NewSyscallError("write", werr)
}

// udpFromClient forwards the client's messages to the guest, one datagram
// each. It never waits on the guest (udpSender): waiting would leave the
// client's next messages, its close frame among them, unread.
func (p *proxy) udpFromClient(ctx context.Context) {
	u := p.udp
	out := newUDPSender(p.target, p.log)
	buf := make([]byte, u.limits.UDPMaxDatagram+1)
	for {
		typ, r, err := p.ws.Reader(ctx)
		if err != nil {
			p.end(clientEnd(err, udpReadLimit))
			return
		}
		if typ != websocket.MessageBinary {
			p.end(websocket.StatusUnsupportedData, errTextMessage.Error())
			return
		}
		n, err := io.ReadFull(r, buf)
		switch {
		case err == nil: // one byte past the largest datagram
			if _, err := io.Copy(io.Discard, r); err != nil {
				p.end(clientEnd(err, udpReadLimit))
				return
			}
			u.dropped(p.log, udpUp, dropOversize, time.Now())
			continue
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF): // the whole message
		default:
			p.end(clientEnd(err, udpReadLimit))
			return
		}
		now := time.Now()
		if !u.rate[udpUp].allow(n, now) {
			u.dropped(p.log, udpUp, dropRate, now)
			continue
		}
		if err := out.send(buf[:n]); err != nil {
			switch {
			case errors.Is(err, errUDPBusy):
				u.dropped(p.log, udpUp, dropBacklog, now)
				continue
			case errors.Is(err, net.ErrClosed):
			case isRefused(err):
				p.end(websocket.StatusBadGateway, p.refusedReason())
			default:
				p.end(websocket.StatusInternalError, fmt.Sprintf("sending to %s: %v", p.what, err))
			}
			return
		}
		u.forwarded[udpUp].Add(1)
		p.in.Add(int64(n))
		p.touch()
	}
}

// udpToClient forwards the guest's datagrams to the client, one message
// each.
func (p *proxy) udpToClient(ctx context.Context) {
	u := p.udp
	if b, ok := p.target.(interface{ SetReadBuffer(int) error }); ok {
		if err := b.SetReadBuffer(udpSocketBuffer); err != nil {
			p.log.Debug("udp tunnel: cannot enlarge the socket's receive buffer", "err", err)
		}
	}
	// A write that waits WriteTimeout ends the tunnel, saying so before
	// the closed websocket fails the write (and the read of the other
	// direction). One timer, not a context a datagram.
	stall := time.AfterFunc(time.Hour, func() {
		p.end(websocket.StatusPolicyViolation, fmt.Sprintf("the client took no data for %s", p.o.WriteTimeout))
	})
	stall.Stop()
	defer stall.Stop()
	buf := make([]byte, u.limits.UDPMaxDatagram+1)
	for {
		n, err := p.target.Read(buf)
		if err != nil {
			switch {
			case errors.Is(err, net.ErrClosed):
			case isRefused(err):
				p.end(websocket.StatusBadGateway, p.refusedReason())
			default:
				p.end(websocket.StatusInternalError, fmt.Sprintf("receiving from %s: %v", p.what, err))
			}
			return
		}
		now := time.Now()
		if n > u.limits.UDPMaxDatagram {
			u.dropped(p.log, udpDown, dropOversize, now)
			continue
		}
		if !u.rate[udpDown].allow(n, now) {
			u.dropped(p.log, udpDown, dropRate, now)
			continue
		}
		stall.Reset(p.o.WriteTimeout)
		werr := p.ws.Write(ctx, websocket.MessageBinary, buf[:n])
		stall.Stop()
		if werr != nil {
			p.end(clientEnd(werr, udpReadLimit)) // unless the stall ended it first
			return
		}
		u.forwarded[udpDown].Add(1)
		p.out.Add(int64(n))
		p.touch()
	}
}
