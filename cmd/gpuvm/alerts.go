package main

import (
	"context"
	"fmt"
	"github.com/gpuvm/gpuvm/pkg/config"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

type alertsOpts struct {
	state, rule string
	limit       int
	all         bool
	out         outputOpts
}

func newAdminAlertsCmd(o *clientOpts) *cobra.Command {
	var a alertsOpts
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List the alerts of the policy's alert rules, newest first",
		Long: `Lists the alerts that the policy's alert rules raised: which rule, about
what (a GPU "host/0000:41:00.0", a VM "vm/<id>", the queue, a backend), whether
it is firing or resolved, the value that made it so, and when. --state firing
shows what needs attention now.

Output: a table by default; --json prints the api.AlertList (one page, or
every page with --all); --quiet the alert IDs.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := a.out.check(); err != nil {
				return err
			}
			switch a.state {
			case "", api.AlertFiring, api.AlertResolved:
			default:
				return usageError{fmt.Errorf("--state is %s or %s, not %q", api.AlertFiring, api.AlertResolved, a.state)}
			}
			if a.limit < 1 || a.limit > 500 {
				return usageError{fmt.Errorf("--limit is from 1 to 500, not %d", a.limit)}
			}
			list := api.AlertList{Items: []api.Alert{}}
			opts := client.ListAlertsOptions{State: a.state, Rule: a.rule, Limit: a.limit}
			for {
				page, err := c.ListAlerts(ctx, opts)
				if err != nil {
					return err
				}
				list.Items = append(list.Items, page.Items...)
				list.Next = page.Next
				if !a.all || page.Next == "" {
					break
				}
				opts.After = page.Next
			}
			w := cmd.OutOrStdout()
			switch {
			case a.out.json:
				return writeJSON(w, list)
			case a.out.quiet:
				for _, x := range list.Items {
					fmt.Fprintln(w, x.ID)
				}
				return nil
			}
			if err := printAlerts(w, list.Items, time.Now()); err != nil {
				return err
			}
			if list.Next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "More alerts: --all lists them all.\n")
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&a.state, "state", "", "only alerts in this state: firing or resolved")
	f.StringVar(&a.rule, "rule", "", "only this rule's alerts")
	f.IntVar(&a.limit, "limit", 50, "alerts per page (1-500)")
	f.BoolVar(&a.all, "all", false, "every page, not only the first")
	a.out.flags(cmd, "print the alert IDs only")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions([]string{api.AlertFiring, api.AlertResolved}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func printAlerts(w io.Writer, as []api.Alert, now time.Time) error {
	if len(as) == 0 {
		_, err := fmt.Fprintln(w, "No alerts.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRULE\tSUBJECT\tVALUE\tSTARTED\tFOR\tSUMMARY")
	for _, a := range as {
		end := now
		if a.ResolvedAt != nil {
			end = *a.ResolvedAt
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Rule, a.Subject, strconv.FormatFloat(a.Value, 'g', 6, 64),
			a.StartedAt.Local().Format(time.DateTime), config.HumanDuration(end.Sub(a.StartedAt)), orDash(a.Summary))
	}
	return tw.Flush()
}
