package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The audit log: every state-changing request and every console or tunnel
// opened is recorded in the store's append-only audit_log — who (user and
// token ID, never the token), from where, what (an action of auditRoutes),
// on what, with which outcome and status, a short detail (the problem's
// detail when refused or failed; never a body nor a secret), and the
// request ID. One middleware (auditRequests) writes the entry after the
// handler, from the route's entry in auditRoutes; handlers only refine it
// (the VM they resolved, the ID of what they made).
//
// A write that fails does not fail the request. The change was made before
// its entry is written (the handler ran), and answering 500 for it would
// tell the client that it was not, inviting a retry of what is done. The
// entry is logged at error with every field instead — so it is in the
// journal — and counted (gpuvm_audit_write_failures_total, and
// AuditWriteFailures). Consoles and tunnels differ: their entry is written
// before the websocket is accepted, and when it cannot be written the
// connection is refused (503): no one reaches a VM's display or guest
// without a trace.
//
// On a node of a fleet, a console or tunnel request that is proxied to the
// VM's node is recorded by that node (which answers it), not by the one
// that proxied it; the entry's source then says for whom the proxy asked.

// auditRoute is how the requests of one route are recorded.
type auditRoute struct {
	// Action names what the request does: "<kind>.<verb>".
	Action string
	// Target is the entry's target, with the route's path parameters
	// ("vm/{id}"); handlers may refine it. "": none until the handler
	// says (what a POST creates).
	Target string
}

// auditRoutes is every route that is recorded, by method and path as the
// OpenAPI document writes them. Every route but GET (and the GETs that
// issue console tickets, open consoles and tunnels, or finish an OpenID
// sign-in) must be here:
// TestAuditCoversStateChangingRoutes fails otherwise.
var auditRoutes = map[string]auditRoute{
	"POST /v1/vms":                               {"vm.create", ""},
	"DELETE /v1/vms/{id}":                        {"vm.delete", "vm/{id}"},
	"POST /v1/tasks":                             {"task.submit", ""},
	"POST /v1/tasks/{id}/cancel":                 {"task.cancel", "task/{id}"},
	"POST /v1/vms/{id}/actions/start":            {"vm.start", "vm/{id}"},
	"POST /v1/vms/{id}/actions/stop":             {"vm.stop", "vm/{id}"},
	"POST /v1/vms/{id}/snapshots":                {"vm.snapshot", "vm/{id}"},
	"POST /v1/vms/{id}/snapshots/{snap}/restore": {"snapshot.restore", "vm/{id}/snapshot/{snap}"},
	"DELETE /v1/vms/{id}/snapshots/{snap}":       {"snapshot.delete", "vm/{id}/snapshot/{snap}"},
	"POST /v1/vms/{id}/actions/reboot":           {"vm.reboot", "vm/{id}"},
	"POST /v1/vms/{id}/actions/resize":           {"vm.resize", "vm/{id}"},
	// Data disks (volumes.go); a GET of another person's is an admin
	// override, recorded too.
	"POST /v1/volumes":                     {"volume.create", ""},
	"GET /v1/volumes/{id}":                 {"volume.read", "volume/{id}"},
	"DELETE /v1/volumes/{id}":              {"volume.delete", "volume/{id}"},
	"POST /v1/volumes/{id}/actions/resize": {"volume.resize", "volume/{id}"},
	"POST /v1/volumes/{id}/actions/attach": {"volume.attach", "volume/{id}"},
	"POST /v1/volumes/{id}/actions/detach": {"volume.detach", "volume/{id}"},
	"POST /v1/vms/{id}/actions/extend":     {"vm.extend", "vm/{id}"},
	"DELETE /v1/homes/{user}":              {"home.delete", "home/{user}"},
	"GET /v1/vms/{id}/console":             {"console.ticket", "vm/{id}"},
	"GET /v1/vms/{id}/console.vv":          {"console.file", "vm/{id}"},
	"POST /v1/vms/{id}/tunnel":             {"tunnel.ticket", "vm/{id}"},
	"POST /v1/vms/{id}/credentials":        {"vm.credentials", "vm/{id}"},
	"GET /v1/console/ws":                   {"console.open", ""},
	"GET /v1/tunnel/ws":                    {"tunnel.open", ""},
	"GET /v1/tunnel/udp/ws":                {"udptunnel.open", ""},
	"POST /v1/users":                       {"user.create", ""},
	"POST /v1/login":                       {"auth.login", ""},
	"POST /v1/logout":                      {"auth.logout", ""},
	"GET /v1/auth/oidc/callback":           {"auth.sso", ""},
	"POST /v1/auth/oidc/device":            {"auth.device", ""},
	"POST /v1/auth/oidc/device/poll":       {"auth.devicelogin", ""},
	"POST /v1/auth/oidc/token":             {"auth.ssologin", ""},
	"POST /v1/users/{name}/tokens":         {"token.create", "user/{name}"},
	"DELETE /v1/users/{name}/tokens/{id}":  {"token.revoke", "user/{name}/token/{id}"},
	"PUT /v1/users/{name}/ssh-keys":        {"user.setkeys", "user/{name}"},
	"POST /v1/reservations":                {"reservation.create", ""},
	"DELETE /v1/reservations/{id}":         {"reservation.delete", "reservation/{id}"},
	"POST /v1/admin/gpus/{addr}/drain":     {"gpu.drain", "gpu/{addr}"},
	"POST /v1/admin/driver-changes":        {"driver.announce", "driver-changes"},
	"DELETE /v1/admin/driver-changes/{id}": {"driver.withdraw", "driver-change/{id}"},
	"DELETE /v1/admin/gpus/{addr}/drain":   {"gpu.undrain", "gpu/{addr}"},
	"POST /v1/admin/hosts/{name}/drain":    {"host.drain", "host/{name}"},
	"DELETE /v1/admin/hosts/{name}/drain":  {"host.undrain", "host/{name}"},
	"POST /v1/admin/reload":                {"config.reload", "config"},
	// The orphan decisions of the reconciler's admin routes (orphans.go).
	"DELETE /v1/admin/orphans/{id}":     {"orphan.delete", "orphan/{id}"},
	"POST /v1/admin/orphans/{id}/adopt": {"orphan.adopt", "orphan/{id}"},
	"POST /v1/admin/volumes/adopt":      {"volume.adopt", ""},
	// The stored disk images (images.go).
	"POST /v1/admin/images":                  {"image.import", ""},
	"POST /v1/admin/images/publish":          {"image.publish", ""},
	"DELETE /v1/admin/images/{ref}":          {"image.delete", "image/{ref}"},
	"PUT /v1/admin/images/uploads/{name}":    {"image.upload", "upload/{name}"},
	"DELETE /v1/admin/images/uploads/{name}": {"image.discard", "upload/{name}"},
	"POST /v1/admin/images/windows-install":  {"image.install", ""},
	// The web portal's sign-in and sign-out (portal.go).
	"POST /v1/session":   {"session.create", ""},
	"DELETE /v1/session": {"session.delete", ""},
}

// stateChanging says whether requests of a method change state: all but
// GET, HEAD and OPTIONS.
func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// ginPathParam is a parameter of a route as gin writes it (":id", "*path").
var ginPathParam = regexp.MustCompile(`[:*]([A-Za-z_]+)`)

// auditTable keys auditRoutes by gin's method and route template, for the
// routes the engine serves.
func (s *Server) auditTable() map[string]auditRoute {
	out := map[string]auditRoute{}
	for _, r := range s.engine.Routes() {
		if a, ok := auditRoutes[r.Method+" "+ginPathParam.ReplaceAllString(r.Path, "{$1}")]; ok {
			out[r.Method+" "+r.Path] = a
		}
	}
	return out
}

// Keys of the gin context.
const (
	auditKey     = "gpuvm.audit"
	tokenKey     = "gpuvm.token"
	problemKey   = "gpuvm.problem"
	requestIDKey = "gpuvm.request_id"
	// auditReasonKey says why a request was refused, for the audit log
	// only (a sign-in's refusal answers the same whatever the reason).
	auditReasonKey = "gpuvm.audit_reason"
	// auditOutcomeKey overrides the outcome the status would give: a
	// tunnel the guest refused is answered 502, yet is a refusal.
	auditOutcomeKey = "gpuvm.audit_outcome"
)

// Bounds of what an entry keeps of what a client sent.
const (
	maxAuditTarget = 200
	maxAuditDetail = 300
	maxAuditSource = 200
)

// auditRecord is the entry of a request being handled.
type auditRecord struct {
	entry store.AuditEntry
	// done: written already (a console or tunnel, when it opened).
	done bool
	// forwarded: the request was proxied to another node, which records
	// it.
	forwarded bool
}

// auditRequests records the requests of the routes of auditRoutes after
// their handlers (see the top of this file).
func (s *Server) auditRequests(c *gin.Context) {
	a, ok := s.audited[c.Request.Method+" "+c.FullPath()]
	if !ok {
		c.Next()
		return
	}
	rec := &auditRecord{entry: store.AuditEntry{
		Action:    a.Action,
		Target:    clip(expandTarget(a.Target, c), maxAuditTarget),
		Source:    auditSource(c.Request),
		RequestID: c.GetString(requestIDKey),
	}}
	c.Set(auditKey, rec)
	defer func() {
		if p := recover(); p != nil {
			// gin.Recovery, outside, answers 500.
			s.finishAudit(c, rec, http.StatusInternalServerError)
			panic(p)
		}
	}()
	c.Next()
	s.finishAudit(c, rec, c.Writer.Status())
}

var targetParam = regexp.MustCompile(`\{([A-Za-z_]+)\}`)

// expandTarget fills a target's {param}s from the request's path.
func expandTarget(tmpl string, c *gin.Context) string {
	return targetParam.ReplaceAllStringFunc(tmpl, func(m string) string {
		return c.Param(m[1 : len(m)-1])
	})
}

// auditSource is where a request came from: the peer's address, and what a
// proxy in front (or another node of the fleet) says the client was. The
// latter is the client's word, kept as such, never in place of the peer.
func auditSource(r *http.Request) string {
	src := r.RemoteAddr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		src = host
	}
	if xff := strings.TrimSpace(r.Header.Get("X-Forwarded-For")); xff != "" {
		src += " (forwarded for " + clip(xff, 100) + ")"
	}
	return clip(src, maxAuditSource)
}

// clip makes text fit an entry: control characters become spaces, and it
// is cut at n bytes (on a rune boundary).
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func auditOf(c *gin.Context) *auditRecord {
	v, ok := c.Get(auditKey)
	if !ok {
		return nil
	}
	return v.(*auditRecord)
}

// auditVM says which VM the request acts on (requests that are not
// recorded ignore it).
func auditVM(c *gin.Context, vm *store.VM) {
	if rec := auditOf(c); rec != nil {
		rec.entry.VMID, rec.entry.Target = vm.ID, vmTarget(vm)
	}
}

// vmTarget is a VM's audit target: vm/OWNER/NAME.
func vmTarget(vm *store.VM) string { return clip("vm/"+vm.Owner+"/"+vm.Name, maxAuditTarget) }

// auditTarget sets the request's target (what a POST made).
func auditTarget(c *gin.Context, target string) {
	if rec := auditOf(c); rec != nil {
		rec.entry.Target = clip(target, maxAuditTarget)
	}
}

// auditDetail sets the detail of a request that succeeds: a few words on
// what it did, never a secret.
func auditDetail(c *gin.Context, format string, args ...any) {
	if rec := auditOf(c); rec != nil {
		rec.entry.Detail = clip(fmt.Sprintf(format, args...), maxAuditDetail)
	}
}

// auditUser names who acts when no bearer token says so: the user of a
// console or tunnel ticket.
func auditUser(c *gin.Context, name string) {
	if rec := auditOf(c); rec != nil {
		rec.entry.User = name
	}
}

// auditReason says why a request was refused, in its audit entry only.
func auditReason(c *gin.Context, reason string) { c.Set(auditReasonKey, reason) }

// auditOutcome records the outcome of a request whose status says another
// (store.AuditRefused for a guest's refusal answered 502).
func auditOutcome(c *gin.Context, outcome string) { c.Set(auditOutcomeKey, outcome) }

// auditForwarded marks the request proxied to another node (fleet.go),
// which records it; forwarded false undoes it when the proxying failed.
func auditForwarded(c *gin.Context, forwarded bool) {
	if rec := auditOf(c); rec != nil {
		rec.forwarded = forwarded
	}
}

// auditOpened writes the entry of a console or tunnel about to open, with
// status 101 (Switching Protocols). false: it could not be written, and
// the caller must refuse the connection.
func (s *Server) auditOpened(c *gin.Context) bool {
	rec := auditOf(c)
	if rec == nil {
		return true
	}
	s.fillAudit(c, rec, http.StatusSwitchingProtocols)
	if !s.writeAudit(c.Request.Context(), &rec.entry) {
		return false
	}
	rec.done = true
	return true
}

// finishAudit writes the entry of a request that was answered with status.
func (s *Server) finishAudit(c *gin.Context, rec *auditRecord, status int) {
	if rec.done || rec.forwarded {
		return
	}
	s.fillAudit(c, rec, status)
	rec.done = true
	s.writeAudit(c.Request.Context(), &rec.entry)
}

// fillAudit completes an entry from what the handlers left: the caller,
// the outcome, the problem's detail.
func (s *Server) fillAudit(c *gin.Context, rec *auditRecord, status int) {
	e := &rec.entry
	if v, ok := c.Get(userKey); ok && e.User == "" {
		e.User = v.(*store.User).Name
	}
	if v, ok := c.Get(tokenKey); ok && v.(*store.APIToken) != nil {
		e.TokenID = v.(*store.APIToken).ID
	}
	e.Status = status
	switch {
	case status >= 500:
		e.Outcome = store.AuditFailed
	case status >= 400:
		e.Outcome = store.AuditRefused
	default:
		e.Outcome = store.AuditOK
	}
	if o := c.GetString(auditOutcomeKey); o != "" {
		e.Outcome = o
	}
	if status >= 400 {
		e.Detail = ""
		if v, ok := c.Get(problemKey); ok {
			p := v.(*Problem)
			d := p.Detail
			if p.Field != "" {
				d = p.Field + ": " + d
			}
			e.Detail = clip(d, maxAuditDetail)
		}
		if r := c.GetString(auditReasonKey); r != "" {
			e.Detail = clip(e.Detail+" ("+r+")", maxAuditDetail)
		}
	}
}

// auditWriteTimeout bounds the write of one entry; it is made even when
// the client has gone.
const auditWriteTimeout = 10 * time.Second

// writeAudit stores an entry, and logs it when the configuration asks
// (server.audit.log). It reports whether the entry was stored; a failure is
// auditCreated is the audit entry of a create that succeeds (202), for
// the transaction that makes vm (store.CreateVMOptions.Audit); nil when
// the request is not audited. A create that fails is audited after it,
// as any request.
func (s *Server) auditCreated(c *gin.Context, vm *store.VM) *store.AuditEntry {
	rec := auditOf(c)
	if rec == nil || rec.done || rec.forwarded {
		return nil
	}
	ok := *rec // the request's own is left for a create that fails
	ok.entry.VMID, ok.entry.Target = vm.ID, vmTarget(vm)
	ok.entry.Detail = clip(fmt.Sprintf("profile %s, %d hours", vm.Profile, vm.Hours), maxAuditDetail)
	s.fillAudit(c, &ok, http.StatusAccepted)
	return &ok.entry
}

// auditWritten records that e, the request's entry, was stored with what
// it audits: logged (server.audit.log), not written again.
func (s *Server) auditWritten(c *gin.Context, e *store.AuditEntry) {
	rec := auditOf(c)
	if rec == nil {
		return
	}
	rec.entry, rec.done = *e, true
	if s.auditSettings().Log {
		s.auditLog.LogAttrs(c.Request.Context(), slog.LevelInfo, "audit", auditAttrs(e)...)
	}
}

// logged at error with the whole entry and counted.
func (s *Server) writeAudit(ctx context.Context, e *store.AuditEntry) bool {
	if s.auditSettings().Log {
		s.auditLog.LogAttrs(ctx, slog.LevelInfo, "audit", auditAttrs(e)...)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if err := s.Store.AppendAudit(ctx, e); err != nil {
		s.auditFailures.Add(1)
		if s.Metrics != nil {
			s.Metrics.ObserveAuditFailure(e.Action)
		}
		s.auditLog.LogAttrs(ctx, slog.LevelError, "AUDIT ENTRY NOT WRITTEN: the audit log misses this entry",
			append(auditAttrs(e), slog.Any("err", err))...)
		return false
	}
	return true
}

func auditAttrs(e *store.AuditEntry) []slog.Attr {
	return []slog.Attr{
		slog.String("action", e.Action), slog.String("outcome", e.Outcome), slog.Int("status", e.Status),
		slog.String("user", e.User), slog.Int64("token_id", e.TokenID), slog.String("source", e.Source),
		slog.String("target", e.Target), slog.String("vm", e.VMID), slog.String("detail", e.Detail),
		slog.String("request_id", e.RequestID),
	}
}

// RecordAudit writes the entry of a change made outside the API (gpuvmd's
// reload on SIGHUP) as the API's own are written: in the log too when
// server.audit.log says so, a failure logged at error and counted. It
// reports whether the entry was stored.
func (s *Server) RecordAudit(ctx context.Context, e *store.AuditEntry) bool {
	e.Detail = clip(e.Detail, maxAuditDetail)
	return s.writeAudit(ctx, e)
}

// AuditWriteFailures counts the audit entries that could not be written
// since the server started.
func (s *Server) AuditWriteFailures() int64 { return s.auditFailures.Load() }

// requestIDHeader carries a request's ID: the client's, when it sends a
// sane one, else one gpuvmd makes; the answer always has it.
const requestIDHeader = "X-Request-ID"

// requestIDPattern is a request ID gpuvmd takes from a client: what
// proxies and tracing systems make (UUIDs, hex, base64url), nothing that
// could disguise a log line.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}$`)

// requestID gives every request its ID, in the answer's header and in the
// request's header (so that a node of the fleet proxying it passes it on).
func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader(requestIDHeader)
	if !requestIDPattern.MatchString(id) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		c.Request.Header.Set(requestIDHeader, id)
	}
	c.Set(requestIDKey, id)
	c.Header(requestIDHeader, id)
	c.Next()
}

// auditSettings is server.audit of the configuration in force (defaults
// without a configuration).
func (s *Server) auditSettings() config.Audit {
	if s.Config != nil {
		if cfg := s.Config.Load(); cfg != nil {
			return cfg.Server.Audit
		}
	}
	return config.Audit{Retention: config.DefaultAuditRetention, Log: config.DefaultAuditLog}
}

// Page size of the audit routes.
const (
	defaultAuditPage = 100
	maxAuditPage     = 500
)

// auditTimeMin and auditTimeMax bound the from and to of the audit routes.
var (
	auditTimeMin = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	auditTimeMax = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// auditOtherActions are recorded by no route: a directory's sync
// (ReportDirectoryChanges, login.go).
var auditOtherActions = []string{"user.disable", "user.enable"}

// auditActions are the actions of auditRoutes and auditOtherActions, and
// their kinds ("vm.").
func auditActions() (actions, kinds []string) {
	for _, a := range auditRoutes {
		actions = append(actions, a.Action)
	}
	actions = append(actions, auditOtherActions...)
	for _, a := range actions {
		kind, _, _ := strings.Cut(a, ".")
		kinds = append(kinds, kind+".")
	}
	slices.Sort(actions)
	slices.Sort(kinds)
	return slices.Compact(actions), slices.Compact(kinds)
}

// listAllAudit serves GET /v1/admin/audit (admins): every entry.
func (s *Server) listAllAudit(c *gin.Context) { s.listAudit(c, false) }

// listOwnAudit serves GET /v1/audit: the caller's own entries.
func (s *Server) listOwnAudit(c *gin.Context) { s.listAudit(c, true) }

// listAudit answers a page of audit entries, newest first, filtered by the
// query (user, vm, action, from, to) and paged by limit and after; own:
// only the caller's.
func (s *Server) listAudit(c *gin.Context, own bool) {
	f, ok := s.auditFilter(c, own)
	if !ok {
		return
	}
	es, next, err := s.Store.ListAudit(c.Request.Context(), f)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.AuditList{Items: make([]api.AuditEntry, 0, len(es))}
	if next != 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	for _, e := range es {
		out.Items = append(out.Items, api.AuditEntry{ID: e.ID, Time: e.CreatedAt, User: e.User, TokenID: e.TokenID,
			Source: e.Source, Action: e.Action, Target: e.Target, VMID: e.VMID, Outcome: e.Outcome, Status: e.Status,
			Detail: say(c, e.Detail), RequestID: e.RequestID})
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, out)
}

// auditFilter reads and range-checks the query of the audit routes,
// answering 400 naming the parameter when one is wrong.
func (s *Server) auditFilter(c *gin.Context, own bool) (store.AuditFilter, bool) {
	bad := func(field, format string, args ...any) (store.AuditFilter, bool) {
		s.writeProblem(c, withField(errBadRequest, field, fmt.Sprintf(format, args...)))
		return store.AuditFilter{}, false
	}
	f := store.AuditFilter{Limit: defaultAuditPage}
	if v, ok := c.GetQuery("user"); ok {
		if !userName.MatchString(v) {
			return bad("user", "%q is not a user name: lower-case letters, digits and dashes, starting with a letter, at most 63 characters", clip(v, 80))
		}
		f.User = v
	}
	if own {
		me := user(c).Name
		if f.User != "" && f.User != me {
			s.writeProblem(c, withField(errForbidden, "user", "GET /v1/audit lists your own entries; an admin reads everyone's at GET /v1/admin/audit"))
			return store.AuditFilter{}, false
		}
		f.User = me
	}
	if v, ok := c.GetQuery("vm"); ok {
		if v == "" || len(v) > 200 || strings.ContainsFunc(v, unicode.IsControl) {
			return bad("vm", "vm is a VM's ID or name, 1 to 200 characters")
		}
		id, err := s.auditVMRef(c, v)
		if err != nil {
			s.writeProblem(c, err)
			return store.AuditFilter{}, false
		}
		f.VMID = id
	}
	if v, ok := c.GetQuery("action"); ok {
		actions, kinds := auditActions()
		if !slices.Contains(actions, v) && !slices.Contains(kinds, v) {
			return bad("action", "unknown action %q: give an action (%s) or a kind ending in a dot for all its actions (%s)",
				clip(v, 80), strings.Join(actions, ", "), strings.Join(kinds, ", "))
		}
		f.Action = v
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		v, ok := c.GetQuery(p.name)
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return bad(p.name, "%s is an RFC 3339 time (2026-03-01T09:00:00Z), not %q", p.name, clip(v, 80))
		}
		if t.Before(auditTimeMin) || t.After(auditTimeMax) {
			return bad(p.name, "%s is a time from %d to %d", p.name, auditTimeMin.Year(), auditTimeMax.Year())
		}
		*p.dst = t
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.To.After(f.From) {
		return bad("to", "to (%s) must be after from (%s)", f.To.Format(time.RFC3339), f.From.Format(time.RFC3339))
	}
	if v, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditPage {
			return bad("limit", "limit is a number from 1 to %d", maxAuditPage)
		}
		f.Limit = n
	}
	if v, ok := c.GetQuery("after"); ok {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 1 {
			return bad("after", "the cursor is not one this server gave")
		}
		f.After = id
	}
	return f, true
}

// auditVMRef is the VM ID a vm filter names: a VM's ID, else the name of
// one of the caller's live VMs, else the text itself (the ID of a VM whose
// row is gone). The entries listed are the caller's own unless an admin
// asks, so naming another user's VM reveals nothing.
func (s *Server) auditVMRef(c *gin.Context, ref string) (string, error) {
	ctx := c.Request.Context()
	vm, err := s.Store.GetVM(ctx, ref)
	if err == nil {
		return vm.ID, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	vm, err = s.Store.GetVMByName(ctx, user(c).Name, ref)
	if err == nil {
		return vm.ID, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	return ref, nil
}
