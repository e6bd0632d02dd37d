package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// maxReserveHours is the longest reservation the server takes (a year of
// 366 days, pkg/policy's MaxBookingLength).
const maxReserveHours = 366 * 24

// maxReserveWeeks is the most weeks --weeks repeats a reservation (a
// recurrence ends within a year of its start).
const maxReserveWeeks = 52

// reserveOpts are the flags of gpuvm reserve.
type reserveOpts struct {
	start, end, until, every, owner, note string
	hours, count, weeks                   int
	out                                   outputOpts
}

// reserveLayouts are the local-time forms the reservation flags take
// besides RFC 3339.
var reserveLayouts = []string{"2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02T15:04:05"}

// parseSlot reads a time flag of gpuvm reserve: RFC 3339, or a local date
// and time ("2026-12-01 14:00").
func parseSlot(flag, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range reserveLayouts {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usageError{fmt.Errorf(`--%s %q: give an RFC 3339 time (2026-12-01T14:00:00+01:00) or a local date and time ("2026-12-01 14:00")`, flag, s)}
}

// parseUntil reads --until: a time as parseSlot reads it, or a local date
// ("2026-12-20"), which is the last day an occurrence may start on.
func parseUntil(s string) (time.Time, error) {
	if d, err := time.ParseInLocation(time.DateOnly, strings.TrimSpace(s), time.Local); err == nil {
		return d.AddDate(0, 0, 1), nil
	}
	t, err := parseSlot("until", s)
	if err != nil {
		return t, usageError{fmt.Errorf(`--until %q: give a date (2026-12-20, the last day an occurrence starts on) or a time`, s)}
	}
	return t, nil
}

// parseEvery reads --every: "daily", "weekly", or weekdays ("mon,thu").
func parseEvery(s string) (freq string, days []string, err error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "daily", "weekly":
		return v, nil, nil
	}
	for _, d := range strings.Split(s, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		if len(d) < 3 || fullDay(d[:3]) == "" || !strings.HasPrefix(fullDay(d[:3]), d) {
			return "", nil, usageError{fmt.Errorf("--every %q: give daily, weekly or weekdays (mon,tue,wed,thu,fri,sat,sun)", s)}
		}
		days = append(days, d[:3])
	}
	return "weekly", days, nil
}

func fullDay(abbr string) string {
	return map[string]string{"sun": "sunday", "mon": "monday", "tue": "tuesday", "wed": "wednesday", "thu": "thursday", "fri": "friday", "sat": "saturday"}[abbr]
}

// request builds the API request of gpuvm reserve PROFILE.
func (r *reserveOpts) request(profile string) (api.CreateReservationRequest, error) {
	req := api.CreateReservationRequest{Profile: profile, Count: r.count, Owner: r.owner, Note: r.note}
	if err := r.out.check(); err != nil {
		return req, err
	}
	if r.start == "" {
		return req, usageError{errors.New("--start is required")}
	}
	start, err := parseSlot("start", r.start)
	if err != nil {
		return req, err
	}
	req.Start = start
	switch {
	case r.end != "" && r.hours != 0:
		return req, usageError{errors.New("--end and --hours exclude each other")}
	case r.end != "":
		if req.End, err = parseSlot("end", r.end); err != nil {
			return req, err
		}
	case r.hours > maxReserveHours: // before the multiplication, which overflows
		return req, usageError{fmt.Errorf("--hours: a reservation lasts at most %d hours", maxReserveHours)}
	case r.hours > 0:
		req.End = start.Add(time.Duration(r.hours) * time.Hour)
	case r.hours < 0:
		return req, usageError{errors.New("--hours must be positive")}
	default:
		return req, usageError{errors.New("give --end or --hours")}
	}
	if r.count < 0 {
		return req, usageError{errors.New("--count must be positive")}
	}
	switch {
	case r.weeks != 0 && (r.every != "" || r.until != ""):
		return req, usageError{errors.New("--weeks replaces --every and --until")}
	case r.weeks < 0 || r.weeks > maxReserveWeeks:
		return req, usageError{fmt.Errorf("--weeks is from 1 to %d, not %d", maxReserveWeeks, r.weeks)}
	case r.weeks > 1:
		// No occurrence starts at or after until: half a day after the
		// last week's start, whatever the daylight-saving shifts.
		until := req.Start.AddDate(0, 0, 7*(r.weeks-1)).Add(12 * time.Hour)
		req.Recurrence = &api.Recurrence{Freq: "weekly", Until: until}
	case r.every == "" && r.until != "":
		return req, usageError{errors.New("--until goes with --every")}
	case r.every != "" && r.until == "":
		return req, usageError{errors.New("--every needs --until, the last day it repeats")}
	case r.every != "":
		freq, days, err := parseEvery(r.every)
		if err != nil {
			return req, err
		}
		until, err := parseUntil(r.until)
		if err != nil {
			return req, err
		}
		req.Recurrence = &api.Recurrence{Freq: freq, Days: days, Until: until}
	}
	return req, nil
}

func newReserveCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var r reserveOpts
	cmd := &cobra.Command{
		Use:   "reserve PROFILE --start TIME (--end TIME | --hours N)",
		Short: "Book GPU capacity ahead for VMs of a profile",
		Long: `Books the GPU capacity of --count VMs (default 1) of PROFILE from --start to
--end (or for --hours), so that your VMs of that profile asked for then start
at once, and nobody else's VM runs into that time on those GPUs. The server
refuses a booking its GPUs cannot honour then, saying when, what and how much
is free, and one its policy's reservations block forbids (too far ahead, too
long, too many).

Times are RFC 3339 (2026-12-01T14:00:00+01:00) or local ("2026-12-01 14:00").

--every repeats it: daily, weekly, or on weekdays (--every tue,thu; the start
must be on one of them), until --until DATE, the last day an occurrence starts
on (or a time before which they start). A 14:00 slot stays at 14:00 in the
server's time zone across daylight-saving changes.

--weeks N repeats it weekly, N weeks in all (this one included), at the same
time: all N are booked or none, and a refusal names the week that cannot be
had.

--for books for someone else (admins): a user, or group:NAME for a group's
members. --note says what it is for.

Output: a summary by default; --json prints the api.Reservation; --quiet its ID.
` + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "a profile"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			req, err := r.request(args[0])
			if err != nil {
				return err
			}
			res, err := c.CreateReservation(ctx, req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case r.out.json:
				return writeJSON(w, res)
			case r.out.quiet:
				_, err := fmt.Fprintln(w, res.ID)
				return err
			}
			return writeReservation(w, res)
		}),
		ValidArgsFunction: completeProfiles(&o),
	}
	o.flags(cmd, false)
	f := cmd.Flags()
	f.StringVar(&r.start, "start", "", "when it starts (required)")
	f.StringVar(&r.end, "end", "", "when it ends")
	f.IntVar(&r.hours, "hours", 0, "how many hours it lasts (instead of --end)")
	f.IntVar(&r.count, "count", 0, "how many VMs of the profile (default 1)")
	f.StringVar(&r.every, "every", "", "repeat it: daily, weekly, or weekdays (mon,tue)")
	f.StringVar(&r.until, "until", "", "the last day it repeats (with --every)")
	f.IntVar(&r.weeks, "weeks", 0, "repeat it weekly, this many weeks in all (instead of --every and --until)")
	f.StringVar(&r.owner, "for", "", "book for a user or group:NAME (admins)")
	f.StringVar(&r.note, "note", "", "what it is for")
	r.out.flags(cmd, "print the reservation's ID only")
	_ = cmd.RegisterFlagCompletionFunc("every", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"daily", "weekly", "mon", "tue", "wed", "thu", "fri", "sat", "sun"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// writeReservation says what was booked, and its next occurrences.
func writeReservation(w io.Writer, r *api.Reservation) error {
	fmt.Fprintf(w, "Reserved %s for %s (reservation %d)", booked(*r), r.Owner, r.ID)
	if rep := repeats(*r); rep != "-" {
		fmt.Fprintf(w, ", %s", rep)
	}
	fmt.Fprintln(w, ".")
	for _, o := range r.Next {
		fmt.Fprintf(w, "  %s\n", span(o))
	}
	_, err := fmt.Fprintf(w, "Your VMs of %s asked for then start on it; 'gpuvm reservations cancel %d' gives it back.\n", what(*r), r.ID)
	return err
}

// what is what a reservation books, without the count.
func what(r api.Reservation) string {
	if r.Profile != "" {
		return r.Profile
	}
	if r.GPU == nil {
		return "-"
	}
	s := r.GPU.Kind
	if r.GPU.Type != "" {
		s += " " + r.GPU.Type
	}
	if r.GPU.Model != "" {
		s += " on " + r.GPU.Model
	}
	return s
}

func booked(r api.Reservation) string { return fmt.Sprintf("%d× %s", r.Count, what(r)) }

// span writes an occurrence in local time: "Tue 1 Dec 14:00–16:00 CET".
func span(o api.Occurrence) string {
	s, e := o.Start.Local(), o.End.Local()
	end := e.Format("15:04")
	if s.YearDay() != e.YearDay() || s.Year() != e.Year() {
		end = e.Format("Mon 2 Jan 15:04")
	}
	return fmt.Sprintf("%s–%s %s", s.Format("Mon 2 Jan 15:04"), end, e.Format("MST"))
}

// repeats says how a reservation repeats: "every Tue, Thu until Sun 20
// Dec", "daily until …", or "-".
func repeats(r api.Reservation) string {
	rec := r.Recurrence
	if rec == nil {
		return "-"
	}
	every := "daily"
	if rec.Freq != "daily" {
		days := make([]string, len(rec.Days))
		for i, d := range rec.Days {
			days[i] = strings.ToUpper(d[:1]) + d[1:]
		}
		if len(days) == 0 {
			days = []string{r.Start.Local().Format("Mon")}
		}
		every = "every " + strings.Join(days, ", ")
	}
	if !rec.Until.IsZero() {
		every += " until " + rec.Until.Local().Add(-time.Nanosecond).Format("Mon 2 Jan 2006")
	}
	return every
}

type reservationsOpts struct {
	all   bool
	owner string
	out   outputOpts
}

func newReservationsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var l reservationsOpts
	cmd := &cobra.Command{
		Use:   "reservations",
		Short: "List the GPU capacity booked ahead that you may see; cancel a booking",
		Long: `Lists the reservations not over yet that you may see: your own, your groups'
and those you made (admins: everyone's), by start, with their next
occurrence in local time. --all includes those that are over; --owner keeps
one owner's (a user, or group:NAME).

Output: a table by default; --json prints an api.ReservationList; --quiet the
IDs only.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := l.out.check(); err != nil {
				return err
			}
			opts := client.ListReservationsOptions{Owner: l.owner}
			if l.all {
				opts.From = time.Unix(0, 0).UTC()
			}
			rs, err := c.ListReservations(ctx, opts)
			if err != nil {
				return err
			}
			return writeReservations(cmd.OutOrStdout(), rs, l.out)
		}),
	}
	o.flags(cmd, true)
	cmd.Flags().BoolVar(&l.all, "all", false, "those that are over too")
	cmd.Flags().StringVar(&l.owner, "owner", "", "only this owner's: a user, or group:NAME")
	l.out.flags(cmd, "print the IDs only")
	cmd.AddCommand(newCancelReservationCmd(&o), newFreeCapacityCmd(&o))
	return cmd
}

type freeOpts struct {
	from  string
	hours int
	step  time.Duration
	json  bool
}

func newFreeCapacityCmd(o *clientOpts) *cobra.Command {
	var f freeOpts
	cmd := &cobra.Command{
		Use:   "free PROFILE",
		Short: "How many VMs of a profile a booking could get, hour by hour",
		Long: `Shows, for the --hours (default 24) from --from (default now) in slots of
--step (default 1h), how many VMs of PROFILE a booking of each slot could get:
the GPUs less the reservations made and the VMs whose leases run into it.
Consecutive slots with as much free are one line, in local time. The rules
that bind your bookings come first.

Output: a table by default; --json prints the api.ReservationCapacity.
` + exitHelp,
		Args: exactArgs(1, "a profile"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var from, to time.Time
			if f.from != "" {
				t, err := parseSlot("from", f.from)
				if err != nil {
					return err
				}
				from = t
			}
			if f.hours < 1 || f.hours > 5*7*24 {
				return usageError{fmt.Errorf("--hours is from 1 to %d, not %d", 5*7*24, f.hours)}
			}
			if from.IsZero() {
				from = time.Now().Truncate(time.Hour)
			}
			to = from.Add(time.Duration(f.hours) * time.Hour)
			capacity, err := c.ReservationCapacity(ctx, args[0], from, to, f.step)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), capacity)
			}
			return writeCapacity(cmd.OutOrStdout(), capacity)
		}),
		ValidArgsFunction: completeProfiles(o),
	}
	cmd.Flags().StringVar(&f.from, "from", "", "the first slot's start (default: this hour)")
	cmd.Flags().IntVar(&f.hours, "hours", 24, "how many hours to show")
	cmd.Flags().DurationVar(&f.step, "step", time.Hour, "the slots' length (15m to 24h)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the api.ReservationCapacity")
	return cmd
}

// writeCapacity writes the rules, then the slots, consecutive ones with as
// much free as one line: "Tue 1 Dec 14:00–18:00 CET  2 free".
func writeCapacity(w io.Writer, c *api.ReservationCapacity) error {
	r := c.Rules
	switch {
	case c.Unavailable != "":
		fmt.Fprintf(w, "No GPU here can give %s: %s\n", c.Profile, c.Unavailable)
	case !r.MayBook:
		fmt.Fprintf(w, "You may not book %s: %s\n", c.Profile, r.WhyNot)
	case r.MaxAheadSeconds > 0 || r.MaxLengthSeconds > 0 || r.MaxVMs > 0:
		var rules []string
		if r.MaxAheadSeconds > 0 {
			rules = append(rules, "up to "+config.FormatDuration(time.Duration(r.MaxAheadSeconds)*time.Second)+" ahead")
		}
		if r.MaxLengthSeconds > 0 {
			rules = append(rules, "for at most "+config.FormatDuration(time.Duration(r.MaxLengthSeconds)*time.Second))
		}
		if r.MaxVMs > 0 {
			vms := fmt.Sprintf("at most %d VMs", r.MaxVMs)
			if r.MaxVMs == 1 {
				vms = "1 VM at most"
			}
			rules = append(rules, vms)
		}
		fmt.Fprintf(w, "You may book %s %s.\n", c.Profile, strings.Join(rules, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tFREE")
	free := func(s api.ReservationSlot) string {
		switch {
		case s.Past:
			return "over"
		case s.Free >= c.Most && c.Most > 0 && c.Rules.MaxVMs == 0: // counted up to Most, not to the rules' limit
			return fmt.Sprintf("%d or more", s.Free)
		}
		return strconv.Itoa(s.Free)
	}
	for i := 0; i < len(c.Slots); {
		j := i
		for j+1 < len(c.Slots) && free(c.Slots[j+1]) == free(c.Slots[i]) {
			j++
		}
		fmt.Fprintf(tw, "%s\t%s\n", span(api.Occurrence{Start: c.Slots[i].Start, End: c.Slots[j].End}), free(c.Slots[i]))
		i = j + 1
	}
	return tw.Flush()
}

func writeReservations(w io.Writer, rs []api.Reservation, out outputOpts) error {
	switch {
	case out.json:
		if rs == nil {
			rs = []api.Reservation{}
		}
		return writeJSON(w, api.ReservationList{Items: rs})
	case out.quiet:
		for _, r := range rs {
			fmt.Fprintln(w, r.ID)
		}
		return nil
	}
	if len(rs) == 0 {
		_, err := fmt.Fprintln(w, "No reservations.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tBOOKED\tNEXT\tREPEATS\tNOTE")
	for _, r := range rs {
		next := "over"
		if len(r.Next) > 0 {
			next = span(r.Next[0])
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Owner, booked(r), next, repeats(r), orDash(r.Note))
	}
	return tw.Flush()
}

func newCancelReservationCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a reservation: its capacity is free for everyone again",
		Long: `Cancels a reservation by its ID ('gpuvm reservations' lists them): its owner,
who booked it, or an admin may.
` + exitHelp,
		Args: exactArgs(1, "a reservation's ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageError{fmt.Errorf("%q is not a reservation's ID (a number; 'gpuvm reservations' lists them)", args[0])}
			}
			if err := c.CancelReservation(ctx, id); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Cancelled reservation %d.\n", id)
			return err
		}),
		ValidArgsFunction: completeReservations(o),
	}
}

// completeReservations completes the IDs of the reservations you may see.
func completeReservations(o *clientOpts) cobra.CompletionFunc {
	return completeFromServer(o, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		rs, err := c.ListReservations(ctx, client.ListReservationsOptions{})
		var out []cobra.Completion
		for _, r := range rs {
			out = append(out, cobra.CompletionWithDesc(strconv.FormatInt(r.ID, 10), r.Owner+", "+booked(r)))
		}
		return out, err
	})
}
