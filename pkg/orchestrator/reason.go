package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// What a VM's reason and an operation's error say is read by the VM's owner,
// who is no admin of the server: they name no file of it. The checks before
// a create (checkAvailable) say what is missing in words; any other error
// that carries a server path (libvirt's, a backend's, qemu-img's) has the
// path cut to its base name in what people read, and whole in the log.

// serverPath is an absolute path of two components or more, standing alone
// (after a space, a quote, a bracket, '=' or the start): not a URL's path,
// nor the API's routes (/v1/...).
var serverPath = regexp.MustCompile(`(^|[\s"'(\[=,<>])(/[^\s"'()\[\],;<>/]+(?:/[^\s"'()\[\],;<>/]*)+)`)

// hidePaths is s with every server path in it cut to its base name.
func hidePaths(s string) string {
	return serverPath.ReplaceAllStringFunc(s, func(m string) string {
		sub := serverPath.FindStringSubmatch(m)
		lead, path := sub[1], sub[2]
		if strings.HasPrefix(path, "/v1/") {
			return m
		}
		trail := ""
		for strings.HasSuffix(path, ":") || strings.HasSuffix(path, ".") {
			trail = path[len(path)-1:] + trail
			path = path[:len(path)-1]
		}
		base := filepath.Base(path)
		if base == "/" || base == "." {
			base = "a file"
		}
		return lead + base + trail
	})
}

// reasonOf is what a VM's reason says of err: its text, paths cut.
func reasonOf(err error) string { return hidePaths(err.Error()) }

// pathless is an error whose text has its paths cut (hidePaths); it is
// still err for errors.Is and errors.As.
type pathless struct{ err error }

func (p pathless) Error() string { return reasonOf(p.err) }
func (p pathless) Unwrap() error { return p.err }

// withoutPaths is err with its paths cut in its text (nil stays nil).
func withoutPaths(err error) error {
	if err == nil || reasonOf(err) == err.Error() {
		return err
	}
	return pathless{err}
}

// checkAvailable refuses to make a VM whose profile needs what this server
// lacks (its disk image not built or imported, its kernel, initrd or
// template): the VM fails with a reason that says so in words, and the log
// names the files. nil when all is there, when nothing is checked, or when
// the store could not say (libvirt then says what is missing).
func (lc *lifecycle) checkAvailable(ctx context.Context, vm *store.VM) error {
	if lc.avail == nil {
		return nil
	}
	set := lc.settings()
	p := set.Profiles[vm.Profile]
	if p == nil || set.Config == nil {
		return nil
	}
	ms, err := lc.avail.Check(ctx, set.Config, p)
	if err != nil {
		lc.log.Warn("could not check that a VM's profile has its image here; creating it anyway", "vm", vm.ID, "profile", p.Name, "err", err)
		return nil
	}
	if len(ms) == 0 {
		return nil
	}
	for _, m := range ms {
		lc.log.Warn("a VM's profile needs what is not on this server; the VM fails", "vm", vm.ID, "profile", p.Name, "missing", m.What, "path", m.Path)
	}
	return fmt.Errorf("profile %s cannot be made on this server now: %s", p.Name, images.Reason(ms))
}
