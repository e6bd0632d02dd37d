package config

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Defaults and bounds of the storage block.
const (
	// DefaultHomeMount is where a home appears in a Linux guest: a
	// directory of gpuvm's own, not the account's home (/home/LOGIN). The
	// account's home keeps what belongs to the image and to one running
	// desktop (dot files, caches, session sockets and locks), which two
	// VMs of one person running at once must not share; the home holds the
	// person's work. /gpuvm is no distribution's and no account's, so it
	// never hides what the image has, and later mounts (shares, data
	// disks) go beside it.
	DefaultHomeMount = "/gpuvm/home"
	// DefaultUIDMin and DefaultUIDMax bound the uids gpuvm assigns: above
	// the uids distributions give local accounts (1000 up), within
	// Debian's range of dynamically allocated user ids (up to 59999), and
	// below nobody (65534).
	DefaultUIDMin = 20000
	DefaultUIDMax = 59999
	// minUID: uids below are system accounts'.
	minUID = 1000
	// maxUID: (uid_t)-2, the largest uid a Linux kernel gives a file.
	maxUID = 1<<32 - 3
	// HomeDirName is the directory under server.state_dir that holds the
	// homes when root is not set.
	HomeDirName = "homes"
)

// guestPathRE is what a guest mount path may be made of: it goes into
// /etc/fstab and a shell command, unquoted.
var guestPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)

// systemDirs are guest directories a home may not be mounted on or under:
// the system's own.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var"}

// resolveStorage reads the server's storage block. Without one, people
// have no homes.
func (r *resolver) resolveStorage(b *storageBlock) {
	h := &r.cfg.Server.Storage.Homes
	*h = Homes{Root: filepath.Join(r.cfg.Server.StateDir, HomeDirName), Mount: DefaultHomeMount, UIDMin: DefaultUIDMin, UIDMax: DefaultUIDMax}
	if b == nil || b.Homes == nil {
		return
	}
	hb := b.Homes
	body, def := hb.Body, hb.DefRange
	// Writing the block is asking for homes; enabled = false keeps the
	// settings while turning them off.
	h.Enabled = hb.Enabled == nil || *hb.Enabled
	if hb.Root != nil {
		rng := valueRange(body, "root", def)
		h.Root = r.path(*hb.Root, rng)
		switch {
		case *hb.Root == "":
			r.errf(rng, "Invalid root", "root is the host directory that holds the homes; it may not be empty.")
		case filepath.Clean(h.Root) == "/":
			r.errf(rng, "Invalid root", "root may not be /: homes need a directory of their own.")
		}
	}
	if hb.Mount != nil {
		h.Mount = *hb.Mount
		if err := checkGuestMount(h.Mount, "home", DefaultHomeMount); err != nil {
			r.errf(valueRange(body, "mount", def), "Invalid mount", "%v.", err)
		}
	}
	if hb.UIDMin != nil {
		h.UIDMin = *hb.UIDMin
	}
	if hb.UIDMax != nil {
		h.UIDMax = *hb.UIDMax
	}
	r.checkUIDRange(hb, h)
}

// checkUIDRange reports a uid range that is empty, reaches system
// accounts or holds nobody.
func (r *resolver) checkUIDRange(hb *homesBlock, h *Homes) {
	body, def := hb.Body, hb.DefRange
	switch {
	case h.UIDMin < minUID || h.UIDMin > maxUID:
		r.errf(valueRange(body, "uid_min", def), "Invalid uid_min",
			"uid_min is the first uid gpuvm assigns, from %d (uids below are system accounts') to %d; %d was given.", minUID, maxUID, h.UIDMin)
	case h.UIDMax < h.UIDMin || h.UIDMax > maxUID:
		r.errf(valueRange(body, "uid_max", def), "Invalid uid_max",
			"uid_max is the last uid gpuvm assigns, from uid_min (%d) to %d; %d was given.", h.UIDMin, maxUID, h.UIDMax)
	case h.UIDMin <= 65534 && h.UIDMax >= 65534:
		rng := valueRange(body, "uid_max", def)
		if hb.UIDMax == nil {
			rng = valueRange(body, "uid_min", def)
		}
		r.errf(rng, "Invalid uid range", "The uids %d to %d include 65534, nobody's; end the range below it or begin it above.", h.UIDMin, h.UIDMax)
	}
}

// checkGuestMount checks a path in the guest a home or a share (what) is
// mounted on; example is a good one.
func checkGuestMount(p, what, example string) error {
	switch {
	case p == "":
		return fmt.Errorf("mount is the path in the guest where the %s appears; it may not be empty", what)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("mount %q is not an absolute path; write e.g. %q", p, example)
	case len(p) > 200 || !guestPathRE.MatchString(p):
		return fmt.Errorf("mount %q: a guest path is at most 200 characters of letters, digits, '.', '_', '-' and '/', with no empty part or trailing '/'", p)
	case path.Clean(p) != p:
		return fmt.Errorf("mount %q is not a clean path; write %q", p, path.Clean(p))
	case p == "/home":
		return fmt.Errorf("mount %q would hide every account's home in the guest; write a directory of its own such as %q", p, example)
	}
	for _, d := range systemDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("mount %q is in the guest system's own directory %s; write a directory of its own such as %q", p, d, example)
		}
	}
	return nil
}

// resolveProfileHome reads the profile's home switch: on by default when
// the server has homes, for Linux guests whose seed mounts it. A Windows
// guest mounts it only when its image was built with WinFsp (gpuvm admin
// image windows-install --winfsp; docs/windows.md), which the
// configuration cannot see: its profile says home = true. A guest without
// cloud_init would get a device nothing mounts, and its VMs the costs of
// virtiofs for nothing: its profile says home = true if its image mounts
// the tag itself.
func (r *resolver) resolveProfileHome(b *profileBlock, p *Profile) {
	homes := r.cfg.Server.Storage.Homes
	if b.Home == nil {
		p.Home = homes.Enabled && p.OS != "windows" && p.CloudInit != nil
		return
	}
	p.Home = *b.Home
	if !p.Home {
		return
	}
	rng := valueRange(b.Body, "home", b.DefRange)
	switch {
	case !homes.Enabled:
		r.errf(rng, "Homes are off", "Profile %q asks for home = true, but the server has no homes: add storage { homes { … } } to the server block, or leave home out.", b.Name)
	case p.OS == "windows" && p.CloudInit == nil:
		r.warnf(rng, "Nothing tells Windows where the home is", "Profile %q has no cloud_init block: its Windows guests get the home as virtiofs tag %q, but no seed lists it for the image's mount task (docs/windows.md, \"Homes\").", b.Name, HomeTag)
	case p.CloudInit == nil:
		r.warnf(rng, "Nothing mounts the home", "Profile %q has no cloud_init block: its guests get the home as virtiofs tag %q but must mount it themselves.", b.Name, HomeTag)
	}
}

// HomeTag is the virtiofs tag a home is attached with: what the guest
// mounts (mount -t virtiofs gpuvm-home /gpuvm/home).
const HomeTag = "gpuvm-home"
