package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// gpuvm share ls: the admin-declared shares one may mount
// (docs/config.md, server.storage.share).

func newShareCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "share",
		Short: "Shares: admin-declared folders your VMs may mount",
		Long: `Shares are folders of the server an admin declares (a group's datasets, a
course's material), each read-write for some people and read-only for others.
Ask for one when you make a VM ('gpuvm create PROFILE --share NAME'), or your
profile mounts it always. A read-only share is enforced on the host: a write in
the guest fails.`,
		Args: noArgs,
	}
	cmd.AddCommand(newShareLsCmd(getenv))
	return cmd
}

func newShareLsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the shares you may mount, with your mode (rw or ro)",
		Long: "Lists the shares you may mount: name, your mode (rw or ro), where the guest mounts it, whether it is available on the server, and the rule that gives you access. An admin sees every share, with its host path.\n\nOutput: a table; --json prints the api.ShareList; --quiet the names only.\n" +
			connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm share ls\n  gpuvm create ml-notebook --share datasets",
		Args:    noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.ListShares(ctx)
			if err != nil {
				return err
			}
			return printShareList(cmd.OutOrStdout(), list, out)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the shares' names only")
	return cmd
}

func printShareList(w io.Writer, list *api.ShareList, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, list)
	case out.quiet:
		for _, s := range list.Shares {
			fmt.Fprintln(w, s.Name)
		}
		return nil
	}
	if len(list.Shares) == 0 {
		_, err := fmt.Fprintln(w, "No shares you may mount.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tMOUNT\tAVAILABLE\tUSED\tQUOTA\tRULE\tDESCRIPTION")
	var notes []string
	for _, s := range list.Shares {
		avail := "yes"
		if !s.Available {
			avail = "no: " + s.Unavailable
		}
		quota := "-"
		if s.QuotaBytes != nil {
			quota = config.FormatSize(*s.QuotaBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, orDash(s.Mode), s.Mount, avail, sizeOrDash(s.UsedBytes), quota,
			orDash(s.Rule), orDash(s.Description))
		if s.QuotaBytes != nil && s.QuotaEnforcement == "none" {
			notes = append(notes, fmt.Sprintf("share %s's quota is not enforced: %s", s.Name, orDash(s.QuotaNote)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// printShares is the "Shares:" lines of gpuvm show: each share of the VM,
// the owner's mode now and where the guest mounts it.
func printShares(tw io.Writer, shares []api.VMShare) {
	for i, s := range shares {
		label := ""
		if i == 0 {
			label = "Shares:"
		}
		mode := "read-write"
		switch s.Mode {
		case "ro":
			mode = "read-only"
			if s.Enforcement != "" {
				mode += ", enforced: " + s.Enforcement
			}
		case "":
			mode = "no longer the owner's to mount: the next start leaves it out"
		}
		fmt.Fprintf(tw, "  %s\t%s at %s (%s)\n", label, s.Name, orDash(s.Mount), mode)
	}
}
