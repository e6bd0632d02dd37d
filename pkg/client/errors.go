package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ProblemBase prefixes every problem type URI gpuvmd sends (RFC 9457).
const ProblemBase = api.ProblemBase

// Problem is an error answer of gpuvmd: its application/problem+json body.
// An error answer that is not problem+json (a proxy's HTML page) is a
// Problem too, with Type "about:blank", the status's text as Title and the
// start of the body as Detail.
type Problem struct {
	api.Problem
	// Method and URL are the request that got this answer (not sent by
	// the server).
	Method string `json:"-"`
	URL    string `json:"-"`
}

// Kind is the last part of the problem type ("not-found"), or "" for a type
// outside gpuvm's.
func (p *Problem) Kind() string {
	k, ok := strings.CutPrefix(p.Type, ProblemBase)
	if !ok {
		return ""
	}
	return k
}

// Is makes errors.Is(err, ErrNotFound) and the like true for a Problem of
// that kind. A Problem without a gpuvm type (a proxy's answer) matches by
// its status.
func (p *Problem) Is(target error) bool {
	k, ok := target.(kindError)
	if !ok {
		return false
	}
	if kind := p.Kind(); kind != "" {
		return kind == k.kind
	}
	return p.Status == k.status
}

// kindError is a sentinel matched by a Problem's kind.
type kindError struct {
	kind   string
	status int
}

func (k kindError) Error() string { return "gpuvm: " + k.kind }

// Sentinels for errors.Is: errors.Is(err, client.ErrNotFound).
var (
	ErrUnauthenticated error = kindError{"unauthenticated", http.StatusUnauthorized}
	ErrForbidden       error = kindError{"forbidden", http.StatusForbidden}
	ErrNotFound        error = kindError{"not-found", http.StatusNotFound}
	ErrBadRequest      error = kindError{"bad-request", http.StatusBadRequest}
	ErrValidation      error = kindError{"validation", http.StatusUnprocessableEntity}
	ErrConflict        error = kindError{"conflict", http.StatusConflict}
	ErrTooLarge        error = kindError{"too-large", http.StatusRequestEntityTooLarge}
	ErrInvalidConfig   error = kindError{"invalid-configuration", http.StatusUnprocessableEntity}
	ErrUnavailable     error = kindError{"unavailable", http.StatusServiceUnavailable}
	ErrInternal        error = kindError{"internal", http.StatusInternalServerError}
)

// IsUnauthenticated: the token is missing, unknown, expired or revoked (401).
func IsUnauthenticated(err error) bool { return errors.Is(err, ErrUnauthenticated) }

// IsForbidden: the caller may not do this (403; admin routes).
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// IsNotFound: no such VM, operation, profile or route (404).
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict: a name taken, an idempotency key reused (409).
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsValidation: a request field is not valid (422; Problem.Field names it).
func IsValidation(err error) bool { return errors.Is(err, ErrValidation) }

// IsUnavailable: the server cannot do this now (503).
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsUnreachable: the request got no HTTP answer at all.
func IsUnreachable(err error) bool {
	var te *TransportError
	return errors.As(err, &te)
}

// AsProblem returns the Problem in err's chain, if any.
func AsProblem(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

// TransportError is a request that got no usable answer: the server could
// not be reached, the connection broke, or the answer could not be read.
type TransportError struct {
	Method, URL string
	Err         error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }
