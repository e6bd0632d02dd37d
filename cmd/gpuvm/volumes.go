package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// gpuvm volume create|ls|show|resize|rm|attach|detach: data disks
// (docs/volumes.md).

const volumeLong = `Data disks: block volumes of your own on the server, attached to one of your
VMs at a time as a virtio disk. The guest finds one at
/dev/disk/by-id/virtio-<the first 20 characters of its ID> (gpuvm volume show
says where). Deleting a VM detaches its disks and keeps them; a disk is
attached or detached while its VM is stopped or queued, and is there at the
VM's next start. The policy bounds what your disks hold together
(storage.disk_quota).`

func newVolumeCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Your data disks: create, list, show, resize, delete, attach, detach",
		Long:    volumeLong,
		Example: "  gpuvm volume create scratch --size 20GiB\n  gpuvm create l40s-seat --name box --volume scratch\n  gpuvm volume attach scratch box\n  gpuvm volume detach scratch\n  gpuvm volume rm scratch",
	}
	cmd.AddCommand(newVolumeCreateCmd(getenv), newVolumeLsCmd(getenv), newVolumeOneCmd(getenv, "show"), newVolumeResizeCmd(getenv),
		newVolumeOneCmd(getenv, "rm"), newVolumeAttachCmd(getenv), newVolumeOneCmd(getenv, "detach"), newVolumeAdoptCmd(getenv))
	return cmd
}

func newVolumeAdoptCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var owner, name string
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "adopt FILE --owner USER",
		Short: "Make an orphaned data disk a person's volume again (admin)",
		Long: `Makes an orphaned data disk of this installation — a file of the storage pool
named as gpuvm names data disks, whose volume row the database lost (an older
backup restored) — a detached data disk of USER again, called --name (default
"adopted-" and the end of its ID). FILE is the orphan's pool/name as
'gpuvm admin orphans' lists it, or its file name. Its size is read from the
pool; the disk quota is not checked. Another installation's disk cannot be
adopted: delete it with 'gpuvm admin orphans delete ID --yes'. gpuvm never
removes an orphan on its own.

Output: the volume; --json prints the api.Volume; --quiet its ID only.
` + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "the orphaned disk's pool/name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if owner == "" {
				return usageError{errors.New("--owner is required: the user the disk is to belong to")}
			}
			v, err := c.AdoptVolume(ctx, api.AdoptVolumeRequest{File: args[0], Owner: owner, Name: name})
			if err != nil {
				return err
			}
			return printVolume(cmd.OutOrStdout(), v, out)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&owner, "owner", "", "the user the disk is to belong to (required)")
	cmd.Flags().StringVar(&name, "name", "", "its name among the owner's volumes")
	out.flags(cmd, "print the volume's ID only")
	return cmd
}

func newVolumeCreateCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var size string
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "create NAME --size SIZE",
		Short: "Make a data disk",
		Long:  "Makes an empty data disk of SIZE (a binary unit: 512MiB, 20GiB, 1TiB).\n\nOutput: the disk; --json prints the api.Volume; --quiet its ID only.\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(1, "one volume name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if size == "" {
				return usageError{errors.New("--size is required, e.g. --size 20GiB")}
			}
			v, err := c.CreateVolume(ctx, args[0], size)
			if err != nil {
				return err
			}
			return printVolume(cmd.OutOrStdout(), v, out)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&size, "size", "", "the disk's size, e.g. 20GiB")
	out.flags(cmd, "print the volume's ID only")
	return cmd
}

func newVolumeLsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your data disks",
		Long:    "Lists your data disks (and your home, when the server gives homes): name, size, what it uses and its quota (a home's as last measured), state, the VM it is attached to.\n\nOutput: a table; --json prints the api.VolumeList; --quiet the IDs only.\n" + connectionHelp + "\n" + exitHelp,
		Args:    exactArgs(0, "no arguments"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.ListVolumes(ctx)
			if err != nil {
				return err
			}
			return printVolumes(cmd.OutOrStdout(), list, out)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the volumes' IDs only")
	return cmd
}

// newVolumeOneCmd is show, rm or detach: one volume, no more.
func newVolumeOneCmd(getenv func(string) string, verb string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	var wait bool
	short := map[string]string{"show": "Show a data disk", "rm": "Delete a detached data disk and its data", "detach": "Detach a data disk from its VM (unplugged from a running one)"}[verb]
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Long:  short + " (its name or ID).\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(1, "one volume name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			var v *api.Volume
			var err error
			switch verb {
			case "show":
				v, err = c.GetVolume(ctx, args[0])
			case "detach":
				if v, err = c.DetachVolume(ctx, args[0]); err == nil {
					v, err = volumePlugged(ctx, c, cmd, v, verb, wait)
				}
			default:
				if err = c.DeleteVolume(ctx, args[0]); err == nil && !out.quiet && !out.json {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "volume %s deleted\n", args[0])
				}
				return err
			}
			if err != nil {
				return err
			}
			return printVolume(cmd.OutOrStdout(), v, out)
		}),
	}
	if verb == "rm" {
		cmd.Aliases = []string{"delete"}
	}
	if verb == "detach" {
		cmd.Long = "Detaches a data disk from its VM. A stopped or queued VM no longer has it at its next start; a running VM's guest is asked to let it go (unmount it first), and the disk stays attached until it has (a guest that keeps it 30 s fails the detach; the disk stays attached).\n" + connectionHelp + "\n" + exitHelp
		cmd.Flags().BoolVar(&wait, "wait", false, "wait until a running VM's guest has let the disk go")
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the volume's ID only")
	return cmd
}

func newVolumeResizeCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var size string
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "resize NAME --size SIZE",
		Short: "Grow a data disk (detached, or its VM stopped)",
		Long:  "Grows a data disk to SIZE; disks never shrink. Grow the file system inside the guest afterwards (resize2fs).\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(1, "one volume name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if size == "" {
				return usageError{errors.New("--size is required, e.g. --size 40GiB")}
			}
			v, err := c.ResizeVolume(ctx, args[0], size)
			if err != nil {
				return err
			}
			return printVolume(cmd.OutOrStdout(), v, out)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&size, "size", "", "the new size, e.g. 40GiB")
	out.flags(cmd, "print the volume's ID only")
	return cmd
}

func newVolumeAttachCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	var wait bool
	cmd := &cobra.Command{
		Use:   "attach NAME VM",
		Short: "Attach a data disk to your VM (plugged in at once when it runs)",
		Long: "Attaches a data disk to a VM of yours on the same host: a running VM has it plugged in at once (a new virtio disk in the guest, " +
			"/dev/disk/by-id/virtio-<the disk's ID>), a stopped or queued one has it at its next start. A disk attached to another VM is refused: detach it first.\n" + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(2, "a volume and a VM"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			v, err := c.AttachVolume(ctx, args[0], args[1])
			if err == nil {
				v, err = volumePlugged(ctx, c, cmd, v, "attach", wait)
			}
			if err != nil {
				return err
			}
			return printVolume(cmd.OutOrStdout(), v, out)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until a running VM has the disk plugged in")
	out.flags(cmd, "print the volume's ID only")
	return cmd
}

// volumePlugged follows, with wait, the operation that plugs a disk into or
// out of a running VM (v.OperationID) to its end: a failure is the
// command's (its reason on standard error); done, the volume as it is now.
// Without wait, or for a VM that does not run, v as answered.
func volumePlugged(ctx context.Context, c *client.Client, cmd *cobra.Command, v *api.Volume, verb string, wait bool) (*api.Volume, error) {
	if !wait || v.OperationID == "" {
		return v, nil
	}
	last, err := c.WaitOperation(ctx, v.OperationID, func(api.Operation) {})
	if err != nil {
		return nil, err
	}
	if last.State != api.OpDone {
		fmt.Fprintf(cmd.ErrOrStderr(), "gpuvm: the %s failed: %s\n", verb, orDash(last.Error))
		return nil, exitError{exitFailure}
	}
	now, err := c.GetVolume(ctx, v.ID)
	if err != nil {
		return nil, err
	}
	return now, nil
}

func printVolume(w io.Writer, v *api.Volume, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, v)
	case out.quiet:
		_, err := fmt.Fprintln(w, v.ID)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s\nID:\t%s\nSize:\t%s\nState:\t%s\n", v.Name, v.ID, config.FormatSize(uint64(max(v.SizeBytes, 0))), v.State)
	if v.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", v.Error)
	}
	fmt.Fprintf(tw, "Host:\t%s\nAttached to:\t%s\nIn the guest:\t%s\n", orDash(v.Host), orDash(v.AttachedVMName), orDash(v.GuestDevice))
	if v.OperationID != "" {
		what := "plugging it into the running VM"
		if v.State == api.VolumeDetaching {
			what = "unplugging it from the running VM"
		}
		fmt.Fprintf(tw, "Operation:\t%s (%s; --wait follows it)\n", v.OperationID, what)
	}
	return tw.Flush()
}

func printVolumes(w io.Writer, list *api.VolumeList, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, list)
	case out.quiet:
		for _, v := range list.Volumes {
			if v.ID != "" {
				fmt.Fprintln(w, v.ID)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSIZE\tUSED\tQUOTA\tSTATE\tATTACHED TO\tID")
	var notes []string
	for _, v := range list.Volumes {
		size := "-"
		if v.Kind != api.VolumeHome {
			size = config.FormatSize(uint64(max(v.SizeBytes, 0)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Kind, size, sizeOrDash(v.UsedBytes), volumeQuota(v), v.State,
			orDash(v.AttachedVMName), orDash(v.ID))
		switch {
		case v.Kind != api.VolumeHome:
		case v.Enforcement == "none":
			notes = append(notes, fmt.Sprintf("your home's quota is not enforced: %s", orDash(v.Note)))
		case v.Note != "": // an image home not (yet) the size of its quota
			notes = append(notes, v.Note)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	if list.QuotaBytes != nil {
		_, err := fmt.Fprintf(w, "%s of %s used (%s)\n", config.FormatSize(list.UsedBytes), config.FormatSize(*list.QuotaBytes), list.Rule)
		return err
	}
	return nil
}

// sizeOrDash writes a size, or "-" when it is not known.
func sizeOrDash(n *uint64) string {
	if n == nil {
		return "-"
	}
	return config.FormatSize(*n)
}

// volumeQuota is a volume's QUOTA: a home's limit ("none" without one, "-"
// before the home quotas read it); a data disk counts in the disk quota
// under the table ("-").
func volumeQuota(v api.Volume) string {
	switch {
	case v.Kind != api.VolumeHome || v.UsedBytes == nil:
		return "-"
	case v.QuotaBytes == nil:
		return "none"
	}
	return config.FormatSize(*v.QuotaBytes)
}
