package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
)

func newAdminCmd(getenv func(string) string) *cobra.Command {
	o := &clientOpts{getenv: getenv}
	admin := &cobra.Command{
		Use:   "admin",
		Short: "Run a gpuvmd (admins only)",
		Long:  "Commands for the admins of a gpuvmd; the token must be an admin's.\n" + connectionHelp + "\n" + exitHelp,
	}
	o.flags(admin, true)
	admin.AddCommand(newAdminAuditCmd(o)) // audit.go
	admin.AddCommand(newAdminGPUsCmd(o), newAdminReloadCmd(o))
	admin.AddCommand(newAdminUsersCmd(o), newAdminTokensCmd(o), newAdminDrainCmd(o), newAdminUndrainCmd(o)) // users.go
	admin.AddCommand(newAdminAlertsCmd(o))                                                                  // alerts.go
	admin.AddCommand(newAdminImagesCmd(o)...)                                                               // images.go
	admin.AddCommand(newAdminOrphansCmd(o))                                                                 // orphans.go
	admin.AddCommand(newAdminDriverChangeCmd(o))                                                            // driverchange.go
	admin.AddCommand(newAdminDoctorCmd(getenv), newAdminHostPrepCmd(getenv))                                // doctor.go, hostprep.go
	attachWindowsInstall(admin, o)                                                                          // windows.go
	return admin
}

func newAdminGPUsCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "List the server's GPUs with their modes, free slices and devices",
		Long: `Prints the server's GPU inventory, as 'gpuvm host inventory' does on the host
itself: every GPU, its mode, the vGPU types and MIG profiles with what is still
free, and the devices that exist. --json prints the api.HostInventory.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			hi, err := c.GPUs(ctx)
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), hi)
			}
			return printInventory(cmd.OutOrStdout(), *hi)
		}),
	}
	out.flags(cmd, "")
	return cmd
}

func newAdminReloadCmd(o *clientOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Have gpuvmd re-read its configuration (all or nothing)",
		Long: `Has gpuvmd re-read its configuration directory. A configuration with errors
changes nothing: its diagnostics are printed and the exit status is 1.
Warnings of a configuration that loads are printed to the standard error.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			r, err := c.Reload(ctx)
			if err != nil {
				return err
			}
			if d := strings.TrimRight(r.Diagnostics, "\n"); d != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), d)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Reloaded: %s\n", r.Config)
			return err
		}),
	}
	return cmd
}
