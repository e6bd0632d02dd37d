package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"

	"github.com/hashicorp/hcl/v2"
)

// Defaults of a profile.
const (
	DefaultVCPUs        = 2
	DefaultMemory       = 4 << 30
	DefaultLease        = 8 * time.Hour
	DefaultMaxLease     = 24 * time.Hour
	DefaultLeaseWarning = 30 * time.Minute
	DefaultLeaseGrace   = 24 * time.Hour
	DefaultNetwork      = "default"
	DefaultNetworkModel = "virtio"
	MaxVCPUs            = 256
	MinMemory           = 64 << 20
	MaxPriority         = 1000
)

var (
	osFamilies    = []string{"linux", "windows"}
	firmwares     = []string{"bios", "uefi"}
	imageFormats  = []string{"qcow2", "raw"}
	networkTypes  = []string{"network", "bridge", "none"}
	networkModels = []string{"virtio", "e1000e", "e1000", "rtl8139"}
	displayTypes  = []string{"vnc", "spice", "none"}
	classes       = []string{ClassInteractive, ClassBatch}
)

func (r *resolver) resolveImage(b *imageBlock) {
	if !r.checkName("image", b.Name, b.LabelRange) {
		return
	}
	if first, dup := r.cfg.Images[b.Name]; dup {
		r.errf(b.LabelRange, "Duplicate image", "Image %q is defined twice; the first is at %s.", b.Name, rangeString(first.DeclRange))
		return
	}
	img := &Image{
		Name:        b.Name,
		Description: str(b.Description, ""),
		Format:      str(b.Format, "qcow2"),
		OS:          str(b.OS, "linux"),
		Firmware:    str(b.Firmware, "uefi"),
		User:        str(b.User, ""),
		DeclRange:   b.DefRange,
	}
	ok := r.oneOf(b.Body, "format", img.Format, imageFormats, b.DefRange)
	ok = r.oneOf(b.Body, "os", img.OS, osFamilies, b.DefRange) && ok
	ok = r.oneOf(b.Body, "firmware", img.Firmware, firmwares, b.DefRange) && ok
	switch {
	case b.Imported != nil && (b.Path != nil || b.Volume != nil || b.Format != nil || b.Pool != nil):
		for _, attr := range []string{"path", "volume", "pool", "format"} {
			if has(b.Body, attr) {
				r.errf(attrRange(b.Body, attr, b.DefRange), "imported excludes "+attr, "An imported image is in the store: its volume, pool and format are the record's. Leave %s out.", attr)
			}
		}
		ok = false
	case b.Imported != nil:
		img.Imported, img.Format = *b.Imported, ""
		if !namePattern.MatchString(img.Imported) {
			r.errf(valueRange(b.Body, "imported", b.DefRange), "Invalid imported image", "%q is not an image name (1–63 lower-case letters, digits, '.', '_', '-').", img.Imported)
			ok = false
		}
		if b.Version != nil {
			img.Version = *b.Version
			if img.Version < 1 {
				r.errf(valueRange(b.Body, "version", b.DefRange), "Invalid version", "Image versions start at 1; leave version out to follow the newest.")
				ok = false
			}
		}
	case b.Path != nil && b.Volume != nil:
		r.errf(attrRange(b.Body, "volume", b.DefRange), "path and volume exclude each other", "An image is a file (path) or a libvirt volume (volume), not both.")
		ok = false
	case b.Path != nil:
		img.Path = *b.Path
		if img.Path == "" {
			r.errf(valueRange(b.Body, "path", b.DefRange), "Invalid path", "The image path may not be empty.")
			ok = false
		} else if !filepath.IsAbs(img.Path) {
			img.Path = filepath.Join(r.cfg.Server.Libvirt.ImagesDir, img.Path)
		}
		if b.Pool != nil {
			r.errf(attrRange(b.Body, "pool", b.DefRange), "pool is for volumes", "pool names the storage pool of a volume; this image is a file (path).")
			ok = false
		}
	case b.Volume != nil:
		img.Volume = *b.Volume
		img.Pool = str(b.Pool, r.cfg.Server.Libvirt.StoragePool)
		if img.Volume == "" || strings.Contains(img.Volume, "/") {
			r.errf(valueRange(b.Body, "volume", b.DefRange), "Invalid volume", "%q is not a libvirt volume name (a name in the pool, not a path).", img.Volume)
			ok = false
		}
	case has(b.Body, "path") || has(b.Body, "volume") || has(b.Body, "imported"):
		ok = false // its value is wrong, and reported
	default:
		r.errf(b.DefRange, "Image has no source", "Image %q needs path (a qcow2 or raw file; relative to server.libvirt.images_dir), volume (a volume of the storage pool) or imported (an image imported with gpuvm admin image import).", b.Name)
		ok = false
	}
	if b.Version != nil && b.Imported == nil {
		r.errf(attrRange(b.Body, "version", b.DefRange), "version is for imported images", "version pins a version of an imported image; this image names no imported one.")
		ok = false
	}
	if b.DriversISO != nil {
		img.DriversISO = *b.DriversISO
		switch {
		case img.DriversISO == "":
			r.errf(valueRange(b.Body, "drivers_iso", b.DefRange), "Invalid path", "drivers_iso may not be empty.")
			ok = false
		case !filepath.IsAbs(img.DriversISO):
			img.DriversISO = filepath.Join(r.cfg.Server.Libvirt.ImagesDir, img.DriversISO)
		}
		if img.OS != "windows" {
			r.warnf(attrRange(b.Body, "drivers_iso", b.DefRange), "Drivers ISO on a Linux image", "drivers_iso is meant for Windows images (the virtio-win drivers); Linux has virtio drivers built in.")
		}
	}
	if b.GuestDriver != nil {
		img.GuestDriver = *b.GuestDriver
		if !gpu.ValidDriverVersion(img.GuestDriver) {
			r.errf(valueRange(b.Body, "guest_driver", b.DefRange), "Invalid guest driver version", "%q is not an NVIDIA driver version: write it as nvidia-smi prints it in the guest, \"550.90.07\" (branch.minor[.patch]).", img.GuestDriver)
			ok = false
		}
	}
	if b.User != nil && !principalPattern.MatchString(img.User) {
		r.errf(valueRange(b.Body, "user", b.DefRange), "Invalid user", "%q is not a user name.", img.User)
		ok = false
	}
	if ok {
		r.cfg.Images[b.Name] = img
	} else {
		r.cfg.Images[b.Name] = nil // known, so references to it are not errors too
	}
}

func (r *resolver) resolveProfile(b *profileBlock) {
	if !r.checkName("profile", b.Name, b.LabelRange) {
		return
	}
	if first, dup := r.cfg.Profiles[b.Name]; dup {
		where := "elsewhere"
		if first != nil {
			where = rangeString(first.DeclRange)
		}
		r.errf(b.LabelRange, "Duplicate profile", "Profile %q is defined twice; the first is at %s. Profile names are unique across all files of a configuration.", b.Name, where)
		return
	}
	body, def := b.Body, b.DefRange
	before := r.errorCount()
	p := &Profile{
		Name:        b.Name,
		Description: str(b.Description, ""),
		VCPUs:       DefaultVCPUs,
		Class:       str(b.Class, ClassInteractive),
		Users:       append([]string{}, b.Users...),
		Groups:      append([]string{}, b.Groups...),
		Source:      fmt.Sprintf("%s:%d", def.Filename, def.Start.Line),
		DeclRange:   def,
	}
	// Keep the name taken even when the profile has errors, so a second
	// definition is reported as a duplicate.
	r.cfg.Profiles[b.Name] = p
	r.resolveSizes(b, p)
	img := r.resolveBootSource(b, p)
	r.resolveOS(b, p, img)
	r.resolveNetwork(b, p)
	if b.GPU != nil {
		p.GPU = r.resolveGPUNeed(b)
	}

	r.resolveDisplay(b, p)
	r.resolveDesktop(b, p) // desktop.go

	if ci := b.CloudInit; ci != nil {
		p.CloudInit = r.resolveCloudInit(ci)
	}

	p.Lease = r.resolveLease(b.Lease)
	r.resolveProfileLicensing(b, p) // licensing.go
	r.resolveProfileHome(b, p)      // storage.go
	r.resolveProfileShares(b, p)    // shares.go

	r.resolveAccess(b, p)

	if p.GPU != nil && r.errorCount() == before {
		r.checkSatisfiable(b, p.GPU)
	}
	if p.Boot != nil && p.Boot.Kernel != "" && img == nil && p.OS == "windows" {
		r.errf(valueRange(body, "os", def), "Windows from a kernel", "Direct kernel boot starts a Linux kernel; os = \"windows\" needs a disk image.")
	}
}

// resolveSizes reads the profile's vCPUs and memory.
func (r *resolver) resolveSizes(b *profileBlock, p *Profile) {
	body, def := b.Body, b.DefRange
	if b.VCPUs != nil {
		p.VCPUs = *b.VCPUs
		if p.VCPUs < 1 || p.VCPUs > MaxVCPUs {
			r.errf(valueRange(body, "vcpus", def), "Invalid vcpus", "vcpus is from 1 to %d, not %d.", MaxVCPUs, p.VCPUs)
		}
	}
	p.Memory, _ = r.size(body, "memory", b.Memory, DefaultMemory, def)
	if p.Memory < MinMemory {
		r.errf(valueRange(body, "memory", def), "Invalid memory", "A VM needs at least %s of memory; %s is too little.", FormatSize(MinMemory), FormatSize(p.Memory))
	}
}

// resolveBootSource reads the disk (an overlay on an image, which it
// returns) and the direct kernel boot; a profile needs one or both.
func (r *resolver) resolveBootSource(b *profileBlock, p *Profile) *Image {
	body, def := b.Body, b.DefRange
	var img *Image
	if d := b.Disk; d != nil {
		p.Disk = &Disk{}
		if d.Image == nil && has(d.Body, "image") {
			// its value is wrong, and reported
		} else if d.Image == nil {
			r.errf(d.DefRange, "Missing image", "A disk is an overlay on a base image: write image = \"NAME\", the name of an image block.")
		} else {
			p.Disk.Image = *d.Image
			i, known := r.cfg.Images[*d.Image]
			if !known {
				r.errf(valueRange(d.Body, "image", d.DefRange), "Unknown image", "No image block is named %q.%s%s", *d.Image, suggestion(*d.Image, sortedKeys(r.cfg.Images)), knownList("images", sortedKeys(r.cfg.Images)))
			}
			img = i
		}
		p.Disk.Size, _ = r.size(d.Body, "size", d.Size, 0, d.DefRange)
		if d.Size != nil && p.Disk.Size < 1<<30 {
			r.errf(valueRange(d.Body, "size", d.DefRange), "Invalid size", "A system disk of %s is too small; write at least 1GiB, or leave size out to keep the image's size.", FormatSize(p.Disk.Size))
		}
	}
	if bt := b.Boot; bt != nil {
		p.Boot = &Boot{Kernel: r.path(bt.Kernel, bt.DefRange), Cmdline: str(bt.Cmdline, "")}
		if bt.Kernel == "" {
			r.errf(valueRange(bt.Body, "kernel", bt.DefRange), "Invalid kernel", "kernel is the path of a kernel image to boot directly.")
		}
		if bt.Initrd != nil {
			p.Boot.Initrd = r.path(*bt.Initrd, bt.DefRange)
		}
	}
	if !hasBlock(body, "disk") && !hasBlock(body, "boot") {
		r.errf(def, "Profile has nothing to boot", "Profile %q needs a disk block (disk { image = \"NAME\" }) or a boot block (boot { kernel = \"PATH\" }), or both.", b.Name)
	}
	return img
}

// resolveOS reads the OS family and firmware (the image's unless the
// profile says) and the TPM.
func (r *resolver) resolveOS(b *profileBlock, p *Profile, img *Image) {
	body, def := b.Body, b.DefRange
	p.OS, p.Firmware = "linux", "bios"
	if img != nil {
		p.OS, p.Firmware = img.OS, img.Firmware
	} else if b.Disk != nil {
		p.Firmware = "uefi"
	}
	if b.OS != nil {
		if r.oneOf(body, "os", *b.OS, osFamilies, def) && img != nil && *b.OS != img.OS {
			r.warnf(valueRange(body, "os", def), "OS differs from the image", "Profile %q says os = %q but image %q is %s.", b.Name, *b.OS, img.Name, img.OS)
		}
		p.OS = *b.OS
	}
	if b.Firmware != nil {
		r.oneOf(body, "firmware", *b.Firmware, firmwares, def)
		p.Firmware = *b.Firmware
	}
	if b.TPM != nil {
		p.TPM = *b.TPM
	}
}

// resolveNetwork reads the network block.
func (r *resolver) resolveNetwork(b *profileBlock, p *Profile) {
	p.Network = Network{Type: "network", Source: DefaultNetwork, Model: DefaultNetworkModel}
	if n := b.Network; n != nil {
		p.Network.Type = str(n.Type, "network")
		if r.oneOf(n.Body, "type", p.Network.Type, networkTypes, n.DefRange) {
			switch p.Network.Type {
			case "none":
				p.Network.Source, p.Network.Model = "", ""
				for _, a := range []string{"source", "model"} {
					if has(n.Body, a) {
						r.errf(attrRange(n.Body, a, n.DefRange), a+" does not apply", "A network of type \"none\" has no %s.", a)
					}
				}
			case "bridge":
				if n.Source == nil || *n.Source == "" {
					r.errf(n.DefRange, "Missing source", "A network of type \"bridge\" needs source, the host bridge (e.g. \"br0\").")
				}
			}
		}
		if p.Network.Type != "none" {
			p.Network.Source = str(n.Source, p.Network.Source)
			p.Network.Model = str(n.Model, p.Network.Model)
			r.oneOf(n.Body, "model", p.Network.Model, networkModels, n.DefRange)
		}
	}
}

// resolveDisplay reads the display block, and whether a vGPU drives it.
func (r *resolver) resolveDisplay(b *profileBlock, p *Profile) {
	p.Display = Display{Type: "vnc"}
	if d := b.Display; d != nil {
		p.Display.Type = str(d.Type, "vnc")
		r.oneOf(d.Body, "type", p.Display.Type, displayTypes, d.DefRange)
		if d.VGPUDisplay != nil {
			p.Display.VGPUDisplay = *d.VGPUDisplay
		}
		if p.Display.VGPUDisplay {
			rng := attrRange(d.Body, "vgpu_display", d.DefRange)
			switch {
			case p.Display.Type == "none":
				r.errf(rng, "vgpu_display needs a display", "The vGPU's display is shown through a VNC or SPICE display: set type = \"vnc\" or \"spice\".")
			case b.GPU == nil:
				r.errf(rng, "vgpu_display needs a vGPU", "Profile %q has no gpu block.", b.Name)
			case p.GPU != nil && p.GPU.Kind == gpu.KindPassthrough:
				r.errf(rng, "vgpu_display needs a vGPU", "A whole GPU given by passthrough has no virtual display; it drives its own outputs.")
			case p.GPU != nil && p.GPU.Kind == gpu.KindAny && !slices.Contains(p.GPU.Kinds, gpu.KindVGPU) && !slices.Contains(p.GPU.Kinds, gpu.KindMIG):
				r.errf(rng, "vgpu_display needs a vGPU", "The gpu block allows only whole GPUs.")
			}
		}
	}
}

// resolveAccess reads who may use the profile, its class and priority.
func (r *resolver) resolveAccess(b *profileBlock, p *Profile) {
	body, def := b.Body, b.DefRange
	for i, u := range b.Users {
		r.checkPrincipal("user", u, listItemRange(body, "users", i, def))
	}
	r.checkDuplicates(body, "users", b.Users, def)
	r.checkGroupRefs(body, "groups", b.Groups, def)

	r.oneOf(body, "class", p.Class, classes, def)
	if b.Priority != nil {
		p.Priority = *b.Priority
		if p.Priority < 0 || p.Priority > MaxPriority {
			r.errf(valueRange(body, "priority", def), "Invalid priority", "priority is from 0 to %d (higher goes first), not %d.", MaxPriority, p.Priority)
		}
	}
}

func knownList(what string, names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf(" No %s are defined.", what)
	}
	if len(names) > 12 {
		names = append(names[:12:12], "…")
	}
	return fmt.Sprintf(" The %s are: %s.", what, strings.Join(names, ", "))
}

// checkGroupRefs checks that every group a list names has a group block in
// policy: group membership lives in the database, but the names files use
// must be declared, so that a typo is an error rather than a silent denial.
func (r *resolver) checkGroupRefs(body hcl.Body, attr string, groups []string, def hcl.Range) {
	known := sortedKeys(r.cfg.Policy.Groups)
	for i, g := range groups {
		rng := listItemRange(body, attr, i, def)
		if _, ok := r.cfg.Policy.Groups[g]; !ok {
			r.errf(rng, "Unknown group", "No group block in policy is named %q. Declare it with policy { group %q {} } (members are kept in gpuvm's database).%s", g, g, suggestion(g, known))
		}
	}
	r.checkDuplicates(body, attr, groups, def)
}

func (r *resolver) resolveLease(b *leaseBlock) Lease {
	l := Lease{Default: DefaultLease, Max: DefaultMaxLease, WarnBefore: DefaultLeaseWarning, OnEnd: LeaseEndStop, Grace: DefaultLeaseGrace}
	if b == nil {
		return l
	}
	var ok1, ok2, ok3 bool
	l.Default, ok1 = r.duration(b.Body, "default", b.Default, DefaultLease, b.DefRange)
	maxDef := DefaultMaxLease
	if b.Max == nil && l.Default > maxDef {
		maxDef = l.Default
	}
	l.Max, ok2 = r.duration(b.Body, "max", b.Max, maxDef, b.DefRange)
	l.IdleStop, ok3 = r.duration(b.Body, "idle_stop", b.IdleStop, 0, b.DefRange)
	if !r.resolveLeaseEnd(b, &l) || !ok1 || !ok2 || !ok3 {
		return l
	}
	switch {
	case l.Default <= 0:
		r.errf(valueRange(b.Body, "default", b.DefRange), "Invalid default", "A lease lasts longer than 0.")
	case l.Max <= 0:
		r.errf(valueRange(b.Body, "max", b.DefRange), "Invalid max", "A lease lasts longer than 0.")
	case l.Default > l.Max:
		r.errf(valueRange(b.Body, "default", b.DefRange), "Lease default above max", "default (%s) is longer than max (%s).", FormatDuration(l.Default), FormatDuration(l.Max))
	case l.IdleStop >= l.Max:
		r.warnf(valueRange(b.Body, "idle_stop", b.DefRange), "idle_stop never fires", "idle_stop (%s) is not shorter than max (%s): the lease ends first.", FormatDuration(l.IdleStop), FormatDuration(l.Max))
	}
	if l.WarnBefore > 0 && l.WarnBefore >= l.Default && l.Default > 0 {
		r.warnf(valueRange(b.Body, "warn_before", b.DefRange), "warn_before too long", "warn_before (%s) is not shorter than default (%s): a VM of the default lease is warned as soon as it starts.", FormatDuration(l.WarnBefore), FormatDuration(l.Default))
	}
	return l
}

var leaseEnds = []string{LeaseEndStop, LeaseEndDelete, LeaseEndKeep}

// resolveLeaseEnd reads what happens at the end of a lease: warn_before,
// on_end and grace.
func (r *resolver) resolveLeaseEnd(b *leaseBlock, l *Lease) bool {
	l.OnEnd = str(b.OnEnd, LeaseEndStop)
	ok := r.oneOf(b.Body, "on_end", l.OnEnd, leaseEnds, b.DefRange)
	var wok, gok bool
	l.WarnBefore, wok = r.duration(b.Body, "warn_before", b.WarnBefore, DefaultLeaseWarning, b.DefRange)
	l.Grace, gok = r.duration(b.Body, "grace", b.Grace, DefaultLeaseGrace, b.DefRange)
	if b.Grace != nil && l.OnEnd != LeaseEndStop {
		r.errf(attrRange(b.Body, "grace", b.DefRange), "grace needs on_end = \"stop\"", "grace is how long a VM stopped at the end of its lease is kept before it is deleted; with on_end = %q it does not apply.", l.OnEnd)
		ok = false
	}
	if l.OnEnd != LeaseEndStop {
		l.Grace = 0
	} else if gok && l.Grace <= 0 {
		r.errf(valueRange(b.Body, "grace", b.DefRange), "Invalid grace", "A grace lasts longer than 0; to delete VMs when their lease ends, write on_end = \"delete\".")
		ok = false
	}
	if wok && l.WarnBefore < 0 {
		r.errf(valueRange(b.Body, "warn_before", b.DefRange), "Invalid warn_before", "warn_before is 0 (no warning) or longer.")
		ok = false
	}
	return ok && wok && gok
}
