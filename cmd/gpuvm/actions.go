package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// vmAction describes one of start, stop and reboot.
type vmAction struct {
	name, short, long, example string
	call                       func(c *client.Client, ctx context.Context, ref string) (*api.VMActionResponse, error)
	// doing starts the line printed when the server took the action.
	doing string
	// note follows it (may be empty).
	note func(vm api.VM) string
	// done is what is said once the operation is done.
	done func(vm api.VM, now time.Time) string
}

var (
	startAction = vmAction{
		name:  "start",
		short: "Start a stopped VM again",
		long: `Starts a stopped VM, named by its name (among your live VMs) or its ID. A VM
with a GPU waits in the queue for one again, like a new VM ('gpuvm show' gives
its place and why it waits), then boots on the device it is given, possibly on
another GPU, with its own disk; with --wait, "wait for a GPU" is the step shown
meanwhile. A VM without a GPU boots at once. A VM that is not stopped is
refused (exit 1), and so is the start of a VM whose lease has ended (extend it
first).`,
		example: `  gpuvm start render-1 --wait`,
		call:    (*client.Client).StartVM,
		doing:   "Starting",
		done:    func(vm api.VM, _ time.Time) string { return fmt.Sprintf("VM %s is %s.", vm.Name, vm.State) },
	}
	stopAction = vmAction{
		name:  "stop",
		short: "Shut a VM down and give its GPU back; it keeps its disk",
		long: `Stops a running VM, named by its name (among your live VMs) or its ID: the guest
is asked to power off (ACPI) and forced off when it has not within the
server's shutdown timeout, then its GPU is given back, to the next VM in the
queue. The VM keeps its disk and its lease keeps running; 'gpuvm start' queues
it for a GPU again. A VM that is not running is refused (exit 1).`,
		example: `  gpuvm stop render-1 --wait`,
		call:    (*client.Client).StopVM,
		doing:   "Stopping",
		note: func(vm api.VM) string {
			return fmt.Sprintf(" It gives its GPU back and keeps its disk; its lease runs on; 'gpuvm start %s' queues it for a GPU again.", vm.Name)
		},
		done: func(vm api.VM, now time.Time) string {
			s := fmt.Sprintf("VM %s is %s", vm.Name, vm.State)
			if vm.Reason != "" {
				s += " (" + vm.Reason + ")"
			}
			return s + ". It keeps its disk; lease " + describeLease(vm, now) + "."
		},
	}
	rebootAction = vmAction{
		name:  "reboot",
		short: "Ask a running VM's guest to restart",
		long: `Asks the guest of a running VM, named by its name (among your live VMs) or its
ID, to restart (through its guest agent when it runs one, else by ACPI); the VM
stays running and keeps its GPU. Like a power button, the request can be
ignored by the guest. A VM that is not running is refused (exit 1).`,
		example: `  gpuvm reboot render-1`,
		call:    (*client.Client).RebootVM,
		doing:   "Rebooting",
		done: func(vm api.VM, _ time.Time) string {
			return fmt.Sprintf("VM %s was asked to restart; it is %s.", vm.Name, vm.State)
		},
	}
)

func newStartCmd(getenv func(string) string) *cobra.Command {
	return newVMActionCmd(getenv, startAction)
}

func newStopCmd(getenv func(string) string) *cobra.Command {
	return newVMActionCmd(getenv, stopAction)
}

func newRebootCmd(getenv func(string) string) *cobra.Command {
	return newVMActionCmd(getenv, rebootAction)
}

type vmActionOpts struct {
	wait bool
	out  outputOpts
}

func newVMActionCmd(getenv func(string) string, a vmAction) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var opts vmActionOpts
	cmd := &cobra.Command{
		Use:   a.name + " VM",
		Short: a.short,
		Long: a.long + `

The server answers at once with the operation that carries the action out.
With --wait, follows it to its end and says each step; Ctrl-C stops waiting,
not the action. An action on a VM with an unfinished operation is refused
(exit 1) and names that operation.

Output: a line by default; --json prints the api.VMActionResponse (with --wait,
the api.Operation as it ended); --quiet prints the operation's ID only.
` + connectionHelp + "\n" + exitHelp,
		Example: a.example,
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return runVMAction(ctx, c, cmd, args[0], a, opts)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVar(&opts.wait, "wait", false, "wait until the "+a.name+" is done, showing its steps")
	opts.out.flags(cmd, "print the operation's ID only")
	return cmd
}

func runVMAction(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, a vmAction, o vmActionOpts) error {
	if err := o.out.check(); err != nil {
		return err
	}
	resp, err := a.call(c, ctx, ref)
	if err != nil {
		return err
	}
	vm, op := resp.VM, resp.Operation
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if !o.wait {
		switch {
		case o.out.json:
			return writeJSON(stdout, resp)
		case o.out.quiet:
			_, err := fmt.Fprintln(stdout, op.ID)
			return err
		}
		note := ""
		if a.note != nil {
			note = a.note(vm)
		}
		_, err := fmt.Fprintf(stdout, "%s VM %s (%s): operation %s.%s\n", a.doing, vm.Name, vm.ID, op.ID, note)
		return err
	}
	t := terminalOf(cmd)
	progressW, tty := stdout, t.outTTY
	if o.out.json || o.out.quiet {
		progressW, tty = stderr, isTerminal(stderr)
	}
	p := newProgress(progressW, tty)
	last, err := c.WaitOperation(ctx, op.ID, func(op api.Operation) {
		s := a.name + " " + op.State
		switch {
		case op.State == api.OpDone:
			s = a.name + " done"
		case op.State == api.OpFailed:
			s += ": " + orDash(op.Error)
		case op.Step != "":
			s += ": " + op.Step
		}
		p.set(s)
	})
	p.stop()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "gpuvm: stopped waiting; the %s of VM %s goes on: see 'gpuvm show %s'.\n", a.name, vm.Name, vm.Name)
			return exitError{exitFailure}
		}
		return err
	}
	switch {
	case o.out.json:
		if err := writeJSON(stdout, last); err != nil {
			return err
		}
	case o.out.quiet:
		fmt.Fprintln(stdout, last.ID)
	case last.State == api.OpDone:
		cur, err := c.GetVM(ctx, vm.ID)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, a.done(*cur, time.Now()))
	}
	if last.State != api.OpDone {
		fmt.Fprintf(stderr, "gpuvm: the %s of VM %s failed: %s\n", a.name, vm.Name, orDash(last.Error))
		return exitError{exitFailure}
	}
	return nil
}

func newExtendCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var hours int
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "extend VM --hours N",
		Short: "Add hours to a VM's lease",
		Long: `Adds N hours to the lease of a queued, running or stopped VM, named by its name
(among your live VMs) or its ID. The lease counts from when the VM first ran;
in all it may not pass its profile's maximum ('gpuvm profiles' shows it as
default/maximum): the server refuses more (exit 1) and says how many hours are
left. A queued VM's lease starts when it runs.

Output: the new lease by default; --json prints the api.VM.
` + connectionHelp + "\n" + exitHelp,
		Example: `  gpuvm extend render-1 --hours 2`,
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if hours < 1 {
				return usageError{errors.New("--hours N, at least 1, says how many hours to add")}
			}
			vm, err := c.ExtendVM(ctx, args[0], hours)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out.json {
				return writeJSON(w, vm)
			}
			lease := describeLease(*vm, time.Now())
			if vm.LeaseEnd == nil {
				lease += " from when it runs"
			}
			_, err = fmt.Fprintf(w, "Extended VM %s by %s: its lease is %s.\n", vm.Name, plural(hours, "hour"), lease)
			return err
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().IntVar(&hours, "hours", 0, "hours to add to the lease (required)")
	out.flags(cmd, "")
	return cmd
}

// startAtLayouts are the local-time forms --start-at takes besides RFC 3339.
var startAtLayouts = []string{"2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02T15:04:05"}

// parseStartAt reads create's --start-at: an RFC 3339 time, a local date
// and time ("2026-06-01 18:00"), or a delay from now ("2h30m", "+90m"). ""
// is nil. Whether the time is acceptable (in the future, not too far) is the
// server's to say.
func parseStartAt(s string, now time.Time) (*time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return &t, nil
	}
	for _, layout := range startAtLayouts {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return &t, nil
		}
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "+")); err == nil {
		if d <= 0 {
			return nil, usageError{fmt.Errorf("--start-at %s: a delay must be positive", s)}
		}
		t := now.Add(d)
		return &t, nil
	}
	return nil, usageError{fmt.Errorf(`--start-at %q: give an RFC 3339 time (2026-06-01T18:00:00Z), a local time ("2026-06-01 18:00") or a delay (2h30m)`, s)}
}
