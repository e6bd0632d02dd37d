package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
)

// parseTunnelPort reads a tunnel's PORT argument: "22" or "22/tcp" (TCP),
// "47998/udp" (UDP).
func parseTunnelPort(s string) (int, string, error) {
	num, proto, found := strings.Cut(s, "/")
	if !found {
		proto = "tcp"
	}
	switch proto {
	case "tcp", "udp":
	default:
		return 0, "", usageError{fmt.Errorf("PORT %q: the protocol is tcp or udp (PORT, PORT/tcp, PORT/udp), not %q", s, proto)}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return 0, "", usageError{fmt.Errorf("PORT %q is not a %s port (1–65535)", s, strings.ToUpper(proto))}
	}
	return n, proto, nil
}

// udpRedialEvery bounds how often a UDP forwarder asks gpuvmd for a new
// tunnel after one closed.
const udpRedialEvery = time.Second

// udpForwarder carries the datagrams of a local UDP socket through one
// tunnel at a time to the guest's port, and the guest's datagrams back to
// the local peer that sent last. A tunnel that closes (idle, the guest's
// port unreachable, the VM stopped) is reported, and the next local
// datagram opens a fresh one.
type udpForwarder struct {
	local  *net.UDPConn
	dial   func(context.Context) (*client.UDPTunnel, error)
	stderr io.Writer

	mu       sync.Mutex
	peer     *net.UDPAddr // the local peer that sent last
	tun      *client.UDPTunnel
	lastDial time.Time
	wg       sync.WaitGroup
}

// serve forwards until ctx ends; tun is the tunnel opened already.
func (f *udpForwarder) serve(ctx context.Context, tun *client.UDPTunnel) {
	f.setTunnel(ctx, tun)
	stop := context.AfterFunc(ctx, func() { f.local.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := f.local.ReadFromUDP(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(f.stderr, "gpuvm: reading the local UDP socket: %v\n", err)
			}
			break
		}
		f.mu.Lock()
		f.peer = from
		tun := f.tun
		f.mu.Unlock()
		if tun == nil {
			if tun = f.redial(ctx); tun == nil {
				continue // dropped, as the network would
			}
		}
		if err := tun.Send(ctx, buf[:n]); err != nil {
			f.closed(tun, err)
		}
	}
	f.mu.Lock()
	if f.tun != nil {
		f.tun.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// redial opens a new tunnel, at most once every udpRedialEvery.
func (f *udpForwarder) redial(ctx context.Context) *client.UDPTunnel {
	f.mu.Lock()
	if time.Since(f.lastDial) < udpRedialEvery {
		f.mu.Unlock()
		return nil
	}
	f.lastDial = time.Now()
	f.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	tun, err := f.dial(dctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(f.stderr, "gpuvm: cannot open a new UDP tunnel: %v\n", err)
		}
		return nil
	}
	f.setTunnel(ctx, tun)
	return tun
}

// setTunnel makes tun the tunnel and starts carrying its datagrams back.
func (f *udpForwarder) setTunnel(ctx context.Context, tun *client.UDPTunnel) {
	f.mu.Lock()
	f.tun = tun
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			b, err := tun.Receive(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.closed(tun, err)
				}
				return
			}
			f.mu.Lock()
			peer := f.peer
			f.mu.Unlock()
			if peer != nil {
				_, _ = f.local.WriteToUDP(b, peer)
			}
		}
	}()
}

// closed reports a tunnel that ended, once, and forgets it.
func (f *udpForwarder) closed(tun *client.UDPTunnel, err error) {
	f.mu.Lock()
	current := f.tun == tun
	if current {
		f.tun = nil
	}
	f.mu.Unlock()
	if current {
		tun.Close()
		fmt.Fprintf(f.stderr, "gpuvm: %v; the next datagram opens a new tunnel\n", err)
	}
}

// runUDPTunnel forwards a local UDP port to the guest's UDP port until ctx
// ends. It opens the tunnel first, so that a VM or a guest address that
// cannot be reached says so at once.
func runUDPTunnel(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, port int, t tunnelOpts) error {
	serve, err := openUDPTunnel(ctx, c, cmd, ref, port, t)
	if err != nil {
		return err
	}
	serve()
	return nil
}

// openUDPTunnel opens the tunnel and the local socket of a UDP forward and
// returns what forwards through them until ctx ends.
func openUDPTunnel(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, port int, t tunnelOpts) (serve func(), err error) {
	dial := func(ctx context.Context) (*client.UDPTunnel, error) { return c.DialUDPTunnel(ctx, ref, port) }
	tun, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	laddr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(t.bind, strconv.Itoa(t.localPort)))
	if err != nil {
		tun.Close()
		return nil, fmt.Errorf("listen on %s/udp: %w", net.JoinHostPort(t.bind, strconv.Itoa(t.localPort)), err)
	}
	local, err := net.ListenUDP("udp", laddr)
	if err != nil {
		tun.Close()
		return nil, fmt.Errorf("listen on %s/udp: %w", laddr, err)
	}
	addr := local.LocalAddr().String()
	fmt.Fprintf(cmd.OutOrStdout(), "Forwarding %s/udp to port %d/udp of VM %s through gpuvmd; replies go to the local peer that sent last. Ctrl-C stops.\n", addr, port, ref)
	f := &udpForwarder{local: local, dial: dial, stderr: cmd.ErrOrStderr()}
	consoleSeamsOf(cmd).listening(addr)
	return func() {
		defer local.Close()
		f.serve(ctx, tun)
	}, nil
}

// udpForwards opens a UDP forward of each of the guest's ports to the same
// port on bind, and forwards through them in the background until ctx
// ends. It returns once all are open, or with the first that cannot be
// opened (and none left open).
func udpForwards(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, ports []int, bind string) error {
	ctx, cancel := context.WithCancel(ctx)
	serves := make([]func(), 0, len(ports))
	for _, port := range ports {
		serve, err := openUDPTunnel(ctx, c, cmd, ref, port, tunnelOpts{localPort: port, bind: bind})
		if err != nil {
			cancel()
			for _, s := range serves {
				s() // ctx is done: each closes its tunnel and socket at once
			}
			return fmt.Errorf("UDP port %d: %w", port, err)
		}
		serves = append(serves, serve)
	}
	for _, s := range serves {
		go s() // each ends when the caller's ctx does
	}
	context.AfterFunc(ctx, cancel)
	return nil
}
