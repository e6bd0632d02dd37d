package homes

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DescriptorDirs are where QEMU's vhost-user descriptors are, in libvirt's
// order: an admin's in /etc override the distribution's of the same name.
var DescriptorDirs = []string{"/etc/qemu/vhost-user", "/usr/share/qemu/vhost-user"}

// VirtiofsdPackage is the Debian package with QEMU's virtiofsd (bookworm
// has no virtiofsd package of its own).
const VirtiofsdPackage = "qemu-system-common"

// ErrNoVirtiofsd: no descriptor names a virtiofs daemon that exists.
var ErrNoVirtiofsd = fmt.Errorf("no virtiofs daemon found (no vhost-user descriptor of type \"fs\" in %s names an executable); on Debian install %s",
	strings.Join(DescriptorDirs, " or "), VirtiofsdPackage)

// descriptor is a vhost-user backend description (QEMU's
// docs/interop/vhost-user.json).
type descriptor struct {
	Type   string `json:"type"`
	Binary string `json:"binary"`
}

// FindVirtiofsd finds the virtiofs daemon the way libvirt does: the
// descriptors (*.json) of dirs, a name in an earlier directory hiding the
// same name in a later one, taken in name order; the first of type "fs"
// whose binary is an executable file wins. dirs nil: DescriptorDirs.
func FindVirtiofsd(dirs []string) (string, error) {
	if dirs == nil {
		dirs = DescriptorDirs
	}
	byName := map[string]string{}
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.json"))
		for _, f := range files {
			if _, hidden := byName[filepath.Base(f)]; !hidden {
				byName[filepath.Base(f)] = f
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var why []string
	for _, n := range names {
		b, err := os.ReadFile(byName[n])
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		var d descriptor
		if err := json.Unmarshal(b, &d); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", byName[n], err))
			continue
		}
		if d.Type != "fs" {
			continue
		}
		if err := executable(d.Binary); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", byName[n], err))
			continue
		}
		return d.Binary, nil
	}
	if len(why) > 0 {
		return "", fmt.Errorf("%w: %s", ErrNoVirtiofsd, strings.Join(why, "; "))
	}
	return "", ErrNoVirtiofsd
}

func executable(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("binary %q is not an absolute path", p)
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("binary %s does not exist", p)
	case err != nil:
		return err
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("binary %s is not an executable file", p)
	}
	return nil
}
