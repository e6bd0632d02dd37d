package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/usage"
)

// Authenticator resolves a bearer token to a user.
type Authenticator interface {
	AuthenticateToken(ctx context.Context, plain string) (*store.User, *store.APIToken, error)
}

// Backends gives the running GPU backends.
type Backends interface {
	Names() []string
	Backend(name string) (backend.Backend, bool)
}

// Config is the configuration in force, and its reload.
type Config interface {
	Load() *config.Config
	// Reload replaces the configuration with the files' current content,
	// all or nothing; diagnostics is the rendered text of every diagnostic.
	Reload() (diagnostics string, err error)
}

// DiagnosedConfig is a Config whose reload also gives its diagnostics one
// by one, with their places (the answers' config_diagnostics); a Config
// without it answers with the rendered text only.
type DiagnosedConfig interface {
	ReloadDiagnosed() (text string, diags []api.ConfigDiagnostic, err error)
}

// Deps are what the server needs.
type Deps struct {
	Auth Authenticator
	// SignIn checks passwords with a directory for POST /v1/login
	// (pkg/auth/ldap); nil: password sign-in is not configured (404).
	SignIn PasswordSignIn
	// OIDC is the OpenID provider's code flow for GET
	// /v1/auth/oidc/start and /callback (pkg/auth/oidc); nil: not
	// configured (404).
	OIDC     OIDCSignIn
	Backends Backends
	Config   Config // nil: gpuvmd runs without a configuration directory
	Log      *slog.Logger
	// Store holds VMs, operations, users and the rest (a *store.Store);
	// required.
	Store Store
	// Worker is told when there is new work (the orchestrator); may be nil.
	Worker Waker
	// Admission applies the sharing policy to new VMs (the orchestrator);
	// nil: every valid request is queued.
	Admission Admitter
	// Bookings books GPU capacity ahead (the orchestrator), and reads
	// the state the estimated starts replay; nil: POST /v1/reservations
	// answers 503 (reservations.go), and no queued VM has an estimate.
	Bookings Booker
	// EventPoll is how often the event stream looks for new events
	// other processes wrote (default 50ms; those of this process, when
	// Store is an EventNotifier, at once); EventKeepAlive how often an idle stream sends a
	// comment line (default 15s).
	EventPoll, EventKeepAlive time.Duration
	// Host names this server in the database (drained GPUs, hosts), as
	// the orchestrator's Host does; default: the hostname.
	Host string
	// Version is gpuvmd's, reported by /healthz.
	Version string
	// Consoles finds VMs' displays and guest addresses (the hypervisor);
	// nil: the console and tunnel routes answer 503, and GET
	// /v1/vms/{id} shows neither addresses nor console.
	Consoles Consoles
	// Console tunes the console and tunnel proxies (ticket lifetime,
	// timeouts); zero values take the defaults.
	Console ConsoleOptions
	// Metrics serves GET /metrics and counts requests (pkg/monitor); nil:
	// /metrics answers 503. MetricsAuth is MetricsAuthNone (the default)
	// or MetricsAuthToken.
	Metrics     MetricsExporter
	MetricsAuth string
	// Ledger answers usage questions (usage.go, report.go); nil: the
	// server makes one of Store.
	Ledger *usage.Ledger
	// Fleet, when set, makes this gpuvmd a node of a fleet (fleet.go):
	// the console and tunnel of a VM on another node are proxied to that
	// node's gpuvmd, and GET /v1/hosts says which node leads. nil: one
	// server. HostTimeout is how old a heartbeat may be before its host
	// is down (default config.DefaultHeartbeatTimeout).
	Fleet       Fleet
	HostTimeout time.Duration
	// HTTP bounds what one client may hold: timeouts and connections per
	// IP (limits.go); zero values take the defaults.
	HTTP HTTPLimits
	// Orphans lists, deletes and adopts what the reconciler found that
	// looks like gpuvm's but is not provably this installation's (the
	// orchestrator); nil: the orphan routes answer 503.
	Orphans Orphans
	// Images keeps the stored disk images (images.go); nil: its routes
	// answer 503.
	Images Images
	// Windows defines and starts unattended Windows installs
	// (windowsinstall.go); nil: its routes answer 503.
	Windows *WindowsInstalls
	// Availability says why a VM of a profile cannot be made on this
	// server now (its image, kernel or template missing; a
	// *images.Availability), in words with no server path; nil: nothing
	// is checked.
	Availability ProfileAvailability
	// Capabilities are this host's libvirt and QEMU versions and NVML's
	// answers, read once at start (pkg/capability): GET /v1/vms/{id} says
	// from them what the VM's state allows. nil: the answers say the
	// versions are not known.
	Capabilities *capability.Host
	// TaskLogs is the directory the task supervisor keeps tasks' output
	// in (pkg/task), read by GET /v1/tasks/{id}/logs; "": no output.
	TaskLogs string
	// Tasks is the task supervisor, woken when a task is submitted or
	// cancelled (it rounds slowly while no task lives); nil: none.
	Tasks Waker
	// Volumes makes, grows and deletes data disks (the orchestrator;
	// volumes.go); nil: creating, resizing and deleting one answer 503.
	Volumes Volumes
	// HomeUsage is the homes' usage as the home quotas last read it (the
	// orchestrator's HomeQuotas); nil: GET /v1/volumes shows a home
	// without figures.
	HomeUsage HomeUsage
}

// HomeUsage gives each home's used bytes, quota and enforcement, in
// memory (never read from disk on a request).
type HomeUsage interface {
	Usage() []api.VolumeUsage
}

// ProfileAvailability says why a VM of profile p of cfg cannot be made on
// this server now ("" when it can).
type ProfileAvailability interface {
	Unavailable(ctx context.Context, cfg *config.Config, p *config.Profile) string
}

// Waker is told that a VM operation was queued.
type Waker interface{ Wake() }

// LeaderWaker is a Waker that can wake the fleet's leader alone: what a
// new queued VM needs, since the leader places the whole queue
// (cmd/gpuvmd's fleet waker). A create that woke every node had each
// follower run a round for nothing, a couple of hundred a second while
// creates came at that rate (issue #26).
type LeaderWaker interface{ WakeLeader() }

// wakeQueue wakes what places a VM just queued: the fleet's leader alone
// where the Worker can (LeaderWaker), else the Worker.
func (s *Server) wakeQueue() {
	switch w := s.Worker.(type) {
	case LeaderWaker:
		w.WakeLeader()
	case nil:
	default:
		w.Wake()
	}
}

// Server is gpuvmd's HTTP API.
type Server struct {
	Deps
	log    *slog.Logger
	engine *gin.Engine

	hub            *eventHub
	unwatchEvents  func() // the store's OnEventCommitted, until Close
	eventKeepAlive time.Duration
	audited        map[string]auditRoute // audit.go: by gin's method and route template
	auditLog       *slog.Logger
	auditFailures  atomic.Int64
	done           chan struct{} // closed by Close: streams end
	closeOnce      sync.Once
	portal         *portal.Portal  // portal.go
	loginLimits    *loginLimits    // login.go
	loopbacks      loopbacks       // oidc.go
	estimates      *estimates      // estimatework.go
	unservable     unservableCache // profiles.go
	// ctx lasts until Close: the background work (the estimates) stops
	// with it.
	ctx    context.Context
	cancel context.CancelFunc
}

// New builds the API.
func New(d Deps) *Server {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Host == "" {
		d.Host = defaultHost()
	}
	gin.SetMode(gin.ReleaseMode)
	if d.EventPoll <= 0 {
		d.EventPoll = defaultEventPoll
	}
	if d.EventKeepAlive <= 0 {
		d.EventKeepAlive = defaultEventKeepAlive
	}
	d.HTTP = d.HTTP.withDefaults()
	if d.Store == nil {
		panic("server.New: Deps.Store is required")
	}
	if d.Ledger == nil {
		d.Ledger = usage.NewLedger(d.Store)
	}
	s := &Server{Deps: d, log: d.Log.With("component", "api"), engine: gin.New(),
		eventKeepAlive: d.EventKeepAlive, done: make(chan struct{}), auditLog: d.Log.With("component", "audit"),
		loginLimits: newLoginLimits(), estimates: newEstimates()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub = newEventHub(d.Store, d.EventPoll, s.log)
	if n, ok := d.Store.(EventNotifier); ok {
		s.unwatchEvents = n.OnEventCommitted(s.hub.nudge)
	}
	s.engine.Use(gin.Recovery(), s.requestID, s.logRequests, s.deadlines)
	if d.Metrics != nil {
		s.engine.Use(s.observeRequests) // metrics.go
	}
	s.engine.Use(s.auditRequests) // audit.go
	s.engine.Use(s.checkQuery)    // decode.go: a query that does not parse is refused
	s.engine.Use(s.kickOnWrite)   // estimatework.go: a write is looked for at once
	s.engine.NoRoute(s.noRoute)   // the portal's pages (portal.go), else 404
	// A path served for other methods: 405 with Allow (gin sets it).
	s.engine.HandleMethodNotAllowed = true
	s.engine.NoMethod(s.noMethod)
	s.routes()
	s.audited = s.auditTable()
	return s
}

// NudgeEvents makes the event streams read new events now: another
// process (a node of the fleet) says it committed some.
func (s *Server) NudgeEvents() { s.hub.nudge() }

// Close ends the streams that are open (server-sent events), so that an
// http.Server's Shutdown does not wait for them, and stops the background
// work (the estimates' worker), waiting for it. The server still answers
// other requests (with the last estimates computed).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.stopEstimates()
		if s.unwatchEvents != nil {
			s.unwatchEvents()
		}
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

func (s *Server) routes() {
	s.engine.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok", "version": s.Version}) })
	s.engine.GET("/readyz", s.readyz)
	s.engine.GET("/openapi.json", s.openAPI)
	s.engine.GET("/metrics", s.metrics) // metrics.go
	s.engine.POST("/v1/login", s.login) // login.go: before a token, for one
	s.engine.GET("/v1/auth/methods", s.authMethods)
	s.engine.GET("/v1/auth/oidc/start", s.oidcStart)
	s.engine.GET("/v1/auth/oidc/callback", s.oidcCallback)
	s.engine.POST("/v1/auth/oidc/device", s.oidcDevice)
	s.engine.POST("/v1/auth/oidc/device/poll", s.oidcDevicePoll)
	s.engine.POST("/v1/auth/oidc/token", s.oidcToken)
	v1 := s.engine.Group("/v1", s.authenticate)
	s.portalRoutes(v1) // portal.go: the web portal and its sessions
	v1.POST("/logout", s.logout)
	v1.GET("/profiles", s.listProfiles)
	v1.GET("/profiles/:name", s.getProfile)
	v1.GET("/profiles/:name/admission", s.profileAdmission) // profiles.go
	vms := v1.Group("")
	vms.POST("/vms", s.createVM)
	vms.GET("/vms", s.listVMs)
	vms.GET("/vms/:id", s.getVM)
	vms.DELETE("/vms/:id", s.deleteVM)
	vms.POST("/vms/:id/credentials", s.takeCredentials) // credentials.go: spends it
	vms.GET("/vms/:id/desktop.rdp", s.getDesktopRDP)
	s.actionRoutes(vms)   // actions.go
	s.snapshotRoutes(vms) // snapshots.go
	s.volumeRoutes(vms)   // volumes.go
	s.shareRoutes(vms)    // shares.go
	s.homeRoutes(vms)     // homes.go
	s.taskRoutes(vms)     // tasks.go
	vms.GET("/operations/:id", s.getOperation)
	vms.GET("/events", s.stream, s.events)
	s.consoleRoutes(vms) // console, console.vv, tunnel; their websockets and the browser page
	admin := v1.Group("", s.requireAdmin)
	admin.GET("/gpus", s.gpus)
	admin.POST("/admin/reload", s.reload)
	admin.GET("/users", s.listUsers)
	admin.POST("/users", s.createUser)
	admin.POST("/admin/gpus/:addr/drain", s.drainGPU)
	admin.DELETE("/admin/gpus/:addr/drain", s.undrainGPU)
	admin.POST("/admin/hosts/:name/drain", s.drainHost)     // fleet.go
	admin.DELETE("/admin/hosts/:name/drain", s.undrainHost) // fleet.go
	admin.GET("/alerts", s.listAlerts)                      // alerts.go
	s.orphanRoutes(admin)                                   // orphans.go
	s.imageRoutes(v1, admin)                                // images.go
	s.windowsRoutes(admin)                                  // windowsinstall.go
	s.driverChangeRoutes(admin)                             // driverchange.go
	v1.GET("/whoami", s.whoami)
	v1.GET("/usage", s.usage)                      // usage.go
	v1.GET("/usage/periods", s.usagePeriods)       // usage.go
	admin.GET("/reports/summary", s.reportSummary) // report.go
	admin.GET("/reports/summary.html", s.reportSummary)
	v1.GET("/hosts", s.listHosts)
	v1.GET("/rules", s.getRules)      // rules.go: the policy in plain language
	s.reservationRoutes(v1.Group("")) // reservations.go
	// audit.go: the audit log (admins), and the caller's own entries.
	admin.GET("/admin/audit", s.listAllAudit)
	v1.GET("/audit", s.listOwnAudit)
	// A user's own record and tokens: the user or an admin; to others
	// the user does not exist.
	self := v1.Group("/users/:name", s.requireSelfOrAdmin)
	self.GET("", s.getUser)
	self.GET("/tokens", s.listTokens)
	self.POST("/tokens", s.createToken)
	self.DELETE("/tokens/:id", s.revokeToken)
	self.GET("/ssh-keys", s.getSSHKeys) // profiles.go
	self.PUT("/ssh-keys", s.putSSHKeys)
}

func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	level := slog.LevelDebug
	switch {
	case c.GetBool(guestRefusedKey):
		level = slog.LevelInfo // the guest said no; gpuvmd did not fail
	case c.Writer.Status() >= 500:
		level = slog.LevelError
	}
	s.log.Log(c.Request.Context(), level, "request", "method", c.Request.Method, "path", c.Request.URL.Path,
		"status", c.Writer.Status(), "duration", time.Since(start), "request_id", c.GetString(requestIDKey))
}

const userKey = "gpuvm.user"

func (s *Server) authenticate(c *gin.Context) {
	if hasSession(c) { // the web portal's cookie (portal.go)
		s.authenticateSession(c)
		return
	}
	h := c.GetHeader("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		c.Header("WWW-Authenticate", `Bearer realm="gpuvm"`)
		s.writeProblem(c, with(errUnauthenticated, "send Authorization: Bearer <token>"))
		return
	}
	token = strings.TrimSpace(token)
	if strings.HasPrefix(token, store.SessionPrefix) && s.authenticateBearerSession(c, token) { // login.go
		return
	}
	u, tok, err := s.Auth.AuthenticateToken(c.Request.Context(), token)
	switch {
	case errors.Is(err, store.ErrInvalidToken) && strings.HasPrefix(token, store.TokenPrefix) && s.authenticateBearerSession(c, token):
		// A session token of a gpuvmd before sessions (schema 9).
		return
	case errors.Is(err, store.ErrInvalidToken):
		c.Header("WWW-Authenticate", `Bearer realm="gpuvm", error="invalid_token"`)
		s.writeProblem(c, with(errUnauthenticated, "the token is unknown, expired or revoked"))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	case !s.localAllowed(u):
		// server.auth.local.enabled = false: local users' tokens are
		// refused but for the break-glass admins'.
		c.Header("WWW-Authenticate", `Bearer realm="gpuvm", error="invalid_token"`)
		s.writeProblem(c, with(errUnauthenticated, "the token is unknown, expired or revoked"))
		return
	}
	c.Set(userKey, u)
	c.Set(tokenKey, tok) // its ID goes in the audit log
	c.Next()
}

func user(c *gin.Context) *store.User {
	u, _ := c.Get(userKey)
	return u.(*store.User)
}

func (s *Server) requireAdmin(c *gin.Context) {
	if !user(c).Admin {
		s.writeProblem(c, with(errForbidden, "this needs an admin"))
		return
	}
	c.Next()
}

func (s *Server) readyz(c *gin.Context) {
	status, code := map[string]string{}, http.StatusOK
	if s.Config != nil {
		cfg := s.Config.Load()
		status["config"] = cfgSummary(cfg)
	}
	for _, name := range s.Backends.Names() {
		b, _ := s.Backends.Backend(name)
		ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
		h, err := b.Health(ctx)
		cancel()
		switch {
		case err != nil:
			status[name], code = err.Error(), http.StatusServiceUnavailable
		case !h.OK:
			status[name] = "degraded: " + h.Detail
		default:
			status[name] = "ok"
		}
	}
	c.JSON(code, status)
}

func cfgSummary(cfg *config.Config) string {
	return fmt.Sprintf("%s: %d files, %d profiles", cfg.Dir, len(cfg.Files), len(cfg.Profiles))
}

func (s *Server) gpus(c *gin.Context) {
	collected, _ := CollectInventory(c.Request.Context(), s.Backends, s.log)
	hi := api.FromHost(collected)
	if !s.markDrained(c, &hi) {
		return
	}
	c.JSON(http.StatusOK, hi)
}

func (s *Server) reload(c *gin.Context) {
	var none struct{} // no body, or an empty object
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	if s.Config == nil {
		s.writeProblem(c, with(errUnavailable, "gpuvmd runs without a configuration directory (--config)"))
		return
	}
	var (
		diags  string
		listed []api.ConfigDiagnostic
		err    error
	)
	if dc, ok := s.Config.(DiagnosedConfig); ok {
		diags, listed, err = dc.ReloadDiagnosed()
	} else {
		diags, err = s.Config.Reload()
	}
	if err != nil {
		p := with(errInvalidConfig, err.Error())
		p.Diagnostics = diags
		p.ConfigDiagnostics = listed
		s.writeProblem(c, p)
		return
	}
	c.JSON(http.StatusOK, api.ReloadResult{Config: cfgSummary(s.Config.Load()), Diagnostics: diags, ConfigDiagnostics: listed})
}

// visibleProfiles are the profiles the caller may use; admins see all.
func (s *Server) visibleProfiles(c *gin.Context) []*config.Profile {
	if s.Config == nil {
		return nil
	}
	u := user(c)
	var out []*config.Profile
	for _, p := range s.Config.Load().SortedProfiles() {
		if u.Admin || p.Allows(u.Name, u.Groups) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) listProfiles(c *gin.Context) {
	views := s.profileViews(c, s.visibleProfiles(c))
	c.JSON(http.StatusOK, views)
}

func (s *Server) getProfile(c *gin.Context) {
	for _, p := range s.visibleProfiles(c) {
		if p.Name == c.Param("name") {
			views := s.profileViews(c, []*config.Profile{p}) // as the list says it
			c.JSON(http.StatusOK, views[0])
			return
		}
	}
	// Profiles the caller may not use are as absent as unknown ones.
	s.writeProblem(c, with(errNotFound, "no profile "+c.Param("name")))
}
