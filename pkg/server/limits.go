package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// A client may hold a connection, and the goroutine serving it, only so
// long: its headers within ReadHeaderTimeout, its body within BodyTimeout
// (a slow body is answered 408), the answer written within WriteTimeout,
// an idle keep-alive connection closed after IdleTimeout. The streams (GET
// /v1/events) and the websockets (console, tunnel) clear the body and
// write deadlines (stream), and end by their own rules: the event stream
// when the client leaves or the server closes, the websockets when idle,
// stalled or at their time limit (ConsoleOptions). No source IP holds more
// than MaxConnsPerIP connections at once (LimitListener): one more is
// closed as soon as it is accepted, without an answer, so that a client
// that opens connections and sends nothing costs nothing more.

// HTTPLimits bounds what one client may hold; zero values take the
// defaults (Default*). gpuvmd takes them from server { http { … } }.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConnsPerIP     int
	// The caps of one UDP tunnel, each direction on its own (udp.go):
	// the largest datagram in bytes, datagrams and bytes a second, and
	// how long it may forward nothing.
	UDPMaxDatagram        int
	UDPDatagramsPerSecond int
	UDPBytesPerSecond     int64
	UDPIdleTimeout        time.Duration
}

// Defaults of HTTPLimits: the server block's (pkg/config).
const (
	DefaultHTTPReadHeaderTimeout = config.DefaultReadHeaderTimeout
	DefaultHTTPBodyTimeout       = config.DefaultBodyTimeout
	DefaultHTTPWriteTimeout      = config.DefaultWriteTimeout
	DefaultHTTPIdleTimeout       = config.DefaultHTTPIdleTimeout
	DefaultHTTPMaxConnsPerIP     = config.DefaultMaxConnsPerIP
	DefaultUDPMaxDatagram        = config.DefaultUDPMaxDatagram
	DefaultUDPDatagramsPerSecond = config.DefaultUDPDatagramsPerSecond
	DefaultUDPBytesPerSecond     = config.DefaultUDPBytesPerSecond
	DefaultUDPIdleTimeout        = config.DefaultUDPIdleTimeout
)

// LimitsOf are the limits of a server block's http block.
func LimitsOf(h config.HTTP) HTTPLimits {
	return HTTPLimits{ReadHeaderTimeout: h.ReadHeaderTimeout, BodyTimeout: h.BodyTimeout, WriteTimeout: h.WriteTimeout,
		IdleTimeout: h.IdleTimeout, MaxConnsPerIP: h.MaxConnsPerIP,
		UDPMaxDatagram: h.UDPMaxDatagram, UDPDatagramsPerSecond: h.UDPDatagramsPerSecond, UDPBytesPerSecond: h.UDPBytesPerSecond, UDPIdleTimeout: h.UDPIdleTimeout}
}

// withDefaults fills in the zero values.
func (l HTTPLimits) withDefaults() HTTPLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultHTTPReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultHTTPBodyTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultHTTPWriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultHTTPIdleTimeout
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = DefaultHTTPMaxConnsPerIP
	}
	if l.UDPMaxDatagram <= 0 {
		l.UDPMaxDatagram = DefaultUDPMaxDatagram
	}
	l.UDPMaxDatagram = min(l.UDPMaxDatagram, config.MaxUDPDatagram)
	if l.UDPDatagramsPerSecond <= 0 {
		l.UDPDatagramsPerSecond = DefaultUDPDatagramsPerSecond
	}
	if l.UDPBytesPerSecond <= 0 {
		l.UDPBytesPerSecond = DefaultUDPBytesPerSecond
	}
	if l.UDPIdleTimeout <= 0 {
		l.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	return l
}

// HTTPServer is the http.Server to serve the API with: the header and idle
// timeouts of Deps.HTTP (the body and write deadlines are set per request,
// by route). Serve it on LimitListener.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: s.HTTP.ReadHeaderTimeout, IdleTimeout: s.HTTP.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
}

// LimitListener wraps ln: a source IP holds at most Deps.HTTP.MaxConnsPerIP
// of its connections at once, and one more is closed at once.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return LimitListener(ln, s.HTTP.MaxConnsPerIP, s.log)
}

// deadlines sets a request's body-read and write deadlines (ordinary
// routes); stream clears them for the routes that stream.
func (s *Server) deadlines(c *gin.Context) {
	rc := http.NewResponseController(c.Writer)
	now := time.Now()
	end := now.Add(s.HTTP.WriteTimeout)
	if err := rc.SetWriteDeadline(end); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.log.Warn("set the write deadline", "path", c.Request.URL.Path, "err", err)
	}
	// The read deadline covers the body; once it is read the connection
	// is only watched for the client leaving, until the answer's deadline
	// (a read deadline that passes then would cancel the request).
	bodyEnd := end
	if c.Request.Body != nil && c.Request.Body != http.NoBody {
		bodyEnd = now.Add(min(s.HTTP.BodyTimeout, s.HTTP.WriteTimeout))
		c.Request.Body = &deadlineBody{ReadCloser: c.Request.Body, done: func() { _ = rc.SetReadDeadline(end) }}
	}
	if err := rc.SetReadDeadline(bodyEnd); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.log.Warn("set the read deadline", "path", c.Request.URL.Path, "err", err)
	}
	c.Next()
}

// stream clears the deadlines deadlines set: the route streams, and ends by
// its own rules.
func (s *Server) stream(c *gin.Context) {
	rc := http.NewResponseController(c.Writer)
	for _, set := range []func(time.Time) error{rc.SetReadDeadline, rc.SetWriteDeadline} {
		if err := set(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.log.Warn("clear a stream's deadline", "path", c.Request.URL.Path, "err", err)
		}
	}
	c.Next()
}

// deadlineBody calls done once when its body has been read to its end (a
// body that failed keeps its passed deadline).
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.done)
	}
	return n, err
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errTimeout answers a body that did not come in time.
var errTimeout = &Problem{Type: ProblemBase + "timeout", Title: "The request took too long", Status: http.StatusRequestTimeout}

// LimitListener wraps ln so that a source IP holds at most perIP of its
// connections at once (perIP <= 0: DefaultHTTPMaxConnsPerIP); one more is
// closed as soon as it is accepted. Refusals are logged at most once a
// minute per IP.
func LimitListener(ln net.Listener, perIP int, log *slog.Logger) net.Listener {
	if perIP <= 0 {
		perIP = DefaultHTTPMaxConnsPerIP
	}
	if log == nil {
		log = slog.Default()
	}
	return &ipLimitListener{Listener: ln, max: perIP, log: log, open: map[string]int{}, warned: map[string]time.Time{}}
}

type ipLimitListener struct {
	net.Listener
	max    int
	log    *slog.Logger
	mu     sync.Mutex
	open   map[string]int
	warned map[string]time.Time
}

func (l *ipLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := sourceIP(c.RemoteAddr())
		l.mu.Lock()
		if l.open[ip] >= l.max {
			warn := time.Since(l.warned[ip]) > time.Minute
			if warn {
				l.warned[ip] = time.Now()
			}
			l.mu.Unlock()
			_ = c.Close()
			if warn {
				l.log.Warn("connection refused: too many from one address", "remote", ip, "max_conns_per_ip", l.max)
			}
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: sync.OnceFunc(func() { l.release(ip) })}, nil
	}
}

func (l *ipLimitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
		delete(l.warned, ip)
	}
}

// held is how many connections ip holds (tests).
func (l *ipLimitListener) held(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

// countedConn gives its place back when closed (by the server, or by a
// websocket that hijacked it).
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	defer c.release()
	return c.Conn.Close()
}

// sourceIP is the IP of a remote address (the address itself when it has
// no port).
func sourceIP(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
