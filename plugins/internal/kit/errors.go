package kit

import (
	"errors"
	"syscall"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// HostError turns a refused sysfs write into a backend error that names the
// GPU, what was being done and the kernel's answer.
func HostError(gpu, doing string, err error) error {
	code := backend.CodeHost
	switch {
	case errors.Is(err, syscall.EUSERS), errors.Is(err, syscall.ENOSPC):
		code = backend.CodeExhausted
	case errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.EBUSY):
		code = backend.CodeConflict
	}
	return backend.Errorf(code, gpu, "%s: %v", doing, err)
}

// Reverter collects undo steps for a multi-step host change and runs them in
// reverse unless the change succeeded.
type Reverter struct {
	undo []func() error
	errs []error
}

// Add registers an undo step.
func (r *Reverter) Add(f func() error) { r.undo = append(r.undo, f) }

// Success drops the undo steps.
func (r *Reverter) Success() { r.undo = nil }

// Revert runs the undo steps in reverse order and returns what failed.
func (r *Reverter) Revert() error {
	for i := len(r.undo) - 1; i >= 0; i-- {
		if err := r.undo[i](); err != nil {
			r.errs = append(r.errs, err)
		}
	}
	r.undo = nil
	errs := r.errs
	r.errs = nil
	return errors.Join(errs...)
}
