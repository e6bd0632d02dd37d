package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Shares: folders on the host an admin offers people's VMs over virtiofs,
// each with who may mount it read-write and who read-only.

// DefaultSharesMount is the guest directory shares appear under by
// default: /gpuvm/shares/NAME, beside the home.
const DefaultSharesMount = "/gpuvm/shares"

// Share modes: how a person may mount a share.
const (
	ShareReadWrite = "rw"
	ShareReadOnly  = "ro"
)

// MaxVMShares bounds how many shares one VM mounts (its request's and its
// profile's together).
const MaxVMShares = 16

// Share is one share block of server.storage.
type Share struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Path is the host directory shared.
	Path string `json:"path"`
	// Mount is where the share appears in a Linux guest.
	Mount string `json:"mount"`
	// ReadWrite and ReadOnly are principals, "user:NAME" or "group:NAME".
	ReadWrite []string `json:"read_write,omitempty"`
	ReadOnly  []string `json:"read_only,omitempty"`
	// Quota bounds what the share's directory may hold (nil: no limit):
	// the filesystem's project quota numbered ShareProject(Name) where the
	// directory's filesystem has project quotas, else measured only.
	Quota *uint64 `json:"quota,omitempty"`
	// Source is "file:line" of the block.
	Source    string    `json:"source"`
	DeclRange hcl.Range `json:"-"`
}

// Access is how user (a member of groups) may mount the share: ShareReadWrite,
// ShareReadOnly or "" (not at all), and the rule that says so
// ("read_write: group:ml"). Read-write wins over read-only.
func (s *Share) Access(user string, groups []string) (mode, rule string) {
	if p := matchPrincipal(s.ReadWrite, user, groups); p != "" {
		return ShareReadWrite, "read_write: " + p
	}
	if p := matchPrincipal(s.ReadOnly, user, groups); p != "" {
		return ShareReadOnly, "read_only: " + p
	}
	return "", ""
}

// matchPrincipal is the first of ps naming user or one of groups.
func matchPrincipal(ps []string, user string, groups []string) string {
	for _, p := range ps {
		kind, name, _ := strings.Cut(p, ":")
		if (kind == "user" && name == user) || (kind == "group" && slices.Contains(groups, name)) {
			return p
		}
	}
	return ""
}

// shareTagPrefix begins every share's virtiofs tag.
const shareTagPrefix = "gpuvm-share-"

// maxTag is a virtio-fs tag's length limit, in bytes.
const maxTag = 36

// ShareTag is the virtiofs tag share name is attached with: gpuvm-share-NAME,
// or, where that is longer than a tag may be (36 bytes), the name's first
// characters and a hash of the whole name.
func ShareTag(name string) string {
	t := shareTagPrefix + name
	if len(t) <= maxTag {
		return t
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:4])
	keep := maxTag - len(shareTagPrefix) - 1 - len(h)
	return shareTagPrefix + name[:keep] + "-" + h
}

// resolveShares reads the share blocks.
func (r *resolver) resolveShares(bs []*shareBlock) {
	shares := map[string]*Share{}
	for _, b := range bs {
		if !r.checkName("share", b.Name, b.LabelRange) {
			continue
		}
		if prev, dup := shares[b.Name]; dup {
			r.errf(b.LabelRange, "Duplicate share", "Share %q is declared twice; the first is at %s.", b.Name, prev.Source)
			continue
		}
		s := r.resolveShare(b)
		shares[b.Name] = s
	}
	r.checkShareMounts(shares)
	r.checkShareProjects(bs, shares)
	if len(shares) > 0 {
		r.cfg.Server.Storage.Shares = shares
	}
}

// resolveShare reads one share block.
func (r *resolver) resolveShare(b *shareBlock) *Share {
	body, def := b.Body, b.DefRange
	s := &Share{Name: b.Name, Path: b.Path, Mount: path.Join(DefaultSharesMount, b.Name), ReadWrite: b.ReadWrite, ReadOnly: b.ReadOnly,
		Source: fmt.Sprintf("%s:%d", def.Filename, def.Start.Line), DeclRange: def}
	if b.Description != nil {
		s.Description = *b.Description
	}
	if b.Quota != nil {
		v, ok := r.size(body, "quota", b.Quota, 0, def)
		if ok && v == 0 {
			r.errf(valueRange(body, "quota", def), "Invalid quota", "Share %q: quota is a size above 0, e.g. \"500GiB\"; leave it out for no limit.", b.Name)
		}
		s.Quota = &v
	}
	if err := checkSharePath(b.Path); err != nil {
		r.errf(valueRange(body, "path", def), "Invalid path", "Share %q: %v.", b.Name, err)
	}
	if b.Mount != nil {
		s.Mount = *b.Mount
		if err := checkGuestMount(s.Mount, "share", path.Join(DefaultSharesMount, b.Name)); err != nil {
			r.errf(valueRange(body, "mount", def), "Invalid mount", "Share %q: %v.", b.Name, err)
		}
	}
	seen := map[string]string{}
	for _, list := range []struct {
		attr string
		ps   []string
	}{{"read_write", b.ReadWrite}, {"read_only", b.ReadOnly}} {
		for i, p := range list.ps {
			rng := listItemRange(body, list.attr, i, def)
			if err := checkSharePrincipal(p); err != nil {
				r.errf(rng, "Invalid principal", "Share %q, %s: %v.", b.Name, list.attr, err)
				continue
			}
			if prev, ok := seen[p]; ok {
				if prev == list.attr {
					r.errf(rng, "Duplicate principal", "Share %q: %s names %q twice.", b.Name, list.attr, p)
				} else {
					r.errf(rng, "Principal in both lists", "Share %q names %q in read_write and in read_only; keep it in one.", b.Name, p)
				}
				continue
			}
			seen[p] = list.attr
		}
	}
	if len(b.ReadWrite) == 0 && len(b.ReadOnly) == 0 {
		r.warnf(def, "Nobody may mount the share", "Share %q has no read_write or read_only principals: no VM can mount it. Write e.g. read_only = [\"group:NAME\"].", b.Name)
	}
	return s
}

// ShareProject is the filesystem project a share's quota counts and
// limits where its directory's filesystem has project quotas: 2^31 and
// above, from its name (FNV-1a), out of the homes' projects, which are
// their people's uids (keep those below 2^31).
func ShareProject(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return 1<<31 | h.Sum32()&(1<<31-1)
}

// checkShareProjects refuses two shares with quotas whose names give one
// project (ShareProject: 31 bits of a hash): the filesystem would count
// and limit them as one.
func (r *resolver) checkShareProjects(bs []*shareBlock, shares map[string]*Share) {
	byProject := map[uint32]string{}
	for _, b := range bs {
		s := shares[b.Name]
		if s == nil || s.Quota == nil || s.DeclRange != b.DefRange {
			continue // not resolved, a duplicate, or no quota
		}
		p := ShareProject(b.Name)
		if other, ok := byProject[p]; ok {
			r.errf(b.LabelRange, "Shares on one quota project",
				"Shares %q and %q both have a quota, and their names give one filesystem project (%d), which would count and limit them as one; rename one of them.", other, b.Name, p)
			continue
		}
		byProject[p] = b.Name
	}
}

// checkSharePath checks a share's host directory.
func checkSharePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("path is the host directory shared; it may not be empty")
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q holds a NUL character", p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("path %q is not absolute; write e.g. \"/srv/datasets/NAME\"", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("path %q holds \"..\"; write the directory itself", p)
	case filepath.Clean(p) == "/":
		return fmt.Errorf("path may not be /: share a directory of its own")
	case filepath.Clean(p) != p:
		return fmt.Errorf("path %q is not a clean path; write %q", p, filepath.Clean(p))
	}
	return nil
}

// checkSharePrincipal checks a "user:NAME" or "group:NAME".
func checkSharePrincipal(p string) error {
	kind, name, ok := strings.Cut(p, ":")
	if !ok || (kind != "user" && kind != "group") {
		return fmt.Errorf("%q is not \"user:NAME\" or \"group:NAME\"", p)
	}
	if !principalPattern.MatchString(name) {
		return fmt.Errorf("%q: a %s name is 1 to 64 letters, digits, '_', '.', '@', '+' or '-', starting with a letter, digit or '_'", p, kind)
	}
	return nil
}

// checkShareMounts reports a share mounted on or under the home's mount or
// another share's, in a stable order.
func (r *resolver) checkShareMounts(shares map[string]*Share) {
	home := r.cfg.Server.Storage.Homes.Mount
	if home == "" {
		home = DefaultHomeMount
	}
	names := sortedKeys(shares)
	under := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/") }
	for i, n := range names {
		s := shares[n]
		if under(s.Mount, home) {
			r.errf(s.DeclRange, "Invalid mount", "Share %q is mounted at %s, on or around the home's mount %s; give it a directory of its own such as %q.",
				n, s.Mount, home, path.Join(DefaultSharesMount, n))
			continue
		}
		for _, m := range names[:i] {
			if under(s.Mount, shares[m].Mount) {
				r.errf(s.DeclRange, "Invalid mount", "Share %q is mounted at %s, on or around share %q's mount %s.", n, s.Mount, m, shares[m].Mount)
				break
			}
		}
	}
}

// resolveProfileShares reads the profile's shares: each must exist, and
// each person the profile admits by name (users) or group (groups) should
// have access; a warning names who would be refused at create.
func (r *resolver) resolveProfileShares(b *profileBlock, p *Profile) {
	body, def := b.Body, b.DefRange
	if len(b.Shares) > MaxVMShares {
		r.errf(valueRange(body, "shares", def), "Too many shares", "Profile %q mounts %d shares; at most %d.", b.Name, len(b.Shares), MaxVMShares)
		return
	}
	r.checkDuplicates(body, "shares", b.Shares, def)
	all := r.cfg.Server.Storage.Shares
	for i, n := range b.Shares {
		rng := listItemRange(body, "shares", i, def)
		s := all[n]
		switch {
		case s == nil:
			r.errf(rng, "Unknown share", "Profile %q mounts share %q, which server.storage does not declare.", b.Name, n)
			continue
		case p.OS == "windows":
			r.errf(rng, "No shares in Windows guests", "Profile %q is os = \"windows\": shares reach Linux guests only (over virtiofs).", b.Name)
			continue
		}
		p.Shares = append(p.Shares, n)
		if refused := profileRefused(p, s); refused != "" {
			r.warnf(rng, "Some of the profile's people may not mount the share",
				"Profile %q mounts share %q always, but %s: their creates will be refused (403) until the share admits them.", b.Name, n, refused)
		}
	}
}

// profileRefused says whom of the profile's people share s does not
// admit by name or group, "" when it admits them all.
func profileRefused(p *Profile, s *Share) string {
	if p.Open() {
		return "the profile is open to everyone and the share admits only those it names"
	}
	var out []string
	for _, u := range p.Users {
		if m, _ := s.Access(u, nil); m == "" {
			out = append(out, "user:"+u)
		}
	}
	for _, g := range p.Groups {
		if m, _ := s.Access("", []string{g}); m == "" {
			out = append(out, "group:"+g)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "the share does not name " + strings.Join(out, ", ")
}

// ShareNames are the shares a VM of p mounts: the profile's, then those
// asked for, each once.
func (p *Profile) ShareNames(asked []string) []string {
	var out []string
	if p != nil {
		out = append(out, p.Shares...)
	}
	for _, n := range asked {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
