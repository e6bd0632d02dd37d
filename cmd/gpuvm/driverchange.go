package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// gpuvm admin driver-change: announce a change of the hosts' NVIDIA vGPU
// manager ahead (docs/snapshots.md, "Before a driver change").
func newAdminDriverChangeCmd(o *clientOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "driver-change",
		Short: "Announce a change of the hosts' NVIDIA vGPU manager; list and withdraw announcements",
		Long: `A guest's NVIDIA driver must be one the host's vGPU manager supports: when the
hosts move to a new manager, the people whose VMs hold a vGPU (time-sliced or
MIG-backed) must change the driver inside them. Announced ahead, gpuvm tells
each of them once (a vm.warning of kind driver_change, posted to the policy's
webhook too) and offers a snapshot of the VM's disk first. VMs with a
passed-through GPU are not told: the data-centre driver does not depend on
the vGPU manager.
` + exitHelp,
	}
	cmd.AddCommand(newDriverChangeAnnounceCmd(o), newDriverChangeLsCmd(o), newDriverChangeRmCmd(o))
	return cmd
}

func newDriverChangeAnnounceCmd(o *clientOpts) *cobra.Command {
	var (
		driver, at, note string
		out              outputOpts
	)
	cmd := &cobra.Command{
		Use:   "announce --driver VERSION --at TIME [--note TEXT]",
		Short: "Announce that the hosts' vGPU manager moves to VERSION at TIME",
		Long: `Announces that the hosts' NVIDIA vGPU manager moves to VERSION (such as
550.90.07) at TIME: an RFC 3339 time, or a local date and time ("2026-12-12
09:00"), ahead, at most a year. Within a rules round (30 s) the owner of every
running or stopped VM with a vGPU is told, once, with the command that takes a
snapshot of the VM's disk first.

Output: a line by default; --json prints the api.DriverChange.
` + exitHelp,
		Example: `  gpuvm admin driver-change announce --driver 550.90.07 --at "2026-12-12 09:00" --note "vGPU 17.4, Saturday's maintenance"`,
		Args:    noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			when, err := parseFuture("--at", at)
			if err != nil {
				return err
			}
			dc, err := c.AnnounceDriverChange(ctx, api.DriverChangeRequest{Driver: driver, At: when, Note: note})
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), dc)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Announced %s: the vGPU manager moves to %s at %s. The owners of VMs with a vGPU are told, a snapshot offered.\n",
				dc.ID, dc.Driver, dc.At.Local().Format("Mon 2 Jan 2006 15:04 MST"))
			return err
		}),
	}
	cmd.Flags().StringVar(&driver, "driver", "", "the vGPU manager's version the hosts move to (550.90.07)")
	cmd.Flags().StringVar(&at, "at", "", "when: RFC 3339, or a local date and time")
	cmd.Flags().StringVar(&note, "note", "", "one line for the people told")
	out.flags(cmd, "")
	return cmd
}

// parseFuture reads a time flag: RFC 3339 or a local date and time.
func parseFuture(flag, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, usageError{fmt.Errorf("%s is required", flag)}
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range whenLayouts {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usageError{fmt.Errorf(`%s %q: give an RFC 3339 time (2026-12-12T09:00:00Z) or a local time ("2026-12-12 09:00")`, flag, s)}
}

func newDriverChangeLsCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the announced driver changes, the next first",
		Long:  "Lists every announcement, withdrawn ones too. --json prints the api.DriverChangeList.\n" + exitHelp,
		Args:  noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.DriverChanges(ctx)
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list.DriverChanges) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "No driver change announced.")
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tDRIVER\tAT\tBY\tSTATE\tNOTE")
			for _, dc := range list.DriverChanges {
				state := "announced"
				if dc.WithdrawnAt != nil {
					state = "withdrawn by " + dc.WithdrawnBy
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", dc.ID, dc.Driver, dc.At.Local().Format("2006-01-02 15:04 MST"), dc.By, state, orDash(dc.Note))
			}
			return w.Flush()
		}),
	}
	out.flags(cmd, "")
	return cmd
}

func newDriverChangeRmCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"withdraw"},
		Short:   "Withdraw an announced driver change: nobody more is told",
		Long:    "Withdraws an announcement; those already told are not told again. --json prints the api.DriverChange.\n" + exitHelp,
		Args:    exactArgs(1, "the announcement's ID ('gpuvm admin driver-change ls')"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			dc, err := c.WithdrawDriverChange(ctx, args[0])
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), dc)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Withdrew %s (%s at %s).\n", dc.ID, dc.Driver, dc.At.Local().Format("Mon 2 Jan 2006 15:04 MST"))
			return err
		}),
	}
	out.flags(cmd, "")
	return cmd
}
