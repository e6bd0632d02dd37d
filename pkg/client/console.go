package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Console asks for a one-time ticket to a running VM's display (by ID or
// name), and the ways in that it opens.
func (c *Client) Console(ctx context.Context, idOrName string) (*api.ConsoleResponse, error) {
	var out api.ConsoleResponse
	if err := c.do(ctx, http.MethodGet, "/v1/vms/"+url.PathEscape(idOrName)+"/console", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConsoleVV gets the virt-viewer connection file of a running VM's display
// (application/x-virt-viewer): its host, port and password.
func (c *Client) ConsoleVV(ctx context.Context, idOrName string) ([]byte, error) {
	target := c.base.String() + "/v1/vms/" + url.PathEscape(idOrName) + "/console.vv"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", target, err)
	}
	req.Header.Set("Accept", api.VVContentType+", application/problem+json")
	c.authorize(req)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, c.transportError(ctx, http.MethodGet, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, &TransportError{Method: http.MethodGet, URL: target, Err: fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, problemOf(resp, data, http.MethodGet, target)
	}
	if ct := contentType(resp); ct != api.VVContentType {
		return nil, &TransportError{Method: http.MethodGet, URL: target, Err: fmt.Errorf("the answer is %s, not %s", ct, api.VVContentType)}
	}
	return data, nil
}

// Tunnel asks for a one-time ticket to a TCP port of a running VM's guest.
func (c *Client) Tunnel(ctx context.Context, idOrName string, port int) (*api.TunnelResponse, error) {
	return c.OpenTunnel(ctx, idOrName, api.TunnelRequest{Port: port})
}

// OpenTunnel asks for a one-time ticket to a TCP or UDP port of a running
// VM's guest (req.Protocol, empty: tcp).
func (c *Client) OpenTunnel(ctx context.Context, idOrName string, req api.TunnelRequest) (*api.TunnelResponse, error) {
	var out api.TunnelResponse
	if err := c.do(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(idOrName)+"/tunnel", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Websocket paths of gpuvmd.
const (
	consoleWSPath   = "/v1/console/ws"
	tunnelWSPath    = "/v1/tunnel/ws"
	tunnelUDPWSPath = "/v1/tunnel/udp/ws"
)

// DialConsole opens a running VM's display through gpuvmd: a fresh ticket,
// then its websocket, as a net.Conn that carries the display's protocol
// (for VNC, gpuvmd has answered the password: the display offers security
// type None). It returns the protocol too.
func (c *Client) DialConsole(ctx context.Context, idOrName string) (net.Conn, string, error) {
	con, err := c.Console(ctx, idOrName)
	if err != nil {
		return nil, "", err
	}
	conn, err := c.dialTicket(ctx, consoleWSPath, con.VMID, con.Ticket)
	if err != nil {
		return nil, "", err
	}
	return conn, con.Protocol, nil
}

// DialTunnel opens a TCP port of a running VM's guest through gpuvmd: a
// fresh ticket, then its websocket, as a net.Conn.
func (c *Client) DialTunnel(ctx context.Context, idOrName string, port int) (net.Conn, error) {
	t, err := c.Tunnel(ctx, idOrName, port)
	if err != nil {
		return nil, err
	}
	return c.dialTicket(ctx, tunnelWSPath, t.VMID, t.Ticket)
}

// UDPTunnel carries datagrams to and from a UDP port of a VM's guest,
// through gpuvmd: one websocket message is one datagram. Send and Receive
// may be called at once from two goroutines.
type UDPTunnel struct {
	ws *websocket.Conn
	// VMID and Port are where it goes.
	VMID string
	Port int
}

// maxDatagram is the largest UDP payload; gpuvmd sends none larger.
const maxDatagram = 65535

// DialUDPTunnel opens a UDP port of a running VM's guest through gpuvmd: a
// fresh ticket (protocol udp), then its websocket.
func (c *Client) DialUDPTunnel(ctx context.Context, idOrName string, port int) (*UDPTunnel, error) {
	t, err := c.OpenTunnel(ctx, idOrName, api.TunnelRequest{Port: port, Protocol: api.TunnelUDP})
	if err != nil {
		return nil, err
	}
	ws, err := c.dialTicketWS(ctx, tunnelUDPWSPath, t.VMID, t.Ticket)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(maxDatagram)
	return &UDPTunnel{ws: ws, VMID: t.VMID, Port: t.Port}, nil
}

// Send sends one datagram to the guest's port. gpuvmd drops one larger than
// its cap, or past its rate cap, as a network drops datagrams.
func (t *UDPTunnel) Send(ctx context.Context, datagram []byte) error {
	return tunnelError(t.ws.Write(ctx, websocket.MessageBinary, datagram))
}

// Receive waits for the next datagram from the guest's port. When gpuvmd
// closes the tunnel (idle, the guest's port unreachable, the VM stopped)
// the error is a *TunnelClosedError that says why.
func (t *UDPTunnel) Receive(ctx context.Context) ([]byte, error) {
	for {
		typ, b, err := t.ws.Read(ctx)
		if err != nil {
			return nil, tunnelError(err)
		}
		if typ == websocket.MessageBinary {
			return b, nil
		}
	}
}

// Close ends the tunnel.
func (t *UDPTunnel) Close() error {
	err := t.ws.Close(websocket.StatusNormalClosure, "")
	if err != nil && websocket.CloseStatus(err) != -1 {
		return nil
	}
	return err
}

// TunnelClosedError: gpuvmd closed a tunnel, with a websocket status and
// the reason.
type TunnelClosedError struct {
	Code   int
	Reason string
}

func (e *TunnelClosedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("gpuvmd closed the tunnel (status %d)", e.Code)
	}
	return "gpuvmd closed the tunnel: " + e.Reason
}

func tunnelError(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &TunnelClosedError{Code: int(ce.Code), Reason: ce.Reason}
	}
	return err
}

// WebSocketURL is the websocket URL of path on this client's server, with
// a ticket: built from the client's own base URL (ws for http, wss for
// https, with its path prefix), which a proxy in front of gpuvmd keeps.
func (c *Client) WebSocketURL(path, vmID, ticket string) string {
	u := *c.base
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path += path
	u.RawQuery = url.Values{"vm": {vmID}, "ticket": {ticket}}.Encode()
	return u.String()
}

// dialTicket opens a ticket's websocket. The net.Conn it returns lives
// until it is closed, not as long as ctx.
func (c *Client) dialTicket(ctx context.Context, path, vmID, ticket string) (net.Conn, error) {
	ws, err := c.dialTicketWS(ctx, path, vmID, ticket)
	if err != nil {
		return nil, err
	}
	// The connection outlives the dial's context; Close ends it.
	return websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary), nil
}

// dialTicketWS opens a ticket's websocket.
func (c *Client) dialTicketWS(ctx context.Context, path, vmID, ticket string) (*websocket.Conn, error) {
	target := c.WebSocketURL(path, vmID, ticket)
	shown := strings.Replace(target, url.QueryEscape(ticket), "…", 1) // a ticket is a credential: not in messages
	hdr := http.Header{}
	if c.UserAgent != "" {
		hdr.Set("User-Agent", c.UserAgent)
	}
	ws, resp, err := websocket.Dial(ctx, target, &websocket.DialOptions{HTTPClient: c.httpClient(), HTTPHeader: hdr, Subprotocols: []string{"binary"}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			return nil, problemOf(resp, data, http.MethodGet, shown)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET %s: %w", shown, ctx.Err())
		}
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // drop coder/websocket's "failed to WebSocket dial"
		}
		return nil, &TransportError{Method: http.MethodGet, URL: shown, Err: err}
	}
	return ws, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
}

func (c *Client) transportError(ctx context.Context, method, target string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return fmt.Errorf("%s %s: %w", method, target, ctxErr)
	}
	return &TransportError{Method: method, URL: target, Err: err}
}
