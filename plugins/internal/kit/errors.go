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
