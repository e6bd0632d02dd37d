package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

func newEventsCmd(getenv func(string) string) *cobra.Command {
	o := &clientOpts{getenv: getenv}
	var out outputOpts
	var ev struct {
		vm, owner string
		after     int64
		count     int
	}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow what happens to your VMs (admins: everyone's) as it happens",
		Long: `Prints the events of the VMs you may see as they happen: creations, state
changes, actions. It runs until interrupted (or --count events came).
--vm keeps one VM's; --after N replays what came after event N first.
--json prints one api.Event per line.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			o := client.EventsOptions{VM: ev.vm, Owner: ev.owner}
			if cmd.Flags().Changed("after") {
				if ev.after < 0 {
					return usageError{fmt.Errorf("--after is an event ID (0 or more), got %d", ev.after)}
				}
				o.After, o.FromStart = ev.after, ev.after == 0
			}
			es, err := c.Events(ctx, o)
			if err != nil {
				return err
			}
			defer es.Close()
			w := cmd.OutOrStdout()
			for n := 0; ev.count <= 0 || n < ev.count; n++ {
				e, err := es.Next(ctx)
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return nil
					}
					return err
				}
				if err := printEvent(w, e, out.json); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "")
	cmd.Flags().StringVar(&ev.vm, "vm", "", "only this VM's events (name or ID)")
	cmd.Flags().StringVar(&ev.owner, "owner", "", "only this user's VMs (admins)")
	cmd.Flags().Int64Var(&ev.after, "after", 0, "first replay the events after this event ID (0: every event kept)")
	cmd.Flags().IntVar(&ev.count, "count", 0, "stop after this many events (0: never)")
	_ = cmd.RegisterFlagCompletionFunc("vm", completeVMs(o))
	return cmd
}

// printEvent prints one event: a line of JSON, or
// "TIME  ID  OWNER  VM  TYPE  detail".
func printEvent(w io.Writer, e api.Event, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	detail := string(e.Payload)
	if e.Type == api.EventVMState {
		var p api.VMStatePayload
		if json.Unmarshal(e.Payload, &p) == nil {
			detail = p.State
			if p.Phase != "" {
				detail += " (" + p.Phase + ")"
			}
			if p.Reason != "" {
				detail += ": " + p.Reason
			}
		}
	}
	_, err := fmt.Fprintf(w, "%s  %d  %s  %s  %s  %s\n", e.Time.Local().Format(time.DateTime), e.ID, e.Owner, e.VMID, e.Type, detail)
	return err
}
