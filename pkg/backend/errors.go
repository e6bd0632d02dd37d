package backend

import (
	"errors"
	"fmt"
)

// Code classifies a backend error; it survives the trip over gRPC.
type Code string

// Error codes.
const (
	CodeInvalid     Code = "invalid"     // bad request: unknown type, wrong placement…
	CodeNotFound    Code = "not_found"   // no such GPU
	CodeConflict    Code = "conflict"    // GPU in another mode, UUID in use, type clash
	CodeExhausted   Code = "exhausted"   // no capacity left
	CodeHost        Code = "host"        // the kernel or driver refused a change
	CodeUnavailable Code = "unavailable" // backend not running, restarting, or killed mid-call
	CodeUnsupported Code = "unsupported" // the backend cannot do this at all here
	CodeInternal    Code = "internal"
)

// Error is a backend failure that names the GPU and the reason.
type Error struct {
	Code   Code
	GPU    string // PCI address, when the error is about one GPU
	Reason string
}

func (e *Error) Error() string {
	if e.GPU != "" {
		return fmt.Sprintf("GPU %s: %s", e.GPU, e.Reason)
	}
	return e.Reason
}

// Is lets errors.Is(err, backend.ErrExhausted) and friends match by code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) && t.GPU == "" && t.Reason == "" {
		return t.Code == e.Code
	}
	return false
}

// Sentinels for errors.Is; they match any *Error of that code.
var (
	ErrInvalid     = &Error{Code: CodeInvalid}
	ErrNotFound    = &Error{Code: CodeNotFound}
	ErrConflict    = &Error{Code: CodeConflict}
	ErrExhausted   = &Error{Code: CodeExhausted}
	ErrHost        = &Error{Code: CodeHost}
	ErrUnavailable = &Error{Code: CodeUnavailable}
	ErrUnsupported = &Error{Code: CodeUnsupported}
)

// Errorf builds an *Error about a GPU.
func Errorf(code Code, gpu, format string, args ...any) *Error {
	return &Error{Code: code, GPU: gpu, Reason: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, CodeInternal if it carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
