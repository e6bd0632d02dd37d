package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func (s *Server) createTunnel(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok || s.forwardToOwner(c, vm) || !s.requireConsoles(c) { // forwardToOwner: fleet.go
		return
	}
	var req api.TunnelRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	proto := req.Protocol
	switch proto {
	case "":
		proto = api.TunnelTCP
	case api.TunnelTCP, api.TunnelUDP:
	default:
		s.writeProblem(c, withField(errBadRequest, "protocol", fmt.Sprintf("protocol %q is neither %q (the default) nor %q", clip(req.Protocol, 40), api.TunnelTCP, api.TunnelUDP)))
		return
	}
	if req.Port < 1 || req.Port > 65535 {
		s.writeProblem(c, withField(errValidation, "port", fmt.Sprintf("port %d is not a %s port (1–65535)", req.Port, strings.ToUpper(proto))))
		return
	}
	auditDetail(c, "%s", portDetail(req.Port, proto))
	if !s.requireRunning(c, vm) {
		return
	}
	// Say now, not on the websocket, that the guest cannot be reached.
	if _, err := s.guestAddress(c.Request.Context(), vm); err != nil {
		s.writeProblem(c, err)
		return
	}
	plain, t, ok := s.issueTicket(c, vm, store.TicketTunnel, req.Port, proto)
	if !ok {
		return
	}
	_, wsBase := baseURLs(c.Request)
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, api.TunnelResponse{VMID: vm.ID, Port: req.Port, Protocol: proto, Ticket: plain, ExpiresAt: t.ExpiresAt,
		WebSocketURL: wsBase + tunnelPath(proto) + ticketQuery(vm.ID, plain)})
}

// tunnelPath is the websocket path of a tunnel of the protocol.
func tunnelPath(proto string) string {
	if proto == store.ProtocolUDP {
		return tunnelUDPWSPath
	}
	return tunnelWSPath
}

// portDetail names a tunnel's port in the audit log and in messages: "port
// 22", "port 47998/udp".
func portDetail(port int, proto string) string {
	if proto == store.ProtocolUDP {
		return fmt.Sprintf("port %d/udp", port)
	}
	return fmt.Sprintf("port %d", port)
}

// guestAddress is the address a tunnel connects to: the guest's first
// address from its network's DHCP leases, IPv4 first, else one its guest
// agent reports. An address the guest reports itself is not trusted to be
// its own: loopback, link-local, multicast and unspecified addresses are
// refused from any source, and the host's own addresses from the agent.
func (s *Server) guestAddress(ctx context.Context, vm *store.VM) (netip.Addr, error) {
	addrs, err := s.Consoles.Addresses(ctx, vm.ID)
	if hypervisor.IsNotFound(err) {
		return netip.Addr{}, with(errConflict, fmt.Sprintf("VM %s has no domain on this host (is it running here?)", vm.Name))
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of vm %s: %w", vm.ID, err)
	}
	var own map[netip.Addr]bool
	best, rank := netip.Addr{}, 0
	for _, a := range addrs {
		ip := a.IP.Unmap()
		if !ip.IsValid() || ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsInterfaceLocalMulticast() {
			continue
		}
		r := 1
		if a.Source == hypervisor.SourceLease {
			r += 2
		} else {
			if own == nil {
				own = hostAddresses()
			}
			if own[ip] {
				s.log.Warn("the guest agent reports an address of the host; not tunnelling to it", "vm", vm.ID, "address", ip)
				continue
			}
		}
		if ip.Is4() {
			r++
		}
		if r > rank {
			best, rank = ip, r
		}
	}
	if rank == 0 {
		return netip.Addr{}, with(errConflict, fmt.Sprintf("VM %s has no IP address that libvirt knows of: no network, no DHCP lease yet, or no guest agent to ask", vm.Name))
	}
	return best, nil
}

// hostAddresses are the addresses of this host's interfaces.
func hostAddresses() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}

// proxy carries one websocket to one TCP connection (the VM's display or a
// port of its guest), or to one connected UDP socket (udp.go), until either
// side ends, the connection idles or outlives its limit, a peer stalls, the
// VM stops, or gpuvmd closes.
type proxy struct {
	s      *Server
	o      ConsoleOptions
	ws     *websocket.Conn
	target net.Conn
	vmID   string
	what   string // "the vnc display of VM x", for messages
	log    *slog.Logger
	// client holds what the VNC handshake read beyond itself.
	client wsStream
	// udp, when set, makes it a UDP tunnel: datagrams, not a stream.
	udp *udpRelay
	// idle is the idle timeout (default o.IdleTimeout).
	idle time.Duration

	last    atomic.Int64 // unix nanoseconds of the last byte either way
	in, out atomic.Int64 // bytes from the client, to the client
	endOnce sync.Once
	done    chan struct{}
	code    websocket.StatusCode
	reason  string
	started time.Time
}

// end records why the connection ends; the first reason wins.
func (p *proxy) end(code websocket.StatusCode, reason string) {
	p.endOnce.Do(func() {
		p.code, p.reason = code, trimReason(reason)
		close(p.done)
	})
}

func (p *proxy) touch() { p.last.Store(time.Now().UnixNano()) }

func (p *proxy) run(ctx context.Context) {
	p.done = make(chan struct{})
	p.started = time.Now()
	p.touch()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.idle <= 0 {
		p.idle = p.o.IdleTimeout
	}
	p.log.Info("proxy opened", "to", p.what)
	from, to := p.fromClient, p.toClient
	if p.udp != nil {
		from, to = p.udpFromClient, p.udpToClient
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); from(ctx) }()
	go func() { defer wg.Done(); to(ctx) }()
	go func() { defer wg.Done(); p.watch(ctx) }()
	<-p.done
	// Unblock both copies: the target's reads and writes fail at once;
	// the websocket is closed with the reason (a stalled client gets no
	// more than the close handshake's own timeout).
	p.target.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = p.ws.Close(p.code, p.reason)
	}()
	select {
	case <-closed:
	case <-time.After(p.o.WriteTimeout):
		_ = p.ws.CloseNow()
		<-closed
	}
	cancel()
	wg.Wait()
	attrs := []any{"to", p.what, "reason", p.reason, "code", int(p.code),
		"duration", time.Since(p.started).Round(time.Millisecond), "bytes_from_client", p.in.Load(), "bytes_to_client", p.out.Load()}
	if p.udp != nil {
		attrs = append(attrs, p.udp.counts()...)
	}
	p.log.Info("proxy closed", attrs...)
}

// fromClient copies the client's binary messages to the target.
func (p *proxy) fromClient(ctx context.Context) {
	write := func(b []byte) bool {
		_ = p.target.SetWriteDeadline(time.Now().Add(p.o.WriteTimeout))
		if _, err := p.target.Write(b); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return false
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				p.end(websocket.StatusTryAgainLater, fmt.Sprintf("%s took no data for %s", p.what, p.o.WriteTimeout))
			} else {
				p.end(websocket.StatusGoingAway, fmt.Sprintf("%s closed the connection", p.what))
			}
			return false
		}
		p.in.Add(int64(len(b)))
		p.touch()
		return true
	}
	if len(p.client.rest) > 0 && !write(p.client.rest) {
		return
	}
	p.client.rest = nil
	for {
		typ, data, err := p.ws.Read(ctx)
		if err != nil {
			p.end(clientEnd(err, p.o.MaxMessage))
			return
		}
		if typ != websocket.MessageBinary {
			p.end(websocket.StatusUnsupportedData, errTextMessage.Error())
			return
		}
		if !write(data) {
			return
		}
	}
}

// clientEnd says why the client's side ended.
func clientEnd(err error, limit int64) (websocket.StatusCode, string) {
	switch st := websocket.CloseStatus(err); {
	case st == websocket.StatusMessageTooBig || strings.Contains(err.Error(), "read limited at"):
		// coder/websocket has closed with StatusMessageTooBig itself.
		return websocket.StatusMessageTooBig, fmt.Sprintf("a message larger than %d bytes", limit)
	case st != -1:
		return websocket.StatusNormalClosure, "the client closed the connection"
	case errors.Is(err, context.Canceled):
		return websocket.StatusGoingAway, "closed"
	}
	return websocket.StatusNormalClosure, "the client went away"
}

// toClient copies the target's bytes to the client, one message per read.
func (p *proxy) toClient(ctx context.Context) {
	buf := make([]byte, 32<<10)
	for {
		n, err := p.target.Read(buf)
		if n > 0 {
			wctx, cancel := context.WithTimeout(ctx, p.o.WriteTimeout)
			werr := p.ws.Write(wctx, websocket.MessageBinary, buf[:n])
			stalled := wctx.Err() == context.DeadlineExceeded
			cancel()
			if werr != nil {
				if stalled {
					p.end(websocket.StatusPolicyViolation, fmt.Sprintf("the client took no data for %s", p.o.WriteTimeout))
				} else {
					p.end(clientEnd(werr, p.o.MaxMessage))
				}
				return
			}
			p.out.Add(int64(n))
			p.touch()
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.end(websocket.StatusNormalClosure, fmt.Sprintf("%s closed the connection", p.what))
			}
			return
		}
	}
}

// watch ends the connection on idleness, its time limit, the VM leaving
// the running state, and gpuvmd's Close.
func (p *proxy) watch(ctx context.Context) {
	tick := time.NewTicker(p.o.CheckInterval)
	defer tick.Stop()
	deadline := p.started.Add(p.o.MaxDuration)
	for {
		select {
		case <-p.done:
			return
		case <-p.s.done:
			p.end(websocket.StatusGoingAway, "gpuvmd is shutting down")
			return
		case now := <-tick.C:
			if idle := now.Sub(time.Unix(0, p.last.Load())); idle >= p.idle {
				p.end(websocket.StatusPolicyViolation, fmt.Sprintf("idle for %s: closed", p.idle))
				return
			}
			if !now.Before(deadline) {
				p.end(websocket.StatusPolicyViolation, fmt.Sprintf("open for %s, the longest a connection may last", p.o.MaxDuration))
				return
			}
			vm, err := p.s.Store.GetVM(ctx, p.vmID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				p.end(websocket.StatusGoingAway, "the VM was deleted")
				return
			case err != nil:
				if ctx.Err() == nil {
					p.log.Warn("proxy: cannot read the VM's state", "err", err)
				}
			case vm.State != store.VMRunning:
				p.end(websocket.StatusGoingAway, fmt.Sprintf("VM %s is %s", vm.Name, vm.State))
				return
			}
		}
	}
}
