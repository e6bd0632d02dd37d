package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/revert"
)

// VMRequest is a whole VM: its domain, its disk overlay, its cloud-init seed.
type VMRequest struct {
	// Spec is the domain. CreateVM adds the overlay and the seed to its
	// disks (first and last) and to its metadata's volumes, and fills an
	// empty DomainType from Accel.
	Spec domain.Spec
	// Pool holds the overlay and the seed.
	Pool string
	// BaseImage, when set, gets a qcow2 overlay "<name>.qcow2" of
	// DiskBytes (0: the base's size) as the VM's first disk.
	BaseImage  string
	BaseFormat domain.DiskFormat
	DiskBytes  uint64
	// Seed, when set, is rendered (with SeedTemplates, nil for the built-in
	// ones) into "<name>-seed.iso", attached as a CD-ROM.
	Seed          *cloudinit.Config
	SeedTemplates fs.FS
}

// SeedNotAttached begins Info.SeedSkipped.
const SeedNotAttached = "cloud-init seed not attached"

// OverlayName is the disk overlay's volume name of a VM.
func OverlayName(vm string) string { return domain.OverlayName(vm) }

// SeedName is the seed volume's name of a VM.
func SeedName(vm string) string { return domain.SeedName(vm) }

// CreateVM creates a VM's volumes, defines its domain and starts it. When a
// step fails it rolls back what it made (domain, overlay, seed) and says so
// in the error, which names the VM, the step and the cause. A retry after a
// failure or a crash is safe: a gpuvm domain of the same UUID is redefined.
func (c *Conn) CreateVM(ctx context.Context, req VMRequest) (Info, error) {
	spec := req.Spec
	name := spec.Name
	if name == "" {
		name = spec.UUID
	}
	fail := func(op string, err error) error { return vmError(name, op, err) }

	if spec.DomainType == "" {
		a, err := c.Accel(ctx)
		if err != nil {
			return Info{}, fail("choose accelerator", err)
		}
		spec.DomainType = a.Type
	}
	// Check what can be checked before touching anything.
	if err := domain.Validate(spec); err != nil {
		return Info{}, fail("check spec", err)
	}
	if (req.BaseImage != "" || req.Seed != nil) && req.Pool == "" {
		return Info{}, fail("check spec", errors.New("a disk overlay or seed needs a storage pool"))
	}
	// A name taken by another domain would make the volume names collide
	// with that domain's: refuse before creating anything.
	if other, err := c.domainUUIDByName(ctx, spec.Name); err == nil && !strings.EqualFold(other, spec.UUID) {
		return Info{}, fail("check name", fmt.Errorf("the name is taken by another domain (UUID %s)", other))
	} else if err != nil && !IsNotFound(err) {
		return Info{}, fail("check name", err)
	}

	// The rollback undoes what was made, last first (revert): the domain,
	// then the volumes. Its steps run under rctx, set when it runs.
	var made []domain.VolumeRef
	var rev revert.Reverter
	rctx := context.WithoutCancel(ctx)
	maybeDefined := false // Define failed, and whether it happened anyway is unknown
	defined := func() {
		rev.AddNamed("domain", func() error { return c.Undefine(rctx, spec.UUID) })
		rev.Add(func() error { return c.Destroy(rctx, spec.UUID) })
	}
	madeVolume := func(v domain.VolumeRef) {
		made = append(made, v)
		rev.AddNamed("volume "+v.Name, func() error { return c.DeleteVolume(rctx, v.Pool, v.Name) })
	}
	rollback := func(op string, cause error) error {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		res := rev.Unwind()
		errs, undone, left := res.Errs, res.Undone, []string{}
		if maybeDefined {
			left = append(left, "the domain, if libvirt defined it")
		}
		for _, what := range res.Left {
			if what == "domain" {
				what = "the domain"
			}
			left = append(left, what)
		}
		note := "nothing to roll back"
		if len(undone) > 0 {
			note = "rolled back: removed " + strings.Join(undone, ", ")
		}
		if len(errs) > 0 || len(left) > 0 {
			rerr := errors.Join(errs...)
			c.log.Error("VM creation failed and its rollback too", "vm", name, "uuid", spec.UUID, "op", op, "err", cause, "left", left, "rollback", rerr)
			why := fmt.Sprint(rerr)
			if allDisconnected(errs) {
				why = "lost the connection to libvirt"
			}
			if len(undone) > 0 {
				why += "; removed " + strings.Join(undone, ", ")
			}
			return fail(op, fmt.Errorf("%w (rollback incomplete: %s; left: %s; CleanupVM removes them)", clean(cause), why, strings.Join(left, ", ")))
		}
		c.log.Warn("VM creation failed; rolled back", "vm", name, "uuid", spec.UUID, "op", op, "err", clean(cause))
		return fail(op, fmt.Errorf("%w (%s)", clean(cause), note))
	}

	var disks []domain.Disk
	seedSkipped := ""
	if req.BaseImage != "" {
		vol := OverlayName(spec.Name)
		exists, err := c.VolumeExists(ctx, req.Pool, vol)
		if err != nil {
			return Info{}, rollback("create disk overlay", err)
		}
		if exists {
			c.log.Info("disk overlay exists; reusing it", "vm", name, "pool", req.Pool, "volume", vol)
		} else if _, err := c.CreateOverlay(ctx, Overlay{Pool: req.Pool, Name: vol, Base: req.BaseImage, BaseFormat: req.BaseFormat, SizeBytes: req.DiskBytes}); err != nil {
			return Info{}, rollback("create disk overlay", err)
		}
		madeVolume(domain.VolumeRef{Pool: req.Pool, Name: vol})
		disks = append(disks, domain.Disk{Pool: req.Pool, Volume: vol, Format: domain.FormatQCOW2})
	}
	disks = append(disks, spec.Disks...)
	if req.Seed != nil {
		vol := SeedName(spec.Name)
		iso, err := cloudinit.Seed(*req.Seed, req.SeedTemplates, time.Now())
		if err != nil {
			return Info{}, rollback("make cloud-init seed", err)
		}
		// A seed left by an earlier attempt may hold other settings.
		if err := c.DeleteVolume(ctx, req.Pool, vol); err != nil {
			return Info{}, rollback("make cloud-init seed", err)
		}
		switch _, err := c.UploadVolume(ctx, req.Pool, vol, iso); {
		case errors.Is(err, ErrNoUpload):
			// The seed is made and valid; the driver cannot hold it.
			seedSkipped = fmt.Sprintf("%s: libvirt's %s driver cannot store volume contents (%s)", SeedNotAttached, strings.ToLower(c.driver), libvirtCause(err))
			c.log.Warn("the VM starts without its cloud-init seed", "vm", name, "pool", req.Pool, "volume", vol, "driver", c.driver, "err", clean(err))
		case err != nil:
			return Info{}, rollback("upload cloud-init seed", err)
		default:
			madeVolume(domain.VolumeRef{Pool: req.Pool, Name: vol})
			disks = append(disks, domain.Disk{Pool: req.Pool, Volume: vol, CDROM: true})
		}
	}
	spec.Disks = disks
	spec.Metadata.Volumes = append(append([]domain.VolumeRef(nil), spec.Metadata.Volumes...), made...)

	if _, err := c.Define(ctx, spec); err != nil {
		// Define may have happened anyway (a timeout): look before leaving.
		switch _, lerr := c.Lookup(context.WithoutCancel(ctx), spec.UUID); {
		case lerr == nil:
			defined()
		case !IsNotFound(lerr):
			maybeDefined = true
		}
		return Info{}, rollback("define", unwrapVM(err))
	}
	defined()
	if err := c.Start(ctx, spec.UUID); err != nil {
		err = unwrapVM(err)
		if len(spec.Hostdevs) > 0 && !IsDisconnected(err) {
			// Busy, missing or unusable GPU devices are the usual reason.
			err = fmt.Errorf("%w [host devices: %s]", err, hostdevList(spec.Hostdevs))
		}
		return Info{}, rollback("start", err)
	}
	info, err := c.Lookup(ctx, spec.UUID)
	if err != nil {
		return Info{}, rollback("check state", unwrapVM(err))
	}
	info.SeedSkipped = seedSkipped
	c.log.Info("VM created", "vm", name, "uuid", info.UUID, "type", spec.DomainType, "state", info.State)
	return info, nil
}

// libvirtCause is libvirt's own message in err ("this function is not
// supported by the connection driver: virStorageVolUpload"), else err's.
func libvirtCause(err error) string {
	var lv *libvirtError
	if errors.As(err, &lv) {
		return lv.Error()
	}
	return err.Error()
}

// allDisconnected reports whether every error in errs (at least one) is a
// lost connection.
func allDisconnected(errs []error) bool {
	for _, err := range errs {
		if !IsDisconnected(err) {
			return false
		}
	}
	return len(errs) > 0
}

// hostdevList names a VM's host devices for people: "PCI 0000:41:00.4,
// mdev 8a0c…".
func hostdevList(hs []domain.Hostdev) string {
	var out []string
	for _, h := range hs {
		switch h.Type {
		case domain.HostdevMdev:
			out = append(out, "mdev "+h.UUID)
		default:
			for _, a := range h.Addresses {
				out = append(out, "PCI "+a)
			}
		}
	}
	return strings.Join(out, ", ")
}

// unwrapVM strips a VMError, whose VM the caller names again.
func unwrapVM(err error) error {
	var ve *VMError
	if errors.As(err, &ve) {
		return ve.Err
	}
	return err
}

func (c *Conn) domainUUIDByName(ctx context.Context, name string) (string, error) {
	d, err := c.lookupName(ctx, name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	return call(ctx, c, "domain uuid", 0, d.GetUUIDString, nil)
}

// DeleteVM shuts the VM down (ACPI, then destroy after shutdownTimeout),
// undefines its domain and deletes the volumes its metadata lists. A missing
// domain is not an error; a domain that is not gpuvm's is refused.
func (c *Conn) DeleteVM(ctx context.Context, uuid string, shutdownTimeout time.Duration) error {
	info, err := c.Lookup(ctx, uuid)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := c.Shutdown(ctx, uuid, shutdownTimeout); err != nil {
		return err
	}
	if err := c.Undefine(ctx, uuid); err != nil {
		return err
	}
	var errs []error
	for _, v := range info.Metadata.Volumes {
		if err := c.DeleteVolume(ctx, v.Pool, v.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return vmError(info.Name, "delete volumes", errors.Join(errs...))
	}
	c.log.Info("VM deleted", "vm", info.Name, "uuid", info.UUID, "volumes", len(info.Metadata.Volumes))
	return nil
}

// CleanupVM removes whatever CreateVM may have left of a VM whose creation
// did not finish, or whose rollback could not run (gpuvmd stopped, libvirtd
// stopped midway: the error then says "rollback incomplete"): the gpuvm
// domain with uuid, stopped at once and undefined, the volumes its metadata
// lists, and the disk overlay and seed named after the VM in pool (pool may
// be empty when the VM had neither). What is missing is skipped, so
// CleanupVM may be called again, and on a VM that never got anywhere; the
// reconciler calls it for VMs whose creation failed. It refuses, touching
// nothing, when name belongs to another domain (the volumes would be that
// domain's) or uuid to a domain that is not gpuvm's.
func (c *Conn) CleanupVM(ctx context.Context, uuid, name, pool string) error {
	vm := name
	if vm == "" {
		vm = uuid
	}
	if err := domain.ValidUUID(uuid); err != nil {
		return vmError(vm, "clean up", err)
	}
	if name != "" {
		other, err := c.domainUUIDByName(ctx, name)
		switch {
		case err == nil && !strings.EqualFold(other, uuid):
			return vmError(vm, "clean up", fmt.Errorf("the name is taken by another domain (UUID %s): its volumes are left alone", other))
		case err != nil && !IsNotFound(err):
			return vmError(vm, "clean up", err)
		}
	}
	var vols []domain.VolumeRef
	info, err := c.Lookup(ctx, uuid)
	switch {
	case err == nil:
		if err := c.Destroy(ctx, uuid); err != nil {
			return err
		}
		if err := c.Undefine(ctx, uuid); err != nil {
			return err
		}
		vols = append(vols, info.Metadata.Volumes...)
		if name == "" {
			name = info.Name
		}
	case !IsNotFound(err):
		return err
	}
	if pool != "" && name != "" {
		vols = append(vols, domain.VolumeRef{Pool: pool, Name: OverlayName(name)}, domain.VolumeRef{Pool: pool, Name: SeedName(name)})
	}
	seen := map[domain.VolumeRef]bool{}
	var errs []error
	removed := 0
	for _, v := range vols {
		if seen[v] {
			continue
		}
		seen[v] = true
		exists, err := c.VolumeExists(ctx, v.Pool, v.Name)
		if err == nil && exists {
			err = c.DeleteVolume(ctx, v.Pool, v.Name)
			removed++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return vmError(vm, "clean up volumes", errors.Join(errs...))
	}
	c.log.Info("VM cleaned up", "vm", vm, "uuid", uuid, "domain", info.Name != "", "volumes removed", removed)
	return nil
}
