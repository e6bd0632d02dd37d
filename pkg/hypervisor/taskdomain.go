package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// PrepareTask readies the shut-off gpuvm domain with uuid for its next
// start, for a task run in a VM that was not made for it (docs/tasks.md,
// --in) or for a start after one: with a seed, the domain gets the task
// channel (domain.TaskChannelName) when it lacks it, and its cloud-init
// seed volume in pool is replaced by seed (which carries the task's
// runner); without one, the task channel goes and the seed is left as it
// is. A domain whose seed is not attached (made on a driver that cannot
// store volume contents) gets the channel only, which is logged. Like
// ReplaceHostdevs it redefines nothing when the domain is already so, and
// refuses a running domain; a missing one is IsNotFound.
func (c *Conn) PrepareTask(ctx context.Context, uuid, pool string, seed *cloudinit.Config) error {
	const op = "prepare task"
	want := seed != nil
	var seedVol string
	err := c.redefine(ctx, uuid, op, "task channel", func(d *libvirtxml.Domain) (bool, error) {
		seedVol = attachedSeed(d, pool, SeedName(d.Name))
		return domain.SetTaskChannel(d, want), nil
	}, func(name string) {
		c.log.Info("domain redefined with its task channel", "vm", name, "uuid", uuid, "task_channel", want)
	})
	if err != nil || !want {
		return err
	}
	if seedVol == "" {
		c.log.Warn("the domain has no cloud-init seed attached: the task's runner is not delivered", "uuid", uuid, "pool", pool)
		return nil
	}
	iso, err := cloudinit.Seed(*seed, nil, time.Now())
	if err != nil {
		return vmError(uuid, op, fmt.Errorf("make cloud-init seed: %w", err))
	}
	if err := c.DeleteVolume(ctx, pool, seedVol); err != nil {
		return vmError(uuid, op, fmt.Errorf("replace cloud-init seed: %w", err))
	}
	switch _, err := c.UploadVolume(ctx, pool, seedVol, iso); {
	case errors.Is(err, ErrNoUpload):
		c.log.Warn("the domain's cloud-init seed cannot be replaced on this driver", "uuid", uuid, "driver", c.driver, "err", clean(err))
	case err != nil:
		return vmError(uuid, op, fmt.Errorf("upload cloud-init seed: %w", err))
	}
	return nil
}

// attachedSeed is name when d has it, a CD-ROM of pool, attached.
func attachedSeed(d *libvirtxml.Domain, pool, name string) string {
	if d.Devices == nil {
		return ""
	}
	if slices.ContainsFunc(d.Devices.Disks, func(k libvirtxml.DomainDisk) bool {
		return k.Device == "cdrom" && k.Source != nil && k.Source.Volume != nil && k.Source.Volume.Pool == pool && k.Source.Volume.Volume == name
	}) {
		return name
	}
	return ""
}
