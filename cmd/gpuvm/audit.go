package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// maxAuditEntries bounds --limit: what one command prints.
const maxAuditEntries = 10000

type auditOpts struct {
	user, vm, action, since, until string
	limit                          int
	out                            outputOpts
}

// auditHelp says what the audit commands print and take.
const auditHelp = `Each entry says when, who (and the ID of the API token used, never the
token), from which address, the action (vm.create, vm.stop, vm.extend,
token.create, reservation.delete, gpu.drain, config.reload, console.ticket,
console.open, tunnel.open, …), its target (vm/OWNER/NAME, user/NAME,
gpu/ADDRESS, …), the outcome (ok, refused, failed) with the HTTP status, and
the problem's detail when refused. The log is append only.

--action takes an action or a kind ending in a dot (--action vm. for every VM
action). --since and --until take an RFC 3339 time (2026-03-01T00:00:00Z), a
local date (2026-03-01), a local date and time ("2026-03-01 18:00") or a time
ago (36h, 7d, 2w); --until is excluded.

Output: a table, newest first, by default; --json prints the api.AuditList
(Next is set when there are more entries than --limit).
`

// newAdminAuditCmd is 'gpuvm admin audit': everyone's entries.
func newAdminAuditCmd(o *clientOpts) *cobra.Command {
	var a auditOpts
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit log: every change made through the API, every console and tunnel opened",
		Long: "Lists the entries of the audit log: every state-changing request to gpuvmd and every\nconsole or tunnel ticket issued and connection opened, everyone's.\n\n" +
			auditHelp + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return a.run(ctx, cmd, c.ListAudit)
		}),
	}
	cmd.Flags().StringVar(&a.user, "user", "", "only this user's entries")
	a.flags(cmd)
	return cmd
}

// newAuditCmd is 'gpuvm audit': the caller's own entries.
func newAuditCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var a auditOpts
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read your entries of the audit log: what you changed, the consoles and tunnels you opened",
		Long: "Lists your own entries of gpuvmd's audit log (admins read everyone's with\n'gpuvm admin audit').\n\n" +
			auditHelp + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return a.run(ctx, cmd, c.ListOwnAudit)
		}),
	}
	o.flags(cmd, false)
	a.flags(cmd)
	return cmd
}

func (a *auditOpts) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.vm, "vm", "", "only entries about this VM (its ID, or the name of one of yours)")
	f.StringVar(&a.action, "action", "", "only this action (vm.stop), or every action of a kind (vm.)")
	f.StringVar(&a.since, "since", "", "only entries at or after this time")
	f.StringVar(&a.until, "until", "", "only entries before this time")
	f.IntVar(&a.limit, "limit", 50, fmt.Sprintf("at most this many entries, newest first (1-%d)", maxAuditEntries))
	a.out.flags(cmd, "")
}

// run reads up to --limit entries, page by page, and prints them.
func (a *auditOpts) run(ctx context.Context, cmd *cobra.Command, list func(context.Context, client.ListAuditOptions) (*api.AuditList, error)) error {
	if a.limit < 1 || a.limit > maxAuditEntries {
		return usageError{fmt.Errorf("--limit is from 1 to %d, not %d", maxAuditEntries, a.limit)}
	}
	now := time.Now()
	since, err := parseWhen("--since", a.since, now)
	if err != nil {
		return err
	}
	until, err := parseWhen("--until", a.until, now)
	if err != nil {
		return err
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return usageError{fmt.Errorf("--until %s is not after --since %s", a.until, a.since)}
	}
	opts := client.ListAuditOptions{User: a.user, VM: a.vm, Action: a.action, From: since, To: until}
	out := api.AuditList{Items: []api.AuditEntry{}}
	for {
		opts.Limit = min(a.limit-len(out.Items), 500)
		page, err := list(ctx, opts)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, page.Items...)
		out.Next = page.Next
		if page.Next == "" || len(out.Items) >= a.limit {
			break
		}
		opts.After = page.Next
	}
	w := cmd.OutOrStdout()
	if a.out.json {
		return writeJSON(w, out)
	}
	if err := printAudit(w, out.Items); err != nil {
		return err
	}
	if out.Next != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "More entries: --limit %d shows more, --until or --since fewer.\n", min(2*a.limit, maxAuditEntries))
	}
	return nil
}

func printAudit(w io.Writer, es []api.AuditEntry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "No audit entries.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tUSER\tACTION\tTARGET\tOUTCOME\tSOURCE\tDETAIL")
	for _, e := range es {
		outcome := e.Outcome + " " + strconv.Itoa(e.Status)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), orDash(e.User), e.Action,
			orDash(e.Target), outcome, orDash(e.Source), orDash(e.Detail))
	}
	return tw.Flush()
}
