package hypervisor

import (
	"errors"
	"fmt"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

var (
	// ErrNotFound says a domain, pool or volume does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNotGpuvm says a domain exists but is not gpuvm's: gpuvm leaves it
	// alone.
	ErrNotGpuvm = domain.ErrNotGpuvm
)

// ErrNoUpload says the libvirt driver cannot store a volume's contents
// (VIR_ERR_NO_SUPPORT on upload: libvirt's test driver keeps volumes as
// names and sizes only).
var ErrNoUpload = errors.New("the libvirt driver cannot upload volume contents")

// ErrDisconnected says the connection to libvirtd is lost (libvirtd stopped,
// restarting, or silent past the keepalive): the Conn reconnects in the
// background, and the call may be retried once it has (see
// Conn.WaitConnected). Errors that wrap it are *DisconnectedError.
var ErrDisconnected = errors.New("not connected to libvirt")

// DisconnectedError is the error of a call made while the connection to
// libvirt was lost, or cut short by its loss. It wraps ErrDisconnected and,
// when the call itself failed, libvirt's error.
type DisconnectedError struct {
	URI    string
	Since  time.Time // when the loss was noticed; zero when unknown
	Reason string    // why, when known
	Err    error     // the call's own error, when it failed on the lost connection
}

func (e *DisconnectedError) Error() string {
	msg := fmt.Sprintf("not connected to libvirt %s (libvirtd stopped or restarting; reconnecting in the background)", e.URI)
	switch {
	case e.Err != nil:
		msg += ": " + e.Err.Error()
	case e.Reason != "":
		msg += ": " + e.Reason
	}
	return msg
}

func (e *DisconnectedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrDisconnected, e.Err}
	}
	return []error{ErrDisconnected}
}

// IsDisconnected reports whether err says the connection to libvirt was
// lost: worth a retry once reconnected.
func IsDisconnected(err error) bool { return errors.Is(err, ErrDisconnected) }

// ErrNotRunning says an operation needs a running domain.
var ErrNotRunning = errors.New("the domain is not running")

// VMError is an error about one VM: which, what gpuvm was doing, and why.
type VMError struct {
	VM  string // the domain's name, or its UUID when the name is unknown
	Op  string // "define", "start", "shutdown", ...
	Err error
}

func (e *VMError) Error() string { return fmt.Sprintf("VM %q: %s: %v", e.VM, e.Op, e.Err) }
func (e *VMError) Unwrap() error { return e.Err }

// StorageError is an error about a storage pool or volume.
type StorageError struct {
	Pool   string
	Volume string // empty for the pool itself
	Op     string
	Err    error
}

func (e *StorageError) Error() string {
	if e.Volume == "" {
		return fmt.Sprintf("storage pool %q: %s: %v", e.Pool, e.Op, e.Err)
	}
	return fmt.Sprintf("volume %q in pool %q: %s: %v", e.Volume, e.Pool, e.Op, e.Err)
}
func (e *StorageError) Unwrap() error { return e.Err }

// libvirtError shows libvirt's message alone (not the Go binding's
// "virError(Code=…, Domain=…, Message=…)") and unwraps to libvirt.Error.
type libvirtError struct{ lv libvirt.Error }

func (e *libvirtError) Error() string { return e.lv.Message }
func (e *libvirtError) Unwrap() []error {
	errs := []error{e.lv}
	if isNotFoundCode(e.lv.Code) {
		errs = append(errs, ErrNotFound)
	}
	return errs
}

func isNotFoundCode(c libvirt.ErrorNumber) bool {
	return c == libvirt.ERR_NO_DOMAIN || c == libvirt.ERR_NO_STORAGE_POOL || c == libvirt.ERR_NO_STORAGE_VOL
}

// clean makes a libvirt error readable; other errors pass unchanged.
func clean(err error) error {
	var lv libvirt.Error
	if err != nil && errors.As(err, &lv) {
		var already *libvirtError
		if errors.As(err, &already) {
			return err
		}
		if _, direct := err.(libvirt.Error); direct {
			return &libvirtError{lv: lv}
		}
	}
	return err
}

func vmError(vm, op string, err error) error {
	if err == nil {
		return nil
	}
	return &VMError{VM: vm, Op: op, Err: clean(err)}
}

func storageError(pool, vol, op string, err error) error {
	if err == nil {
		return nil
	}
	return &StorageError{Pool: pool, Volume: vol, Op: op, Err: clean(err)}
}

// IsNotFound reports whether err says a domain, pool or volume is missing.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || isCode(err, libvirt.ERR_NO_DOMAIN, libvirt.ERR_NO_STORAGE_POOL, libvirt.ERR_NO_STORAGE_VOL)
}
