package server

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// MetricsExporter serves the Prometheus metrics and counts the API's
// requests (a *monitor.Exporter).
type MetricsExporter interface {
	http.Handler
	// ObserveRequest counts a request; route is gin's route template
	// ("/v1/vms/:id"), "" when no route matched.
	ObserveRequest(method, route string, code int, d time.Duration)
	// ObserveAuditFailure counts an audit entry of the action that could
	// not be written (audit.go).
	ObserveAuditFailure(action string)
	// ObserveUDPDrop counts a datagram a UDP tunnel dropped going
	// direction ("client_to_guest", "guest_to_client") for reason
	// ("oversize", "rate", "backlog"): udp.go.
	ObserveUDPDrop(direction, reason string)
	// ObserveEstimateReplay records how long a replay of the queue for
	// the estimates took (estimatework.go).
	ObserveEstimateReplay(d time.Duration)
}

// Who may read /metrics (Deps.MetricsAuth).
const (
	MetricsAuthNone  = "none"  // anyone: Prometheus's convention
	MetricsAuthToken = "token" // any valid API token
)

// observeRequests counts every request by method, route template and
// status, and times it: the route template, never the path, so that the
// label set stays bounded.
func (s *Server) observeRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.Metrics.ObserveRequest(c.Request.Method, c.FullPath(), c.Writer.Status(), time.Since(start))
}

// metrics serves GET /metrics: the Prometheus text format, no
// authentication unless the configuration asks for a token.
func (s *Server) metrics(c *gin.Context) {
	if s.Metrics == nil {
		s.writeProblem(c, with(errUnavailable, "this gpuvmd does not export metrics"))
		return
	}
	if s.MetricsAuth == MetricsAuthToken {
		token, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
		if !ok || strings.TrimSpace(token) == "" {
			c.Header("WWW-Authenticate", `Bearer realm="gpuvm"`)
			s.writeProblem(c, with(errUnauthenticated, "/metrics needs Authorization: Bearer <token> (server.monitor.metrics_auth = \"token\")"))
			return
		}
		if _, _, err := s.Auth.AuthenticateToken(c.Request.Context(), strings.TrimSpace(token)); err != nil {
			if errors.Is(err, store.ErrInvalidToken) {
				c.Header("WWW-Authenticate", `Bearer realm="gpuvm", error="invalid_token"`)
				s.writeProblem(c, with(errUnauthenticated, "the token is unknown, expired or revoked"))
				return
			}
			s.writeProblem(c, err)
			return
		}
	}
	s.Metrics.ServeHTTP(c.Writer, c.Request)
}
