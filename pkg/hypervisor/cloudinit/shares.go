package cloudinit

import (
	"fmt"
	"path"
	"strings"
)

// Share is an admin-declared share attached to the VM over virtiofs: the
// guest mounts Tag at Mount, read-only when ReadOnly (the host enforces
// that; the guest's ro mount makes a write fail with a clear EROFS).
type Share struct {
	Name     string
	Tag      string
	Mount    string
	ReadOnly bool
}

// problems are what is wrong with s; the tag and path go into the guest's
// fstab and a shell script unquoted, so they are checked here again.
func (s *Share) problems() []string {
	var p []string
	if !homeTagRE.MatchString(s.Tag) {
		p = append(p, fmt.Sprintf("share %s tag %q: want 1 to 36 letters, digits, '.', '_' or '-'", s.Name, s.Tag))
	}
	if !homeMountRE.MatchString(s.Mount) || path.Clean(s.Mount) != s.Mount {
		p = append(p, fmt.Sprintf("share %s mount %q: want a clean absolute path of letters, digits, '.', '_', '-'", s.Name, s.Mount))
	}
	return p
}

// sharesScript is the vendor-data script that mounts the shares, as
// homeScript mounts the home: an fstab line each and a mount now.
func sharesScript(shares []Share) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# gpuvm: the shares attached to this VM over virtiofs.\n")
	for _, s := range shares {
		opts, mode := "defaults,nofail", "read-write"
		if s.ReadOnly {
			opts, mode = "ro,nofail", "read-only"
		}
		fmt.Fprintf(&b, "# share %s, %s: virtiofs tag %s at %s\n", s.Name, mode, s.Tag, s.Mount)
		fmt.Fprintf(&b, "mkdir -p %s\n", s.Mount)
		fmt.Fprintf(&b, "grep -qs '^%s ' /etc/fstab || echo '%s %s virtiofs %s 0 0' >> /etc/fstab\n", s.Tag, s.Tag, s.Mount, opts)
		fmt.Fprintf(&b, "mountpoint -q %s || mount %s || echo 'gpuvm: share %s (virtiofs tag %s) could not be mounted at %s' >&2\n", s.Mount, s.Mount, s.Name, s.Tag, s.Mount)
	}
	return b.String()
}
