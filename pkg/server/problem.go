package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/i18n"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// ProblemBase prefixes every problem type URI.
const ProblemBase = api.ProblemBase

// Problem is an RFC 9457 problem detail (the wire type of pkg/api).
type Problem = api.Problem

// Problem kinds.
var (
	errUnauthenticated  = &Problem{Type: ProblemBase + "unauthenticated", Title: "Authentication required", Status: http.StatusUnauthorized}
	errForbidden        = &Problem{Type: ProblemBase + "forbidden", Title: "Not allowed", Status: http.StatusForbidden}
	errNotFound         = &Problem{Type: ProblemBase + "not-found", Title: "Not found", Status: http.StatusNotFound}
	errInvalidConfig    = &Problem{Type: ProblemBase + "invalid-configuration", Title: "The configuration has errors", Status: http.StatusUnprocessableEntity}
	errUnavailable      = &Problem{Type: ProblemBase + "unavailable", Title: "Temporarily unavailable", Status: http.StatusServiceUnavailable}
	errBadRequest       = &Problem{Type: ProblemBase + "bad-request", Title: "The request is malformed", Status: http.StatusBadRequest}
	errValidation       = &Problem{Type: ProblemBase + "validation", Title: "The request is not valid", Status: http.StatusUnprocessableEntity}
	errConflict         = &Problem{Type: ProblemBase + "conflict", Title: "Conflict", Status: http.StatusConflict}
	errTooLarge         = &Problem{Type: ProblemBase + "too-large", Title: "The request body is too large", Status: http.StatusRequestEntityTooLarge}
	errInternal         = &Problem{Type: ProblemBase + "internal", Title: "Internal error", Status: http.StatusInternalServerError}
	errMethodNotAllowed = &Problem{Type: ProblemBase + "method-not-allowed", Title: "Method not allowed", Status: http.StatusMethodNotAllowed}
)

// StatusClientClosed is the status a request gets in the logs and metrics
// when its client left before the answer (nginx's 499).
const StatusClientClosed = 499

// with returns a copy of a problem kind with a detail.
func with(p *Problem, detail string) *Problem {
	c := *p
	c.Detail = detail
	return &c
}

// withField returns a copy of a problem kind with a detail about a field.
func withField(p *Problem, field, detail string) *Problem {
	c := with(p, detail)
	c.Field = field
	return c
}

// writeProblem answers with err as problem+json; an error that is not a
// *Problem is an internal error whose text is logged, not shown.
func (s *Server) writeProblem(c *gin.Context, err error) {
	var p *Problem
	if c.Request.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The client left: nobody reads an answer, and it is no error of
		// the server's.
		s.log.Info("client left before the answer", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
		c.AbortWithStatus(StatusClientClosed)
		return
	}
	if !errors.As(err, &p) {
		p = storeProblem(err)
	}
	if p == nil {
		s.log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err, "request_id", c.GetString(requestIDKey))
		p = with(errInternal, "the error was logged")
	}
	c.Set(problemKey, p) // its detail goes in the audit log, in English
	if lang := portal.Language(c.Request); lang != i18n.English {
		said := *p
		said.Title, said.Detail = i18n.Text(lang, p.Title), i18n.Text(lang, p.Detail)
		p = &said
	}
	c.Header("Content-Type", "application/problem+json")
	c.AbortWithStatusJSON(p.Status, p)
}

// storeProblem is the problem of a store error that a handler did not turn
// into one of its own (most say more: which VM, which user): its text, with
// the status its kind means; nil for any other error, which is the server's.
func storeProblem(err error) *Problem {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return with(errNotFound, err.Error())
	case errors.Is(err, store.ErrSlotTaken), errors.Is(err, store.ErrConflict):
		return with(errConflict, err.Error())
	case errors.Is(err, store.ErrInvalid):
		return with(errValidation, err.Error())
	}
	return nil
}
