package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// gpuvm home ls|rm: people's homes (docs/config.md, server.storage.homes).

func newHomeCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "home",
		Aliases: []string{"homes"},
		Short:   "Your home on the server: show it, delete it",
		Long: `Your home is a folder on the server that every VM of yours whose profile has a
home mounts (at /gpuvm/home unless the server says otherwise). It outlives
your VMs: deleting a VM, a lease that ends or the server's repairs never touch
it. Only you, or an admin, delete it, with 'gpuvm home rm USER --yes', while
no VM of yours that mounts it runs.`,
		Args: noArgs,
	}
	cmd.AddCommand(newHomeLsCmd(getenv), newHomeRmCmd(getenv))
	return cmd
}

func newHomeLsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "Show your home (admins: every home)",
		Long: "Shows your home: whether it exists yet, the host it lives on (HOST: where it was first made; in a fleet your VMs that mount it are placed there when they can be), what it uses and its quota as last measured. An admin sees every home, with its directory on the server.\n\nOutput: a table; --json prints the api.HomeList; --quiet the users only.\n" +
			connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.ListHomes(ctx)
			if err != nil {
				return err
			}
			return printHomes(cmd.OutOrStdout(), list, out)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the users only")
	return cmd
}

func newHomeRmCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm USER --yes",
		Short: "Delete a home and every file in it",
		Long: `Deletes USER's home and every file in it: your own, or as an admin anyone's.
It cannot be undone, so --yes is required. It is refused while a VM of USER
that mounts the home is not stopped: stop or delete those first. A VM that
starts later gets a new, empty home.
` + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "the user whose home it is"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if !yes {
				return usageError{fmt.Errorf("deleting the home of %s deletes every file in it and cannot be undone: add --yes", args[0])}
			}
			if err := c.DeleteHome(ctx, args[0], args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "The home of %s is deleted.\n", args[0])
			return err
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}

func printHomes(w io.Writer, list *api.HomeList, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, list)
	case out.quiet:
		for _, h := range list.Homes {
			fmt.Fprintln(w, h.User)
		}
		return nil
	}
	if len(list.Homes) == 0 {
		_, err := fmt.Fprintln(w, "No homes.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tEXISTS\tHOST\tUSED\tQUOTA\tMOUNT\tDIR")
	for _, h := range list.Homes {
		exists := "yes"
		if !h.Exists {
			exists = "not yet"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.User, exists, orDash(h.HomeHost), sizeOrDash(h.UsedBytes), sizeOrDash(h.QuotaBytes), h.Mount, orDash(h.Dir))
	}
	return tw.Flush()
}
