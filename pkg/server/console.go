package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/rfb"
	"github.com/gpuvm/gpuvm/pkg/server/web"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Consoles is what the console and tunnel routes, and GET /v1/vms/{id},
// need of the hypervisor (*hypervisor.Conn): where a running VM's display
// listens, and its guest's addresses.
type Consoles interface {
	Console(ctx context.Context, uuid string) (domain.Console, error)
	Addresses(ctx context.Context, uuid string) ([]hypervisor.Address, error)
}

// ConsoleOptions tune the console and tunnel proxies; zero values take the
// defaults.
type ConsoleOptions struct {
	// TicketTTL is how long a ticket may wait for its connection
	// (default 60s).
	TicketTTL time.Duration
	// IdleTimeout closes a connection that carried no byte either way for
	// this long (default 30 minutes).
	IdleTimeout time.Duration
	// MaxDuration closes a connection this long after it opened, however
	// busy (default 12 hours).
	MaxDuration time.Duration
	// WriteTimeout cuts a connection whose client (or VM) takes no data
	// for this long: a stalled peer (default 30s).
	WriteTimeout time.Duration
	// CheckInterval is how often a connection checks its VM's state and
	// its timeouts (default 2s).
	CheckInterval time.Duration
	// DialTimeout bounds the connection to the display or the guest's
	// port (default 10s).
	DialTimeout time.Duration
	// MaxMessage is the largest websocket message a client may send
	// (default 1 MiB); a larger one closes the connection.
	MaxMessage int64
	// LiveTimeout bounds what GET /v1/vms/{id} asks the hypervisor of a
	// running VM: its guest's addresses and its display (default 2s);
	// what does not answer in time is left out of the answer.
	LiveTimeout time.Duration
	// Dial connects to a display or a guest's port; nil: a net.Dialer.
	// Tests send the connections elsewhere.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults of ConsoleOptions.
const (
	DefaultTicketTTL     = 60 * time.Second
	DefaultIdleTimeout   = 30 * time.Minute
	DefaultMaxDuration   = 12 * time.Hour
	DefaultWriteTimeout  = 30 * time.Second
	DefaultCheckInterval = 2 * time.Second
	DefaultDialTimeout   = 10 * time.Second
	DefaultMaxMessage    = 1 << 20
	DefaultLiveTimeout   = 2 * time.Second
)

func (o ConsoleOptions) withDefaults() ConsoleOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.TicketTTL, DefaultTicketTTL)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.MaxDuration, DefaultMaxDuration)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.CheckInterval, DefaultCheckInterval)
	def(&o.DialTimeout, DefaultDialTimeout)
	def(&o.LiveTimeout, DefaultLiveTimeout)
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.Dial == nil {
		d := &net.Dialer{}
		o.Dial = d.DialContext
	}
	return o
}

// Paths of the console's routes outside /v1's bearer authentication.
const (
	consoleWSPath  = "/v1/console/ws"
	tunnelWSPath   = "/v1/tunnel/ws"
	consolePageURL = "/console/"
	consoleAssets  = "/console-assets"
)

// ticketSweepAge: tickets expired longer than this are removed when a new
// one is issued.
const ticketSweepAge = 10 * time.Minute

var errBadGateway = &Problem{Type: ProblemBase + "bad-gateway", Title: "The VM did not answer as expected", Status: http.StatusBadGateway}

// errGuestRefused: the guest refused a tunnel's connection (nothing listens
// on its port). Still a 502, as clients of a refused port have always been
// told, but its own type, audited as refused (by the guest) and logged as
// no failure of gpuvmd's.
var errGuestRefused = &Problem{Type: ProblemBase + "guest-refused", Title: "Refused by the guest", Status: http.StatusBadGateway}

// guestRefusedKey marks a request answered errGuestRefused, for the
// request log.
const guestRefusedKey = "gpuvm.guest_refused"

// consoleRoutes registers the console and tunnel routes: the ticket
// issuers under /v1 (bearer token, group vms), the websockets and the
// browser page outside it (a browser cannot send a bearer token on a
// websocket; the one-time ticket is the credential). A websocket that
// carries credentials as well must carry its ticket owner's (ticketCaller).
func (s *Server) consoleRoutes(vms *gin.RouterGroup) {
	vms.GET("/vms/:id/console", s.getConsole)
	vms.GET("/vms/:id/console.vv", s.getConsoleVV)
	vms.POST("/vms/:id/tunnel", s.createTunnel)
	s.engine.GET(consoleWSPath, s.stream, s.ticketCaller, func(c *gin.Context) { s.serveTicket(c, store.TicketConsole, store.ProtocolTCP) })
	s.engine.GET(tunnelWSPath, s.stream, s.ticketCaller, func(c *gin.Context) { s.serveTicket(c, store.TicketTunnel, store.ProtocolTCP) })
	s.engine.GET(tunnelUDPWSPath, s.stream, s.ticketCaller, func(c *gin.Context) { s.serveTicket(c, store.TicketTunnel, store.ProtocolUDP) })
	s.engine.GET(consolePageURL+":id", s.consolePage)
	s.engine.GET(consoleAssets+"/*filepath", gin.WrapH(web.AssetHandler(consoleAssets)))
}

// displayPasswordChars are the characters of display passwords: VNC takes
// printable ASCII; letters and digits survive every file format.
const displayPasswordChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// newDisplayPassword is a random display password of the longest length VNC
// uses (8 characters, about 47 bits).
func newDisplayPassword() string {
	out := make([]byte, 0, domain.MaxVNCPassword)
	var b [1]byte
	for len(out) < domain.MaxVNCPassword {
		_, _ = rand.Read(b[:])
		if int(b[0]) >= 256/len(displayPasswordChars)*len(displayPasswordChars) {
			continue // no modulo bias
		}
		out = append(out, displayPasswordChars[int(b[0])%len(displayPasswordChars)])
	}
	return string(out)
}

// requireConsoles answers 503 when gpuvmd has no hypervisor to ask.
func (s *Server) requireConsoles(c *gin.Context) bool {
	if s.Consoles == nil {
		s.writeProblem(c, with(errUnavailable, "gpuvmd runs without a hypervisor connection: no consoles"))
		return false
	}
	return true
}

// requireRunning answers 409 unless the VM runs.
func (s *Server) requireRunning(c *gin.Context, vm *store.VM) bool {
	if vm.State != store.VMRunning {
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %s is %s, not running: it has no display or guest to reach", vm.Name, vm.State)))
		return false
	}
	return true
}

// liveConsole asks the hypervisor where the VM's display is, answering the
// request itself when it cannot say.
func (s *Server) liveConsole(c *gin.Context, vm *store.VM) (domain.Console, bool) {
	con, err := s.Consoles.Console(c.Request.Context(), vm.ID)
	if err == nil {
		return con, true
	}
	s.consoleProblem(c, vm, err)
	return domain.Console{}, false
}

// consoleProblem answers why the hypervisor cannot say where the VM's
// display is.
func (s *Server) consoleProblem(c *gin.Context, vm *store.VM, err error) {
	switch {
	case errors.Is(err, domain.ErrNoConsole):
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %s has no VNC or SPICE display (its profile says display = none, or its domain is not running)", vm.Name)))
	case hypervisor.IsNotFound(err):
		s.writeProblem(c, with(errConflict, fmt.Sprintf("VM %s has no domain on this host (is it running here?)", vm.Name)))
	default:
		s.writeProblem(c, fmt.Errorf("console of vm %s: %w", vm.ID, err))
	}
}

// issueTicket stores a one-time ticket of the caller for the VM, sweeping
// long-expired ones on the way.
func (s *Server) issueTicket(c *gin.Context, vm *store.VM, kind string, port int, proto string) (string, *store.ConsoleTicket, bool) {
	ctx := c.Request.Context()
	if n, err := s.Store.DeleteExpiredTickets(ctx, s.Store.Now().Add(-ticketSweepAge)); err != nil {
		s.log.Warn("removing expired console tickets failed", "err", err)
	} else if n > 0 {
		s.log.Debug("removed expired console tickets", "count", n)
	}
	t := &store.ConsoleTicket{VMID: vm.ID, User: user(c).Name, Kind: kind, Port: port, Protocol: proto}
	plain, err := s.Store.IssueTicket(ctx, t, s.Console.withDefaults().TicketTTL)
	if err != nil {
		s.writeProblem(c, err)
		return "", nil, false
	}
	return plain, t, true
}

// baseURLs are the server's HTTP and websocket base URLs as the request
// reached it ("https://gpu.example:8443", "wss://gpu.example:8443"). A
// proxy in front that terminates TLS says so with X-Forwarded-Proto.
func baseURLs(r *http.Request) (httpBase, wsBase string) {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return "https://" + r.Host, "wss://" + r.Host
	}
	return "http://" + r.Host, "ws://" + r.Host
}

// vmURL is the URL of one of a VM's routes: vmURL(base, id, "/console")
// is base/v1/vms/{id}/console.
func vmURL(httpBase, vmID, suffix string) string {
	return httpBase + "/v1/vms/" + url.PathEscape(vmID) + suffix
}

func ticketQuery(vmID, ticket string) string {
	return "?" + url.Values{"vm": {vmID}, "ticket": {ticket}}.Encode()
}

// directHost is the host a client reaches the display at: its listen
// address, or the host the request came to when it listens on every
// address.
func directHost(listen string, r *http.Request) string {
	if ip := net.ParseIP(listen); ip != nil && ip.IsUnspecified() {
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			return h
		}
		return r.Host
	}
	return listen
}

func (s *Server) getConsole(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok || s.forwardToOwner(c, vm) || !s.requireConsoles(c) || !s.requireRunning(c, vm) { // forwardToOwner: fleet.go
		return
	}
	prof := s.vmProfile(vm) // desktop.go
	httpBase, wsBase := baseURLs(c.Request)
	out := api.ConsoleResponse{VMID: vm.ID, Protocol: api.DesktopNone}
	con, err := s.Consoles.Console(c.Request.Context(), vm.ID)
	switch {
	case err == nil:
		plain, t, ok := s.issueTicket(c, vm, store.TicketConsole, 0, store.ProtocolTCP)
		if !ok {
			return
		}
		out.Protocol, out.Ticket, out.ExpiresAt = string(con.Protocol), plain, t.ExpiresAt
		out.WebSocketURL = wsBase + consoleWSPath + ticketQuery(vm.ID, plain)
		out.VVURL = vmURL(httpBase, vm.ID, "/console.vv")
		if con.Protocol == domain.GraphicsVNC {
			out.BrowserURL = httpBase + consolePageURL + url.PathEscape(vm.ID) + "?" + url.Values{"ticket": {plain}}.Encode()
		}
		if user(c).Admin {
			out.Direct = &api.Console{Protocol: string(con.Protocol), Host: directHost(con.Host, c.Request), Port: con.Port}
		}
	case errors.Is(err, domain.ErrNoConsole) && desktopTunneled(prof):
		// No display, but a desktop in the guest: the answer says how
		// to reach it.
	default:
		s.consoleProblem(c, vm, err)
		return
	}
	display := "" // the live display's protocol
	if out.Ticket != "" {
		display = out.Protocol
	}
	out.Desktop = desktopAnswer(prof, vm, httpBase, display)
	out.GPUDisplay, out.Notes = gpuDisplay(prof)
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, out)
}

// VVFile is a virt-viewer connection file ([virt-viewer] section) for a
// display at host:port.
func VVFile(protocol domain.GraphicsType, host string, port int, password, title string) string {
	var b strings.Builder
	b.WriteString("[virt-viewer]\n")
	fmt.Fprintf(&b, "type=%s\nhost=%s\nport=%d\n", protocol, host, port)
	if password != "" {
		fmt.Fprintf(&b, "password=%s\n", password)
	}
	fmt.Fprintf(&b, "title=%s\n", strings.NewReplacer("\n", " ", "\r", " ", "%", "%%").Replace(title))
	b.WriteString("delete-this-file=1\nrelease-cursor=shift+f12\n")
	return b.String()
}

func (s *Server) getConsoleVV(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok || s.forwardToOwner(c, vm) || !s.requireConsoles(c) || !s.requireRunning(c, vm) { // forwardToOwner: fleet.go
		return
	}
	con, ok := s.liveConsole(c, vm)
	if !ok {
		return
	}
	password := con.Password
	if password == "" {
		password = vm.DisplayPassword
	}
	body := VVFile(con.Protocol, directHost(con.Host, c.Request), con.Port, password, vm.Name+" (gpuvm)")
	c.Header("Content-Disposition", `attachment; filename="`+vm.Name+`.vv"`)
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, api.VVContentType, []byte(body))
}

// ticketProblem says why a ticket was refused.
func ticketProblem(err error) error {
	switch {
	case errors.Is(err, store.ErrTicketUsed):
		return with(errForbidden, "the ticket was already used: a ticket opens one connection; ask for a new one")
	case errors.Is(err, store.ErrTicketExpired):
		return with(errForbidden, "the ticket has expired: ask for a new one and use it at once")
	case errors.Is(err, store.ErrInvalidTicket):
		return with(errForbidden, "the ticket is unknown (mistyped, or its VM is gone)")
	}
	return err
}

// isWebSocketRequest: the request asks for a websocket upgrade.
func isWebSocketRequest(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// credentialKey names, in the gin context, the credential a ticket's
// websocket carries: "Authorization" or the session cookie's name.
const credentialKey = "gpuvm.credential"

// ticketCaller resolves the credentials a ticket's websocket carries, if
// any, for ticketOfCaller. A bearer token must be valid (401 otherwise,
// the ticket unused). A browser sends its cookies unasked: a live
// session's names its user; one of a session that has ended is no
// credential, and the ticket alone decides, as without one.
func (s *Server) ticketCaller(c *gin.Context) {
	if c.GetHeader("Authorization") != "" {
		c.Set(credentialKey, "Authorization")
		s.authenticate(c)
		return
	}
	if ck, err := c.Request.Cookie(api.SessionCookie); err == nil {
		_, u, err := s.Store.GetSession(c.Request.Context(), store.SessionCookie, ck.Value)
		switch {
		case err == nil && s.localAllowed(u):
			c.Set(userKey, u)
			c.Set(credentialKey, api.SessionCookie)
		case err != nil && !errors.Is(err, store.ErrNoSession):
			s.writeProblem(c, fmt.Errorf("check the session cookie of a ticket's websocket: %w", err))
			return
		}
	}
	c.Next()
}

// ticketOfCaller says whether a ticket may open for the request: always
// when the request carries no credentials (the ticket is the credential);
// otherwise only when they are its owner's. Another user's credentials
// are refused with 403 and the ticket is not spent. A ticket that is
// unknown, used or expired is left to ConsumeTicket to say so.
func (s *Server) ticketOfCaller(c *gin.Context, plain string) bool {
	v, ok := c.Get(userKey)
	if !ok {
		return true
	}
	u := v.(*store.User)
	t, err := s.Store.PeekTicket(c.Request.Context(), plain)
	if err != nil || t.User == u.Name {
		return true
	}
	s.log.Warn("ticket used with another user's credentials", "user", u.Name, "ticket_user", t.User, "vm", t.VMID)
	auditUser(c, u.Name)
	auditTarget(c, "vm/"+t.VMID)
	s.writeProblem(c, withField(errForbidden, c.GetString(credentialKey), "the ticket is another user's: with credentials, a ticket opens only for the user it was issued to (the ticket was not used)"))
	return false
}

// serveTicket is the websocket of a console or tunnel ticket of a protocol:
// it spends the ticket, connects to the VM's display or the guest's port,
// and only then accepts the websocket, so that every refusal is an HTTP
// problem.
func (s *Server) serveTicket(c *gin.Context, kind, proto string) {
	if !s.requireConsoles(c) {
		return
	}
	plain := c.Query("ticket")
	ask := "GET /v1/vms/{id}/console"
	if kind == store.TicketTunnel {
		ask = "POST /v1/vms/{id}/tunnel"
	}
	if plain == "" {
		s.writeProblem(c, withField(errUnauthenticated, "ticket", "send ?ticket=T with a ticket from "+ask+" (the ticket is the credential here, not a bearer token)"))
		return
	}
	if !isWebSocketRequest(c.Request) {
		s.writeProblem(c, with(errBadRequest, "this is a websocket endpoint: send a websocket upgrade (the ticket was not used)"))
		return
	}
	if !s.ticketOfCaller(c, plain) {
		return
	}
	if s.forwardTicket(c, plain) { // a VM on another node of the fleet (fleet.go)
		return
	}
	ctx := c.Request.Context()
	t, err := s.Store.ConsumeTicket(ctx, plain)
	if err != nil {
		s.writeProblem(c, ticketProblem(err))
		return
	}
	log := s.log.With("vm", t.VMID, "user", t.User, "kind", t.Kind)
	auditUser(c, t.User) // the ticket is the credential: its user acts
	auditTarget(c, "vm/"+t.VMID)
	if t.Kind != kind {
		s.writeProblem(c, with(errForbidden, fmt.Sprintf("this is a %s ticket; it does not open %s (the ticket is spent)", t.Kind, c.Request.URL.Path)))
		return
	}
	if t.Protocol != proto {
		s.writeProblem(c, with(errForbidden, fmt.Sprintf("this is a %s %s ticket; it opens %s, not %s (the ticket is spent)",
			strings.ToUpper(t.Protocol), t.Kind, tunnelPath(t.Protocol), c.Request.URL.Path)))
		return
	}
	if want := c.Query("vm"); want != "" && want != t.VMID {
		log.Warn("ticket used for another VM", "asked_vm", want)
		s.writeProblem(c, with(errForbidden, "the ticket is for another VM (the ticket is spent)"))
		return
	}
	vm, err := s.Store.GetVM(ctx, t.VMID)
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, with(errNotFound, "the ticket's VM is gone"))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	auditVM(c, vm)
	if t.Kind == store.TicketTunnel {
		auditDetail(c, "%s", portDetail(t.Port, t.Protocol))
	}
	if !s.requireRunning(c, vm) {
		return
	}
	o := s.Console.withDefaults()
	target, what, vncPassword, ok := s.openTarget(c, o, vm, t, log)
	if !ok {
		return
	}
	// VNC: gpuvmd answers the display's password itself, so that the
	// password never reaches the browser; the client sees no security.
	if vncPassword != nil {
		_ = target.SetDeadline(time.Now().Add(o.DialTimeout))
		_, err := rfb.Authenticate(target, *vncPassword)
		_ = target.SetDeadline(time.Time{})
		if err != nil {
			target.Close()
			log.Error("console: the display refused gpuvmd's handshake", "err", err)
			s.writeProblem(c, with(errBadGateway, fmt.Sprintf("%s refused gpuvmd's handshake: %v", what, err)))
			return
		}
	}
	// Recorded before it opens; not opened when it cannot be recorded.
	if !s.auditOpened(c) {
		target.Close()
		s.writeProblem(c, with(errUnavailable, "the audit log cannot record this connection, so it is refused; try again later (the ticket is spent)"))
		return
	}
	ws, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		// Accept has answered the client already.
		target.Close()
		log.Info("websocket upgrade failed", "err", err)
		c.Abort()
		return
	}
	c.Abort()
	ws.SetReadLimit(o.MaxMessage)
	p := &proxy{s: s, o: o, ws: ws, target: target, vmID: vm.ID, what: what, log: log}
	if t.Protocol == store.ProtocolUDP {
		ws.SetReadLimit(udpReadLimit)
		p.udp, p.idle = newUDPRelay(s.HTTP, t.Port, s.Metrics), s.HTTP.UDPIdleTimeout
	}
	if vncPassword != nil {
		hctx, cancel := context.WithTimeout(ctx, o.WriteTimeout)
		p.client = wsStream{ws: ws, ctx: hctx}
		err := rfb.ServeNoAuth(&p.client)
		cancel()
		if err != nil {
			log.Info("console: the client's handshake failed", "err", err)
			target.Close()
			ws.Close(websocket.StatusProtocolError, trimReason("VNC handshake: "+err.Error()))
			return
		}
	}
	p.run(ctx)
}

// openTarget connects to what a ticket opens: the VM's display (and says
// the VNC password to answer), or the ticket's port of its guest. It
// answers the request itself when it cannot.
func (s *Server) openTarget(c *gin.Context, o ConsoleOptions, vm *store.VM, t *store.ConsoleTicket, log *slog.Logger) (target net.Conn, what string, vncPassword *string, ok bool) {
	ctx := c.Request.Context()
	var addr string
	if t.Kind == store.TicketConsole {
		con, ok := s.liveConsole(c, vm)
		if !ok {
			return nil, "", nil, false
		}
		host := con.Host
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, strconv.Itoa(con.Port))
		what = fmt.Sprintf("the %s display of VM %s", con.Protocol, vm.Name)
		if con.Protocol == domain.GraphicsVNC {
			pw := con.Password
			if pw == "" {
				pw = vm.DisplayPassword
			}
			vncPassword = &pw
		}
	} else {
		ip, err := s.guestAddress(ctx, vm)
		if err != nil {
			s.writeProblem(c, err)
			return nil, "", nil, false
		}
		addr = net.JoinHostPort(ip.String(), strconv.Itoa(t.Port))
		what = fmt.Sprintf("%s of VM %s (%s)", portDetail(t.Port, t.Protocol), vm.Name, ip)
	}
	network := "tcp"
	if t.Protocol == store.ProtocolUDP {
		network = "udp" // a connected socket: only the guest's datagrams come back
	}
	target, err := s.dial(ctx, o, network, addr)
	if err != nil {
		log.Info("cannot connect to what the ticket opens", "addr", addr, "err", err)
		if t.Kind == store.TicketTunnel && errors.Is(err, syscall.ECONNREFUSED) {
			// The guest answered, and said no: not gpuvmd's failure.
			auditOutcome(c, store.AuditRefused)
			c.Set(guestRefusedKey, true)
			s.writeProblem(c, with(errGuestRefused, fmt.Sprintf("the guest refused the connection on %s: nothing listens there", what)))
			return nil, "", nil, false
		}
		s.writeProblem(c, with(errBadGateway, fmt.Sprintf("cannot connect to %s: %v", what, err)))
		return nil, "", nil, false
	}
	return target, what, vncPassword, true
}

func (s *Server) dial(ctx context.Context, o ConsoleOptions, network, addr string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	return o.Dial(dctx, network, addr)
}

// trimReason fits a websocket close reason in its 123 bytes.
func trimReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	return s[:120] + "..."
}

// wsStream is a websocket's binary messages as a stream: each Write is one
// message; what a handshake did not read of the client's is left in rest.
type wsStream struct {
	ws   *websocket.Conn
	ctx  context.Context
	rest []byte
}

func (r *wsStream) Write(p []byte) (int, error) {
	if err := r.ws.Write(r.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (r *wsStream) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		typ, data, err := r.ws.Read(r.ctx)
		if err != nil {
			return 0, err
		}
		if typ != websocket.MessageBinary {
			return 0, errTextMessage
		}
		r.rest = data
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

var errTextMessage = errors.New("the client sent a text message; the stream takes binary messages only")

// consolePage is the browser console of a VM: noVNC on the websocket proxy,
// opened with a console ticket in the query. The page only checks the
// ticket; its websocket spends it.
func (s *Server) consolePage(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("Content-Type", "text/html; charset=utf-8")
	p := web.Page{VMID: c.Param("id"), WebSocketPath: consoleWSPath, AssetBase: consoleAssets}
	fail := func(status int, heading, detail, hint string) {
		c.Status(status)
		if err := web.RenderError(c.Writer, p, heading, detail, hint); err != nil {
			s.log.Error("console page", "err", err)
		}
	}
	again := "Run 'gpuvm console VM' (or GET /v1/vms/{id}/console) for a new link: a link works once, within a minute."
	ticket := c.Query("ticket")
	if ticket == "" {
		fail(http.StatusUnauthorized, "This console link has no ticket", "The page needs the one-time ticket that gpuvm gives with the link.", again)
		return
	}
	t, err := s.Store.PeekTicket(c.Request.Context(), ticket)
	switch {
	case errors.Is(err, store.ErrTicketUsed):
		fail(http.StatusForbidden, "This console link was used already", "A link opens one connection.", again)
		return
	case errors.Is(err, store.ErrTicketExpired):
		fail(http.StatusForbidden, "This console link has expired", "A link must be opened within a minute of being made.", again)
		return
	case errors.Is(err, store.ErrInvalidTicket):
		fail(http.StatusForbidden, "This console link is not valid", "Its ticket is unknown: mistyped, or its VM is gone.", again)
		return
	case err != nil:
		s.log.Error("console page: check ticket", "err", err)
		fail(http.StatusInternalServerError, "The console cannot open", "gpuvmd could not check the link; the error was logged.", "")
		return
	case t.Kind != store.TicketConsole || t.VMID != p.VMID:
		fail(http.StatusForbidden, "This console link is not valid", "Its ticket is not for this VM's console.", again)
		return
	}
	vm, err := s.Store.GetVM(c.Request.Context(), t.VMID)
	if err != nil {
		s.log.Error("console page: get vm", "vm", t.VMID, "err", err)
		fail(http.StatusInternalServerError, "The console cannot open", "gpuvmd could not read the VM; the error was logged.", "")
		return
	}
	p.VMName, p.Ticket = vm.Name, ticket
	if web.NoVNC() == "" {
		c.Status(http.StatusServiceUnavailable)
	} else {
		c.Status(http.StatusOK)
	}
	if _, err := web.RenderConsole(c.Writer, p); err != nil {
		s.log.Error("console page", "err", err)
	}
}

// consoleAPIRoutes document the console and tunnel routes for the OpenAPI
// document (apiRoutes).
var consoleAPIRoutes = []route{
	{Method: "GET", Path: "/v1/vms/{id}/console", Summary: "A one-time ticket (valid a minute) to a running VM's display, and the ways in: gpuvmd's websocket, the virt-viewer file, the browser console; admins also get where the display listens. desktop says how the profile's desktop is reached (the display, or RDP, Sunshine or DCV in the guest through tunnels); gpu_display and notes say whether the display shows the GPU",
		Auth: authUser, Params: []param{pVM}, Status: 200, Answer: api.ConsoleResponse{}, Errors: []int{404, 409, 503}},
	{Method: "GET", Path: "/v1/vms/{id}/console.vv", Summary: "The virt-viewer connection file of a running VM's display: type, host, port, password, title, delete-this-file",
		Auth: authUser, Params: []param{pVM}, Status: 200, Answer: "", ContentType: api.VVContentType, Errors: []int{404, 409, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/tunnel", Summary: "A one-time ticket (valid a minute) to a TCP or UDP port (protocol, default tcp) of a running VM's guest, and its websocket URL",
		Auth: authUser, Params: []param{pVM}, Body: api.TunnelRequest{}, Status: 200, Answer: api.TunnelResponse{}, Errors: []int{400, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: consoleWSPath, Summary: "Websocket (binary messages) to the display of the ticket's VM; for VNC gpuvmd answers the display's password and offers the client security type None. It closes, with a reason, when idle, at its time limit, when the client stalls, when the VM stops",
		Auth: authTicket, Params: []param{pTicketVM}, Status: http.StatusSwitchingProtocols, Errors: []int{400, 404, 409, 502, 503}},
	{Method: "GET", Path: tunnelWSPath, Summary: "Websocket (binary messages) to the ticket's TCP port of its VM's guest, at the guest's address from libvirt; closes as the console's does. A port the guest refuses (nothing listens there) is 502 of type guest-refused, audited as refused",
		Auth: authTicket, Params: []param{pTicketVM}, Status: http.StatusSwitchingProtocols, Errors: []int{400, 404, 409, 502, 503}},
	{Method: "GET", Path: tunnelUDPWSPath, Summary: "Websocket to the ticket's UDP port of its VM's guest: each binary message is one datagram, whole, either way. Datagrams over the size or rate caps (server.http udp_*) are dropped and counted; it closes when the guest's port is unreachable (ICMP), when idle, and as the console's does",
		Auth: authTicket, Params: []param{pTicketVM}, Status: http.StatusSwitchingProtocols, Errors: []int{400, 404, 409, 502, 503}},
	{Method: "GET", Path: consolePageURL + "{id}", Summary: "The browser console of a VM (HTML, noVNC); the page checks its console ticket and its websocket spends it. Refusals are HTML pages too",
		Auth: authTicket, Params: []param{{Name: "id", In: "path", Description: "the VM's ID", Type: "string"}}, Status: 200, Answer: "", ContentType: "text/html"},
	{Method: "GET", Path: consoleAssets + "/{filepath}", Summary: "The browser console's script, style and noVNC (static/…, novnc/…)",
		Auth: authNone, Params: []param{{Name: "filepath", In: "path", Description: "static/console.js, novnc/core/rfb.js, …", Type: "string"}}, Status: 200, Answer: "", ContentType: "text/javascript", Errors: p404},
}

// pTicketVM names the VM a websocket's ticket must be for.
var pTicketVM = param{Name: "vm", In: "query", Description: "the VM's ID: when given, a ticket for another VM is refused", Type: "string"}
