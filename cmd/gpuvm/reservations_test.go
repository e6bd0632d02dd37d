package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

func TestReserveCommands(t *testing.T) {
	url, annToken, adminToken := clienttest.NewBooking(t)
	ann := newCLI(t, map[string]string{"GPUVM_URL": url, "GPUVM_TOKEN": annToken})
	admin := newCLI(t, map[string]string{"GPUVM_URL": url, "GPUVM_TOKEN": adminToken})
	day := time.Now().AddDate(0, 0, 2)
	at := func(d time.Time, hour int) time.Time {
		return time.Date(d.Year(), d.Month(), d.Day(), hour, 0, 0, 0, time.Local)
	}
	local := func(t time.Time) string { return t.Format("2006-01-02 15:04") }

	// A local time and --hours.
	out := ann.must("reserve", "whole", "--start", local(at(day, 14)), "--hours", "2", "--note", "thesis")
	want := fmt.Sprintf("Reserved 1× whole for ann (reservation 1).\n  %s–16:00 %s\n", at(day, 14).Format("Mon 2 Jan 15:04"), at(day, 16).Format("MST"))
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "gpuvm reservations cancel 1") {
		t.Errorf("reserve:\n%s\nwant it to start with\n%s", out, want)
	}
	// The GPU is booked then: refused with the reason, exit 1.
	_, errOut, code := ann.run("reserve", "whole", "--start", at(day, 15).Format(time.RFC3339), "--end", local(at(day, 17)))
	if code != 1 || !strings.Contains(errOut, "cannot be honoured: 0 of 1 VMs of a whole L40S fit") {
		t.Errorf("overlap: exit %d %q", code, errOut)
	}
	// The server's rules: too long, naming the field.
	_, errOut, code = ann.run("reserve", "whole", "--start", local(at(day, 8)), "--hours", "9")
	if code != 1 || !strings.Contains(errOut, "the longest is 8h") {
		t.Errorf("too long: exit %d %q", code, errOut)
	}
	// An admin books a weekly slot for the lab; --json.
	next := at(day, 18)
	var lab api.Reservation
	decodeStrict(t, admin.must("reserve", "whole", "--start", local(next), "--hours", "1", "--every", next.Format("Mon"), "--until",
		next.AddDate(0, 0, 14).Format(time.DateOnly), "--for", "group:lab", "--json"), &lab)
	if lab.Owner != "group:lab" || lab.Recurrence == nil || len(lab.Next) != 3 || lab.CreatedBy != "admin" {
		t.Errorf("the lab's: %+v", lab)
	}
	if id := strings.TrimSpace(ann.must("reserve", "whole", "--start", local(at(day.AddDate(0, 0, 1), 9)), "--hours", "1", "-q")); id != "3" {
		t.Errorf("-q: %q", id)
	}

	// The list: a table, --json, --quiet.
	out = ann.must("reservations")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "REPEATS") ||
		!strings.Contains(lines[1], "1× whole") || !strings.Contains(lines[1], "thesis") ||
		!strings.Contains(lines[2], "group:lab") || !strings.Contains(lines[2], "every "+next.Format("Mon")+" until") {
		t.Errorf("table:\n%s", out)
	}
	var l api.ReservationList
	decodeStrict(t, ann.must("reservations", "--json", "--all"), &l)
	if len(l.Items) != 3 || l.Items[0].Note != "thesis" {
		t.Errorf("--json: %+v", l)
	}
	if out := admin.must("reservations", "-q", "--owner", "group:lab"); out != "2\n" {
		t.Errorf("-q --owner group:lab: %q", out)
	}

	// Cancel.
	if _, errOut, code := ann.run("reservations", "cancel", "2"); code != 1 || !strings.Contains(errOut, "an admin may cancel it") {
		t.Errorf("ann cancels the lab's: exit %d %q", code, errOut)
	}
	if out := ann.must("reservations", "cancel", "1"); out != "Cancelled reservation 1.\n" {
		t.Errorf("cancel: %q", out)
	}
	if _, errOut, code := ann.run("reservations", "cancel", "1"); code != 1 || !strings.Contains(errOut, "no reservation 1") {
		t.Errorf("cancel again: exit %d %q", code, errOut)
	}
	if out := admin.must("reservations", "cancel", "2"); out != "Cancelled reservation 2.\n" {
		t.Errorf("admin cancels: %q", out)
	}
	if out := ann.must("reservations", "-q"); out != "3\n" {
		t.Errorf("left: %q", out)
	}

	// --weeks: a weekly booking of which a week is taken is refused,
	// naming that week, and leaves nothing booked; then one that fits.
	taken := at(day.AddDate(0, 0, 7), 10)
	admin.must("reserve", "whole", "--start", local(taken), "--hours", "1")
	_, errOut, code = ann.run("reserve", "whole", "--start", local(at(day, 10)), "--hours", "1", "--weeks", "3")
	if week := taken.UTC().Format("Mon 2 Jan 2006 15:04"); code != 1 || !strings.Contains(errOut, "fit from "+week) {
		t.Errorf("--weeks over the admin's: exit %d %q, want it to name %s", code, errOut, week)
	}
	if out := ann.must("reservations", "-q"); out != "3\n" {
		t.Errorf("a refused weekly booking left: %q", out)
	}
	var weekly api.Reservation
	decodeStrict(t, ann.must("reserve", "whole", "--start", local(at(day, 11)), "--hours", "1", "--weeks", "3", "--json"), &weekly)
	if weekly.Recurrence == nil || len(weekly.Next) != 3 || !weekly.Next[2].Start.Equal(at(day.AddDate(0, 0, 14), 11)) {
		t.Errorf("--weeks 3: %+v", weekly)
	}

	// Usage errors, found before asking the server: exit 2.
	for _, args := range [][]string{
		{"reserve", "whole", "--hours", "2"},
		{"reserve", "whole", "--start", "tomorrow", "--hours", "2"},
		{"reserve", "whole", "--start", local(at(day, 9))},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--end", local(at(day, 12))},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "-2"},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--every", "tue"},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--until", "2027-01-01"},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--every", "mo,tu", "--until", "2027-01-01"},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--every", "tue", "--until", "soon"},
		{"reserve", "whole", "--start", local(at(day, 9)), "--hours", "2", "--json", "-q"},
		{"reserve", "--start", local(at(day, 9)), "--hours", "2"},
		{"reservations", "cancel", "x"},
		{"reservations", "cancel"},
		{"reservations", "extra"},
	} {
		if _, errOut, code := ann.run(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d %q", args, code, errOut)
		}
	}
}

func TestParseEvery(t *testing.T) {
	tests := []struct {
		in, freq string
		days     []string
		bad      bool
	}{
		{"daily", "daily", nil, false},
		{"Weekly", "weekly", nil, false},
		{"mon,Thu", "weekly", []string{"mon", "thu"}, false},
		{"tuesday, friday", "weekly", []string{"tue", "fri"}, false},
		{"tues", "weekly", []string{"tue"}, false},
		{"mo", "", nil, true},
		{"monx", "", nil, true},
		{"", "", nil, true},
	}
	for _, tc := range tests {
		freq, days, err := parseEvery(tc.in)
		if (err != nil) != tc.bad || freq != tc.freq || fmt.Sprint(days) != fmt.Sprint(tc.days) {
			t.Errorf("%q: %q %v %v", tc.in, freq, days, err)
		}
	}
	// A date is the last day: until the next midnight.
	u, err := parseUntil("2026-12-20")
	if err != nil || !u.Equal(time.Date(2026, 12, 21, 0, 0, 0, 0, time.Local)) {
		t.Errorf("until a date: %v %v", u, err)
	}
}

// --hours is checked before it becomes a duration: time.Duration(hours) *
// time.Hour wraps past 2562047 hours, to an end before the start.
func TestReserveHoursRange(t *testing.T) {
	for _, tc := range []struct {
		hours int
		ok    bool
	}{{1, true}, {maxReserveHours, true}, {maxReserveHours + 1, false}, {2562048, false}, {1 << 62, false}, {-1, false}} {
		r := reserveOpts{start: "2030-03-01T10:00:00Z", hours: tc.hours}
		req, err := r.request("whole")
		if (err == nil) != tc.ok {
			t.Errorf("--hours %d: %v, want ok=%v", tc.hours, err, tc.ok)
			continue
		}
		if tc.ok && req.End.Sub(req.Start) != time.Duration(tc.hours)*time.Hour {
			t.Errorf("--hours %d: %s to %s", tc.hours, req.Start, req.End)
		}
	}
}

// --weeks N repeats a reservation weekly, N weeks in all; it excludes
// --every and --until.
func TestReserveWeeks(t *testing.T) {
	start := "2030-03-05T14:00:00Z"
	for _, tc := range []struct {
		name  string
		r     reserveOpts
		until string // "" : no recurrence
		bad   string
	}{
		{name: "three weeks", r: reserveOpts{weeks: 3}, until: "2030-03-20T02:00:00Z"},
		{name: "one week is once", r: reserveOpts{weeks: 1}},
		{name: "a year of weeks", r: reserveOpts{weeks: 52}, until: "2031-02-26T02:00:00Z"},
		{name: "too many", r: reserveOpts{weeks: 53}, bad: "--weeks is from 1 to 52"},
		{name: "negative", r: reserveOpts{weeks: -2}, bad: "--weeks is from 1 to 52"},
		{name: "with --every", r: reserveOpts{weeks: 2, every: "weekly"}, bad: "--weeks replaces --every and --until"},
		{name: "with --until", r: reserveOpts{weeks: 2, until: "2030-04-01"}, bad: "--weeks replaces --every and --until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.start, r.hours = start, 2
			req, err := r.request("whole")
			switch {
			case tc.bad != "":
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Errorf("got %v, want %q", err, tc.bad)
				}
			case err != nil:
				t.Fatal(err)
			case tc.until == "":
				if req.Recurrence != nil {
					t.Errorf("recurrence %+v", req.Recurrence)
				}
			case req.Recurrence == nil || req.Recurrence.Freq != "weekly" || req.Recurrence.Until.UTC().Format(time.RFC3339) != tc.until:
				t.Errorf("recurrence %+v, want weekly until %s", req.Recurrence, tc.until)
			}
		})
	}
}

// gpuvm reservations free: the free capacity hour by hour, runs of as much
// free as one line, the rules first.
func TestReservationsFree(t *testing.T) {
	url, annToken, _ := clienttest.NewBooking(t)
	ann := newCLI(t, map[string]string{"GPUVM_URL": url, "GPUVM_TOKEN": annToken})
	day := time.Now().AddDate(0, 0, 2)
	at := func(hour int) time.Time {
		return time.Date(day.Year(), day.Month(), day.Day(), hour, 0, 0, 0, time.Local)
	}
	local := func(t time.Time) string { return t.Format("2006-01-02 15:04") }
	ann.must("reserve", "whole", "--start", local(at(14)), "--hours", "2")
	out := ann.must("reservations", "free", "whole", "--from", local(at(12)), "--hours", "6")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"You may book whole up to 4w2d ahead, for at most 8h, 1 VM at most.",
		"WHEN",
		span(api.Occurrence{Start: at(12), End: at(14)}) + "  1",
		span(api.Occurrence{Start: at(14), End: at(16)}) + "  0",
		span(api.Occurrence{Start: at(16), End: at(18)}) + "  1",
	}
	if len(lines) != len(want) {
		t.Fatalf("free:\n%s", out)
	}
	for i, w := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != strings.Join(strings.Fields(w), " ") && !(i == 1 && strings.HasPrefix(got, w)) {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
	var c api.ReservationCapacity
	decodeStrict(t, ann.must("reservations", "free", "whole", "--from", local(at(12)), "--hours", "2", "--step", "30m", "--json"), &c)
	if len(c.Slots) != 4 || c.StepSeconds != 1800 || c.Slots[3].Free != 1 {
		t.Errorf("--json: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"reservations", "free", "whole", "--hours", "0"}, 2, "--hours is from 1"},
		{[]string{"reservations", "free", "whole", "--from", "soon"}, 2, "--from"},
		{[]string{"reservations", "free", "nope"}, 1, `unknown profile "nope"`},
		{[]string{"reservations", "free", "whole", "--step", "1m"}, 1, "step is a duration from 15m"},
		{[]string{"reservations", "free"}, 2, "profile"},
	} {
		if _, errOut, code := ann.run(tc.args...); code != tc.code || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.err)
		}
	}
}
