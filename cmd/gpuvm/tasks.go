package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// gpuvm task submit|ls|show|logs|cancel: commands run in a GPU VM of
// their own, which is deleted the moment they end (docs/tasks.md).

const taskLong = `Tasks: a command run in a GPU VM of its own, queued as a VM is (the same
queue, quotas, windows and bookings), run as you in your home when the VM has
one, its output kept (gpuvm task logs -f). The VM is deleted the moment the
command ends, giving the GPU back then, not at the end of the time limit. At
the time limit the command gets SIGTERM, then after --kill-wait (30s) the VM
is powered off: the task ends "timeout".

States: pending (with the queue's reason), booting, running, completing,
completed, failed (non-zero exit or a signal), timeout, cancelled, boot_fail
(the guest never reported), node_fail (its VM failed).

--array 0-99%4 makes an array of tasks: an element per index, each in a VM of
its own with TASK_INDEX, TASK_ARRAY_ID and TASK_COUNT in its environment, at
most 4 at once. gpuvm task ls shows the array as one line, its elements
counted by state; gpuvm task show ARRAY lists them; an element is ARRAY_INDEX
(gpuvm task logs ARRAY_7); cancelling the array cancels every element that
has not ended. --retries N --retry-on 2,137,node_fail runs a failed attempt
again in a new VM when it ended so (a signal S counts as 128+S).
--signal USR1@10m sends USR1 ten minutes before the time limit.`

func newTaskCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Run commands in GPU VMs that are deleted when they end",
		Long:  taskLong,
		Example: "  gpuvm task submit a100 --time 4h -- python train.py --epochs 30\n  gpuvm task submit a100 --time 30m --script job.sh\n" +
			"  gpuvm task ls\n  gpuvm task logs -f TASK\n  gpuvm task cancel TASK",
	}
	cmd.AddCommand(newTaskSubmitCmd(getenv), newTaskLsCmd(getenv), newTaskShowCmd(getenv), newTaskLogsCmd(getenv), newTaskCancelCmd(getenv))
	return cmd
}

type taskSubmitOpts struct {
	time, after, killWait, script string
	array, retryOn, signal, in    string
	retries                       int
	env                           []string
	follow                        bool
	out                           outputOpts
}

func newTaskSubmitCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var opts taskSubmitOpts
	cmd := &cobra.Command{
		Use:   "submit PROFILE --time DURATION [--after TIME] (-- COMMAND [ARG...] | --script FILE)",
		Short: "Submit a task: a command, or a script, run in a new VM of PROFILE",
		Long: taskLong + `

--in VM runs it in your own VM instead, with its disk: the VM must be
stopped; it is resized to PROFILE (same image, a disk no smaller), started
with the task, and afterwards stopped and resized back to its own profile.

The command follows --, as it is (no shell: write sh -c '...' for one); or
--script FILE sends FILE, run by its #! line or sh. --follow prints the
output as it comes and exits with the task's end (0 when it completed).

Output: a line by default; --json prints the api.Task; --quiet its ID only.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm task submit a100 --time 4h -- python train.py --epochs 30\n  gpuvm task submit a100 --time 90m --env EPOCHS=30 --script job.sh --follow\n" +
			"  gpuvm task submit a100 --time 1h --array 0-99%4 -- sh -c 'python sweep.py --seed $TASK_INDEX'\n" +
			"  gpuvm task submit a100 --time 4h --retries 3 --retry-on 2,137,node_fail --signal USR1@10m -- python train.py\n" +
			"  gpuvm task submit h100-whole --time 8h --in desk -- python train.py",
		Args: cobra.MinimumNArgs(1),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			req, err := opts.request(cmd, args)
			if err != nil {
				return err
			}
			t, err := c.SubmitTask(ctx, req)
			if err != nil {
				return err
			}
			stdout := cmd.OutOrStdout()
			switch {
			case opts.out.json && !opts.follow:
				return writeJSON(stdout, t)
			case opts.out.quiet:
				fmt.Fprintln(stdout, t.ID)
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "task %s submitted: %s%s\n", t.ID, t.State, orEmpty(": ", t.Reason))
			}
			if !opts.follow {
				return nil
			}
			return followTask(ctx, c, cmd, t.ID)
		}),
	}
	o.flags(cmd, false)
	f := cmd.Flags()
	f.StringVar(&opts.time, "time", "", "the time limit, such as 4h or 90m (required); the VM's hours are its ceiling")
	f.StringVar(&opts.after, "after", "", `start no earlier than TIME: RFC 3339, local "2026-06-01 18:00", or a delay such as 2h`)
	f.StringVar(&opts.killWait, "kill-wait", "", "time between SIGTERM and SIGKILL at the limit or a cancel (default 30s)")
	f.StringVar(&opts.script, "script", "", "run this script file instead of a command")
	f.StringArrayVar(&opts.env, "env", nil, "set NAME=VALUE in the command's environment (repeatable)")
	f.StringVar(&opts.array, "array", "", `an array of tasks: indices such as 0-99, 1,3,5-7, with %N running at most N at once (0-99%4); each gets TASK_INDEX`)
	f.IntVar(&opts.retries, "retries", 0, "run a failed attempt again, in a new VM, up to this many times (0 to 10) when its end is in --retry-on")
	f.StringVar(&opts.retryOn, "retry-on", "", "the ends retried: exit codes and node_fail, boot_fail, comma-separated (2,137,node_fail)")
	f.StringVar(&opts.signal, "signal", "", "send this signal a while before the time limit: NAME@LEAD, such as USR1@10m (LEAD 60s when left out)")
	f.StringVar(&opts.in, "in", "", "run in your own stopped VM (name or ID) rather than a new one: it is resized to PROFILE for the task, then stopped and put back")
	f.BoolVarP(&opts.follow, "follow", "f", false, "print the output as it comes; exit with the task's end")
	opts.out.flags(cmd, "print the task's ID only")
	return cmd
}

// request is the task the flags and arguments ask for.
func (opts *taskSubmitOpts) request(cmd *cobra.Command, args []string) (api.CreateTaskRequest, error) {
	if err := opts.out.check(); err != nil {
		return api.CreateTaskRequest{}, err
	}
	dash := cmd.ArgsLenAtDash()
	req := api.CreateTaskRequest{Profile: args[0], TimeLimit: opts.time, KillWait: opts.killWait, Array: opts.array,
		Retries: opts.retries, Signal: opts.signal, In: opts.in}
	if opts.retryOn != "" {
		req.RetryOn = strings.Split(opts.retryOn, ",")
	}
	switch {
	case opts.time == "":
		return req, usageError{errors.New("--time is required: the task's time limit, such as 4h")}
	case opts.follow && opts.array != "":
		return req, usageError{errors.New("--follow follows one task: follow an element of the array instead (gpuvm task logs -f ARRAY_INDEX)")}
	case dash > 1 || dash < 0 && len(args) > 1:
		return req, usageError{errors.New("give one PROFILE, then -- and the command")}
	case dash == 1 && len(args) > 1 && opts.script != "":
		return req, usageError{errors.New("give a command after -- or --script FILE, not both")}
	case dash == 1 && len(args) > 1:
		req.Command = args[1:]
	case opts.script != "":
		b, err := os.ReadFile(opts.script)
		if err != nil {
			return req, usageError{fmt.Errorf("--script: %w", err)}
		}
		req.Script = string(b)
	default:
		return req, usageError{errors.New("give the command after -- (gpuvm task submit PROFILE --time 4h -- python train.py), or --script FILE")}
	}
	for _, kv := range opts.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return req, usageError{fmt.Errorf("--env %q: want NAME=VALUE", kv)}
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	after, err := parseStartAt(opts.after, time.Now())
	if err != nil {
		return req, usageError{errors.New(strings.ReplaceAll(err.Error(), "--start-at", "--after"))}
	}
	req.StartAt = after
	return req, nil
}

// followTask prints a task's output until it has ended, then says how it
// ended; it fails unless the task completed.
func followTask(ctx context.Context, c *client.Client, cmd *cobra.Command, id string) error {
	var off int64
	for {
		n, err := c.TaskLogs(ctx, id, off, true, cmd.OutOrStdout())
		off += n
		if err != nil && ctx.Err() != nil {
			return err
		}
		t, terr := c.GetTask(ctx, id)
		if terr != nil {
			return terr
		}
		if api.TaskEnded(t.State) {
			fmt.Fprintf(cmd.ErrOrStderr(), "task %s %s%s\n", t.ID, t.State, orEmpty(": ", t.Reason))
			if t.State != api.TaskCompleted {
				return exitError{exitFailure}
			}
			return nil
		}
		if err != nil { // the stream broke: go on from where it was
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
}

func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func newTaskLsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	var owner string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your tasks, newest first",
		Long:    "Lists your tasks (an admin: --owner's, or everybody's): ID, profile, state, exit, time limit, submitted, and the reason.\n\nOutput: a table; --json prints the api.TaskList; --quiet the IDs only.\n" + connectionHelp + "\n" + exitHelp,
		Args:    exactArgs(0, "no arguments"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			list, err := c.ListTasks(ctx, owner)
			if err != nil {
				return err
			}
			return printTasks(cmd.OutOrStdout(), list, out)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&owner, "owner", "", "only this user's tasks (admins)")
	out.flags(cmd, "print the tasks' IDs only")
	return cmd
}

// exitOf is Slurm's "exit:signal", "-" before the end.
func exitOf(t api.Task) string {
	if t.ExitCode == nil {
		return "-"
	}
	sig := 0
	if t.Signal != nil {
		sig = *t.Signal
	}
	return fmt.Sprintf("%d:%d", *t.ExitCode, sig)
}

func printTasks(w io.Writer, list *api.TaskList, out outputOpts) error {
	switch {
	case out.json:
		return writeJSON(w, list)
	case out.quiet:
		for _, t := range list.Items {
			fmt.Fprintln(w, t.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tPROFILE\tSTATE\tEXIT\tLIMIT\tSUBMITTED\tREASON")
	for _, t := range list.Items {
		reason := t.Reason
		if t.Array != "" {
			// One line an array, its elements counted by state.
			reason = "array " + t.Array + ": " + orDash(api.TaskCounts(t.ArrayCounts))
		}
		if t.State == api.TaskPending && t.EstimatedStart != nil {
			reason = orDash(t.Reason) + "; starts about " + t.EstimatedStart.Local().Format(time.DateTime) + staleNote(t.EstimatedStartStale)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Owner, t.Profile, t.State, exitOf(t),
			time.Duration(t.TimeLimit)*time.Second, t.CreatedAt.Local().Format(time.DateTime), orDash(reason))
	}
	return tw.Flush()
}

func newTaskShowCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	var all bool
	cmd := &cobra.Command{
		Use:   "show TASK",
		Short: "Show a task: its state and why, exit code and signal, its VM",
		Long: "Shows one task. An array's first 100 elements are listed, and how many more there are; --all lists every one " +
			"(an array has up to 10,000).\n\nOutput: a few lines; --json prints the api.Task; --quiet its state only.\n" + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "one task ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			get := c.GetTask
			if all && !out.quiet {
				// --quiet prints the state alone: one request, not the
				// pages of elements it would not print.
				get = c.GetTaskAll
			}
			t, err := get(ctx, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, t)
			case out.quiet:
				_, err := fmt.Fprintln(w, t.State)
				return err
			}
			return printTask(w, t)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the task's state only")
	cmd.Flags().BoolVar(&all, "all", false, "list every element of an array, not the first 100")
	return cmd
}

func printTask(w io.Writer, t *api.Task) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	what := strings.Join(t.Command, " ")
	if t.Script != "" {
		what = fmt.Sprintf("a script of %d bytes", len(t.Script))
	}
	fmt.Fprintf(tw, "Task:\t%s\nOwner:\t%s\nProfile:\t%s\nCommand:\t%s\nState:\t%s\n", t.ID, t.Owner, t.Profile, what, t.State)
	if t.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", t.Reason)
	}
	if t.EstimatedStart != nil {
		fmt.Fprintf(tw, "Estimated start:\t%s%s\n", t.EstimatedStart.Local().Format(time.DateTime), staleNote(t.EstimatedStartStale))
	}
	fmt.Fprintf(tw, "Exit:\t%s\nTime limit:\t%s (kill wait %ds)\nVM:\t%s\nOutput:\t%d bytes\nSubmitted:\t%s\n", exitOf(*t),
		time.Duration(t.TimeLimit)*time.Second, t.KillWait, orDash(t.VMID), t.LogBytes, t.CreatedAt.Local().Format(time.DateTime))
	// In this order: a map's would change from one call to the next.
	for _, x := range []struct {
		name string
		at   *time.Time
	}{{"Started:", t.StartedAt}, {"Ended:", t.EndedAt}} {
		if x.at != nil {
			fmt.Fprintf(tw, "%s\t%s\n", x.name, x.at.Local().Format(time.DateTime))
		}
	}
	printTaskExtras(tw, t)
	if err := tw.Flush(); err != nil {
		return err
	}
	return printTaskParts(w, t)
}

// printTaskExtras adds an array's, an element's, retries' and a warning
// signal's lines.
func printTaskExtras(tw io.Writer, t *api.Task) {
	if t.Array != "" {
		fmt.Fprintf(tw, "Array:\t%s (%s)\n", t.Array, orDash(api.TaskCounts(t.ArrayCounts)))
	}
	if t.ArrayID != "" && t.ArrayIndex != nil {
		fmt.Fprintf(tw, "Element:\t%d of array %s\n", *t.ArrayIndex, t.ArrayID)
	}
	if t.Retries > 0 {
		fmt.Fprintf(tw, "Attempt:\t%d of at most %d (retried on %s)\n", t.Attempt, t.Retries+1, strings.Join(t.RetryOn, ","))
	}
	if t.WarningSignal != "" {
		fmt.Fprintf(tw, "Warning signal:\t%s\n", t.WarningSignal)
	}
	if t.In != "" {
		fmt.Fprintf(tw, "In VM:\t%s (its own profile %s)\n", t.In, t.InProfile)
		for _, step := range t.InSteps {
			fmt.Fprintf(tw, "  step:\t%s\n", step)
		}
	}
}

// staleNote marks an estimate made before the queue last changed.
func staleNote(stale bool) string {
	if stale {
		return " (from before the queue last changed)"
	}
	return ""
}

// printTaskParts lists an array's elements and a task's attempts.
func printTaskParts(w io.Writer, t *api.Task) error {
	if len(t.Elements) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nELEMENT\tINDEX\tSTATE\tEXIT\tATTEMPT\tREASON")
		for _, e := range t.Elements {
			idx := "-"
			if e.ArrayIndex != nil {
				idx = fmt.Sprint(*e.ArrayIndex)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, idx, e.State, exitOf(e), e.Attempt, orDash(e.Reason))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if t.ElementsNext != "" {
			total := 0
			for _, n := range t.ArrayCounts {
				total += n
			}
			fmt.Fprintf(w, "… and %d more elements: gpuvm task show %s --all lists them all\n", max(total-len(t.Elements), 1), t.ID)
		}
	}
	if len(t.Attempts) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nATTEMPT\tSTATE\tEXIT\tVM\tENDED\tREASON")
		for _, a := range t.Attempts {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.State, exitOf(api.Task{ExitCode: a.ExitCode, Signal: a.Signal}),
				orDash(a.VMID), a.EndedAt.Local().Format(time.DateTime), orDash(a.Reason))
		}
		return tw.Flush()
	}
	return nil
}

func newTaskLogsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task's output (stdout and stderr as one); -f follows it",
		Long:  "Prints what the task's command wrote so far (gpuvmd keeps up to 64 MiB a task). With -f it goes on as the output comes, until the task has ended, then says how it ended and exits 0 only when it completed.\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(1, "one task ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if follow {
				return followTask(ctx, c, cmd, args[0])
			}
			_, err := c.TaskLogs(ctx, args[0], 0, false, cmd.OutOrStdout())
			return err
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on with the output until the task has ended")
	return cmd
}

func newTaskCancelCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	cmd := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a task: a pending one's VM is deleted; a running one's command gets SIGTERM, then the VM is powered off",
		Long:  "Cancels a task. A pending one's VM is deleted at once; a running one's command gets SIGTERM, and after its kill wait the VM is powered off and deleted. Deleting the task's VM (gpuvm delete) cancels it too.\n" + connectionHelp + "\n" + exitHelp,
		Args:  exactArgs(1, "one task ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			t, err := c.CancelTask(ctx, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "task %s: cancel asked (%s)\n", t.ID, t.State)
			return err
		}),
	}
	o.flags(cmd, false)
	return cmd
}
