package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
)

func newCredentialsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "credentials VM",
		Short: "Show a VM's one-time desktop password (once)",
		Long: `Shows the guest user and the desktop password gpuvmd made for the VM when
you asked for it: the password of the remote desktop (gpuvm rdp) and of the
console's login. Only the VM's owner gets it, and only once: gpuvmd forgets it
as it answers, and a second call says when it was read. Keep it, or set a new
one inside the guest (gpuvm ssh, then passwd). Every read is in the audit log.

Output: "user: USER" and "password: PASSWORD" lines by default; --json prints
the api.CredentialsResponse; -q prints only the password.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm credentials desk-1\n  gpuvm rdp desk-1 -- /p:\"$(gpuvm credentials -q desk-1)\"",
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			cr, err := c.Credentials(ctx, args[0])
			if err != nil {
				return err
			}
			switch {
			case out.json:
				return writeJSON(cmd.OutOrStdout(), cr)
			case out.quiet:
				_, err := fmt.Fprintln(cmd.OutOrStdout(), cr.Password)
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "user: %s\npassword: %s\n(shown once: gpuvmd keeps no copy)\n", cr.User, cr.Password)
			return err
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print only the password")
	return cmd
}
