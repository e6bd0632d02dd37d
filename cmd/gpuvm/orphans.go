package main

import (
	"context"
	"fmt"
	"github.com/gpuvm/gpuvm/pkg/config"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

func newAdminOrphansCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "orphans",
		Short: "List what looks like gpuvm's on the host but is not provably this installation's",
		Long: `Lists the orphans the reconciler found on the server's host: domains with
gpuvm's metadata, volumes named like a VM's disk and GPU devices in a
backend's ledger that belong to another gpuvm installation, or to this one
but to a VM its database does not have (an older backup restored, a row
lost), and volumes nothing refers to. gpuvm never removes them on its own:
'gpuvm admin orphans delete ID' removes one, 'gpuvm admin orphans adopt ID
--owner USER' makes an orphaned domain of this installation a VM again.

Output: a table by default; --json prints the api.OrphanList; --quiet the IDs.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.Orphans(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, list)
			case out.quiet:
				for _, x := range list.Items {
					fmt.Fprintln(w, x.ID)
				}
				return nil
			}
			return printOrphans(w, list, time.Now())
		}),
	}
	out.flags(cmd, "print the orphan IDs only")
	cmd.AddCommand(newAdminOrphansDeleteCmd(o), newAdminOrphansAdoptCmd(o))
	return cmd
}

func newAdminOrphansDeleteCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete an orphan: a domain with its volumes, a volume, or a GPU device",
		Long: `Deletes one orphan that 'gpuvm admin orphans' lists. A domain goes with the
volumes its metadata names (its disk: whatever was on it is lost); a device
is removed by its backend only if its ledger entry still names the
installation it was listed with. --yes is required.
` + exitHelp,
		Args: exactArgs(1, "an orphan ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if !yes {
				return usageError{fmt.Errorf("deleting an orphan cannot be undone (a domain's disk goes with it): add --yes")}
			}
			gone, err := c.DeleteOrphan(ctx, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, gone)
			case out.quiet:
				_, err := fmt.Fprintln(w, gone.ID)
				return err
			}
			_, err = fmt.Fprintf(w, "Deleted %s %s (%s).\n", gone.Kind, gone.Name, gone.ID)
			return err
		}),
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	out.flags(cmd, "print the orphan's ID only")
	return cmd
}

func newAdminOrphansAdoptCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	var req api.AdoptRequest
	cmd := &cobra.Command{
		Use:   "adopt ID --owner USER",
		Short: "Make an orphaned domain of this installation a VM of USER again",
		Long: `Adopts an orphaned domain of this installation whose VM is not in the
database: it becomes a VM of --owner again, running or stopped as its
domain is, with the GPU devices made for it recorded as its allocations.
--name names it (default "adopted-" and the end of its ID), --profile gives
its profile when the one its metadata names is gone.

Output: the VM; --json prints the api.VM, --quiet its ID.
` + exitHelp,
		Args: exactArgs(1, "an orphan ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if req.Owner == "" {
				return usageError{fmt.Errorf("--owner names the user the VM is to belong to")}
			}
			vm, err := c.AdoptOrphan(ctx, args[0], req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, vm)
			case out.quiet:
				_, err := fmt.Fprintln(w, vm.ID)
				return err
			}
			_, err = fmt.Fprintf(w, "Adopted: VM %s (%s) of %s, %s.\n", vm.Name, vm.ID, vm.Owner, vm.State)
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Owner, "owner", "", "the user the VM is to belong to (required)")
	f.StringVar(&req.Name, "name", "", "the VM's name")
	f.StringVar(&req.Profile, "profile", "", "the VM's profile, when the one its metadata names is gone")
	out.flags(cmd, "print the VM's ID only")
	return cmd
}

func printOrphans(w io.Writer, list *api.OrphanList, now time.Time) error {
	if len(list.Items) == 0 {
		_, err := fmt.Fprintf(w, "No orphans (installation %s).\n", list.Installation)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tNAME\tVM\tOWNER\tINSTALLATION\tADOPTABLE\tSEEN\tWHY")
	for _, x := range list.Items {
		adopt := "no"
		if x.Adoptable {
			adopt = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", x.ID, x.Kind, x.Name, orDash(x.VMID), orDash(x.Owner),
			orDash(x.Installation), adopt, config.HumanDuration(now.Sub(x.FirstSeen)), x.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "This installation: %s. Delete with 'gpuvm admin orphans delete ID --yes'; adopt a domain with 'gpuvm admin orphans adopt ID --owner USER', a data disk with 'gpuvm volume adopt POOL/FILE --owner USER'.\n", list.Installation)
	return err
}
