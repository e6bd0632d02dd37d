package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// gpuvm snapshot VM [--label L], and its subcommands ls, restore and rm:
// disk snapshots of a VM's system disk (docs/snapshots.md).

type snapshotOpts struct {
	label string
	wait  bool
	out   outputOpts
}

const snapshotLong = `Disk snapshots of a VM's system disk: taken while it runs (its file systems
frozen through the guest agent when it answers: "quiesced"; else
"crash-consistent", as after a power cut) or while it is stopped; restored
only while it is stopped. Memory is never saved. The policy may limit how
many you keep (snapshots.keep) and how long they live (snapshots.expire_after).

A VM named ls, restore or rm is named by its ID here.`

func newSnapshotCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var opts snapshotOpts
	cmd := &cobra.Command{
		Use:   "snapshot VM",
		Short: "Snapshot a VM's disk; list, restore and delete its snapshots",
		Long: snapshotLong + `

Output: a line by default; --json prints the api.SnapshotResponse; --quiet the
snapshot's ID only.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm snapshot box --label before-upgrade\n  gpuvm snapshot ls box\n  gpuvm snapshot restore box before-upgrade\n  gpuvm snapshot rm box before-upgrade",
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := opts.out.check(); err != nil {
				return err
			}
			resp, err := c.CreateSnapshot(ctx, args[0], opts.label)
			if err != nil {
				return err
			}
			return snapshotDone(ctx, c, cmd, resp, "snapshot", opts)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&opts.label, "label", "", "a name for the snapshot (at most 64 characters)")
	cmd.Flags().BoolVar(&opts.wait, "wait", false, "wait until the snapshot is taken")
	opts.out.flags(cmd, "print the snapshot's ID only")
	cmd.AddCommand(newSnapshotLsCmd(getenv), newSnapshotOpCmd(getenv, "restore"), newSnapshotOpCmd(getenv, "rm"))
	return cmd
}

func newSnapshotLsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:     "ls VM",
		Aliases: []string{"list"},
		Short:   "List a VM's disk snapshots, oldest first",
		Long:    "Lists a VM's disk snapshots: ID, label, state, consistency, when taken and when it expires.\n\nOutput: a table; --json prints the api.SnapshotList; --quiet the IDs only.\n" + connectionHelp + "\n" + exitHelp,
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.ListSnapshots(ctx, args[0])
			if err != nil {
				return err
			}
			return printSnapshots(cmd.OutOrStdout(), list, out)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the snapshots' IDs only")
	return cmd
}

func printSnapshots(w io.Writer, list *api.SnapshotList, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, list)
	case out.quiet:
		for _, s := range list.Snapshots {
			fmt.Fprintln(w, s.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tSTATE\tCONSISTENCY\tTAKEN\tEXPIRES")
	for _, s := range list.Snapshots {
		expires := "-"
		if s.ExpiresAt != nil {
			expires = s.ExpiresAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, orDash(s.Label), s.State, orDash(s.Consistency), s.CreatedAt.Local().Format(time.DateTime), expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.Keep != nil {
		_, err := fmt.Fprintf(w, "%d of %d kept (%s)\n", len(list.Snapshots), *list.Keep, list.Rule)
		return err
	}
	return nil
}

func newSnapshotOpCmd(getenv func(string) string, verb string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var opts snapshotOpts
	short := map[string]string{"restore": "Set a stopped VM's disk back to a snapshot (what was written since is lost)", "rm": "Delete a VM's disk snapshot"}[verb]
	cmd := &cobra.Command{
		Use:   verb + " VM SNAPSHOT",
		Short: short,
		Long:  short + ". SNAPSHOT is its ID or its label.\n\nOutput: a line by default; --json prints the api.SnapshotResponse; --quiet the operation's ID only.\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(2, "a VM name or ID and a snapshot ID or label"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := opts.out.check(); err != nil {
				return err
			}
			call := c.RestoreSnapshot
			if verb == "rm" {
				call = c.DeleteSnapshot
			}
			resp, err := call(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return snapshotDone(ctx, c, cmd, resp, verb, opts)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	if verb == "rm" {
		cmd.Aliases = []string{"delete"}
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVar(&opts.wait, "wait", false, "wait until it is done")
	opts.out.flags(cmd, "print the operation's ID only")
	return cmd
}

// snapshotDone prints what the server accepted, or with --wait follows the
// operation to its end.
func snapshotDone(ctx context.Context, c *client.Client, cmd *cobra.Command, resp *api.SnapshotResponse, verb string, opts snapshotOpts) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	sn, op := resp.Snapshot, resp.Operation
	if opts.wait {
		last, err := c.WaitOperation(ctx, op.ID, func(api.Operation) {})
		if err != nil {
			return err
		}
		if last.State != api.OpDone {
			fmt.Fprintf(stderr, "gpuvm: the %s failed: %s\n", verb, orDash(last.Error))
			return exitError{exitFailure}
		}
		op = *last
		// What --json prints after --wait is the end, not the answer that
		// accepted it: the operation done, the snapshot as it is now
		// (gone after rm).
		resp.Operation = op
		if verb != "rm" {
			if list, err := c.ListSnapshots(ctx, sn.VMID); err == nil {
				for _, x := range list.Snapshots {
					if x.ID == sn.ID {
						resp.Snapshot, sn = x, x
					}
				}
			}
		}
	}
	switch {
	case opts.out.json:
		return writeJSON(stdout, resp)
	case opts.out.quiet && verb == "snapshot":
		_, err := fmt.Fprintln(stdout, sn.ID)
		return err
	case opts.out.quiet:
		_, err := fmt.Fprintln(stdout, op.ID)
		return err
	}
	_, err := fmt.Fprintf(stdout, "%s of snapshot %s: operation %s, %s.\n", verb, sn.ID, op.ID, op.State)
	return err
}
