package cloudinit

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Home is the owner's home, attached to the VM over virtiofs: the guest
// mounts Tag at Mount (pkg/homes; config's storage.homes).
type Home struct {
	Tag   string
	Mount string
	// UID is the owner's stable uid, which the account should have: the
	// vendor-data says on the console when it has another.
	UID int
}

var (
	homeTagRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,36}$`)
	homeMountRE = regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)
)

// problems are what is wrong with h; the tag and path go into the guest's
// fstab and a shell script unquoted, so they are checked here again.
func (h *Home) problems() []string {
	var p []string
	if !homeTagRE.MatchString(h.Tag) {
		p = append(p, fmt.Sprintf("home tag %q: want 1 to 36 letters, digits, '.', '_' or '-'", h.Tag))
	}
	if !homeMountRE.MatchString(h.Mount) || path.Clean(h.Mount) != h.Mount {
		p = append(p, fmt.Sprintf("home mount %q: want a clean absolute path of letters, digits, '.', '_', '-'", h.Mount))
	}
	if h.UID < 1 {
		p = append(p, fmt.Sprintf("home uid %d: want a person's uid", h.UID))
	}
	return p
}

// homeScript is the vendor-data script that mounts the home: an fstab
// line (so that every later boot mounts it early, and nofail boots the
// guest even without it) and a mount now. It runs as a script, not as
// cloud-config, so that a profile's own mounts or bootcmd cannot replace
// it (user-data's keys override vendor-data's). It checks that the
// account has the home's uid and says so on the console when not.
func homeScript(h *Home, user string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# gpuvm: the owner's home (virtiofs tag %s) at %s, the same in every VM of theirs.\n", h.Tag, h.Mount)
	fmt.Fprintf(&b, "mkdir -p %s\n", h.Mount)
	fmt.Fprintf(&b, "grep -qs '^%s ' /etc/fstab || echo '%s %s virtiofs defaults,nofail 0 0' >> /etc/fstab\n", h.Tag, h.Tag, h.Mount)
	fmt.Fprintf(&b, "mountpoint -q %s || mount %s || echo 'gpuvm: the home (virtiofs tag %s) could not be mounted at %s' >&2\n", h.Mount, h.Mount, h.Tag, h.Mount)
	fmt.Fprintf(&b, "uid=$(id -u %s 2>/dev/null)\n", user)
	fmt.Fprintf(&b, "[ \"$uid\" = %d ] || echo \"gpuvm: account %s has uid ${uid:-none}, its home belongs to uid %d: the profile's cloud-init template should write uid: \\${uid} under the user\" >&2\n", h.UID, user, h.UID)
	return b.String()
}
