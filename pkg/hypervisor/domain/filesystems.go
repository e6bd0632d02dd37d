package domain

import (
	"fmt"
	"regexp"

	"libvirt.org/go/libvirtxml"
)

// virtiofsQueue is the virtiofs request queue's size: libvirt's and
// virtiofsd's documented example, enough for parallel I/O of one guest.
const virtiofsQueue = 1024

// buildFilesystems are the virtiofs devices of s.Filesystems.
func buildFilesystems(s Spec) []libvirtxml.DomainFilesystem {
	var out []libvirtxml.DomainFilesystem
	for _, f := range s.Filesystems {
		fs := libvirtxml.DomainFilesystem{
			AccessMode: "passthrough", // virtiofs's only mode: the guest's uids are the host's
			Driver:     &libvirtxml.DomainFilesystemDriver{Type: "virtiofs", Queue: virtiofsQueue},
			Source:     &libvirtxml.DomainFilesystemSource{Mount: &libvirtxml.DomainFilesystemSourceMount{Dir: f.Source}},
			Target:     &libvirtxml.DomainFilesystemTarget{Dir: f.Tag},
		}
		if f.Binary != "" {
			fs.Binary = &libvirtxml.DomainFilesystemBinary{Path: f.Binary}
		}
		if f.ReadOnly {
			fs.ReadOnly = &libvirtxml.DomainFilesystemReadOnly{}
		}
		out = append(out, fs)
	}
	return out
}

// virtiofsTagRE is a virtio-fs tag: at most 36 bytes (the device's
// config space), here of characters that need no quoting in a guest's
// fstab.
var virtiofsTagRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,36}$`)

// filesystems notes what is wrong with fss.
func (p *problems) filesystems(fss []Filesystem) {
	tags := map[string]bool{}
	for i, f := range fss {
		field := fmt.Sprintf("filesystem %d", i+1)
		p.add(field+" source", absPath(f.Source))
		if !virtiofsTagRE.MatchString(f.Tag) {
			p.addf(field+" tag", "%q is not 1 to 36 letters, digits, '.', '_' or '-'", f.Tag)
		} else if tags[f.Tag] {
			p.addf(field+" tag", "%q is another filesystem's tag too", f.Tag)
		}
		tags[f.Tag] = true
		if f.Binary != "" {
			p.add(field+" binary", absPath(f.Binary))
		}
	}
}
