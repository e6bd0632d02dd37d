package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// GET /v1/reservations/capacity counts per slot what a booking could get:
// two whole L40S, less the reservations made; bad parameters are refused
// naming them.
func TestReservationCapacity(t *testing.T) {
	s, _, _ := reservationServer(t) // it is Tue 1 Dec 2026 10:00 in Berlin
	if rec, got := send(t, s, "POST", "/v1/reservations", "bob-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`); rec.Code != 201 {
		t.Fatalf("%d %v", rec.Code, got)
	}
	capacity := func(t *testing.T, token, query string) (int, api.ReservationCapacity, map[string]any) {
		t.Helper()
		rec, got := send(t, s, "GET", "/v1/reservations/capacity?"+query, token, "")
		var c api.ReservationCapacity
		if rec.Code == 200 {
			if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, c, got
	}
	wed := "from=2026-12-02T12:00:00%2B01:00&to=2026-12-02T17:00:00%2B01:00"
	for _, tc := range []struct {
		name, token, query string
		free               string // the slots' free counts, "p" for a past slot
		most               int
		mayBook            bool
	}{
		{"hours of Wednesday", "ann-token", "profile=whole&" + wed, "[2 2 1 1 2]", 4, true},
		{"half hours", "ann-token", "profile=whole&step=30m&from=2026-12-02T13:00:00%2B01:00&to=2026-12-02T14:30:00%2B01:00", "[2 2 1]", 4, true},
		{"a slot over and one under way", "ann-token", "profile=whole&from=2026-12-01T08:00:00%2B01:00&to=2026-12-01T11:00:00%2B01:00", "[p p 2]", 4, true},
		{"a ragged end", "ann-token", "profile=whole&from=2026-12-02T15:00:00%2B01:00&to=2026-12-02T16:30:00%2B01:00", "[1 2]", 4, true},
		{"an admin counts up to 100", "admin-token", "profile=whole&" + wed, "[2 2 1 1 2]", 100, true},
		{"bob counts his own profile", "bob-token", "profile=bobs&" + wed, "[2 2 1 1 2]", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, c, got := capacity(t, tc.token, tc.query)
			if code != 200 {
				t.Fatalf("%d %v", code, got)
			}
			var free []string
			for _, sl := range c.Slots {
				if sl.Past {
					free = append(free, "p")
				} else {
					free = append(free, fmt.Sprint(sl.Free))
				}
			}
			if got := "[" + strings.Join(free, " ") + "]"; got != tc.free {
				t.Errorf("free %s, want %s", got, tc.free)
			}
			if c.Most != tc.most || c.Rules.MayBook != tc.mayBook || c.Timezone != "Europe/Berlin" || c.Unavailable != "" {
				t.Errorf("%+v", c)
			}
			if tc.mayBook != (c.Rules.WhyNot == "") {
				t.Errorf("why not %q", c.Rules.WhyNot)
			}
		})
	}
	// The rules as they bind ann; none bind an admin.
	_, c, _ := capacity(t, "ann-token", "profile=whole&"+wed)
	if c.Rules.MaxAheadSeconds != 30*24*3600 || c.Rules.MaxLengthSeconds != 8*3600 || c.Rules.MaxVMs != 4 || c.StepSeconds != 3600 ||
		c.Slots[0].Start.Format(time.RFC3339) != "2026-12-02T12:00:00+01:00" || c.Slots[0].End.Format(time.RFC3339) != "2026-12-02T13:00:00+01:00" {
		t.Errorf("%+v", c)
	}
	if _, c, _ := capacity(t, "admin-token", "profile=whole&"+wed); c.Rules.MaxVMs != 0 || c.Rules.MaxLengthSeconds != 0 {
		t.Errorf("admin's rules %+v", c.Rules)
	}
	// By default: a week of hours from this one.
	if _, c, _ := capacity(t, "ann-token", "profile=whole"); len(c.Slots) != 7*24 || c.Slots[0].Start.Format(time.RFC3339) != "2026-12-01T10:00:00+01:00" {
		t.Errorf("default: %d slots from %v", len(c.Slots), c.From)
	}
	for _, tc := range []struct {
		name, query string
		status      int
		field       string
	}{
		{"no profile", wed, 422, "profile"},
		{"unknown profile", "profile=nope&" + wed, 404, "profile"},
		{"another's profile", "profile=bobs&" + wed, 404, "profile"},
		{"a profile without GPU", "profile=seat&" + wed, 422, "profile"},
		{"step not a duration", "profile=whole&step=hourly", 422, "step"},
		{"step too short", "profile=whole&step=1m", 422, "step"},
		{"step too long", "profile=whole&step=48h", 422, "step"},
		{"from not a time", "profile=whole&from=monday", 422, "from"},
		{"to not a time", "profile=whole&to=2026-12-09", 422, "to"},
		{"to before from", "profile=whole&from=2026-12-02T12:00:00Z&to=2026-12-02T11:00:00Z", 422, "to"},
		{"too many slots", "profile=whole&from=2026-12-02T00:00:00Z&to=2027-01-30T00:00:00Z", 422, "to"},
		{"from too far", "profile=whole&from=2030-12-02T00:00:00Z", 422, "from"},
		{"an empty step", "profile=whole&step=", 422, "step"},
		{"a bad range before no profile", "to=2026-12-01T00:00:00Z", 422, "to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, got := capacity(t, "ann-token", tc.query)
			if code != tc.status || got["field"] != tc.field {
				t.Errorf("%d %v, want %d naming %s", code, got, tc.status, tc.field)
			}
		})
	}
	if c.Rules.NotOffered {
		t.Errorf("booking is offered, yet %+v", c.Rules)
	}
	// Without a reservations block booking is not offered: ann is told
	// so (not_offered), an admin still books.
	cfg := s.config()
	rules := cfg.Policy.Reservations
	cfg.Policy.Reservations = nil
	if _, c, _ := capacity(t, "ann-token", "profile=whole&"+wed); c.Rules.MayBook || !c.Rules.NotOffered || c.Rules.WhyNot == "" {
		t.Errorf("no reservations block: ann's rules %+v", c.Rules)
	}
	if _, c, _ := capacity(t, "admin-token", "profile=whole&"+wed); !c.Rules.MayBook || c.Rules.NotOffered {
		t.Errorf("no reservations block: the admin's rules %+v", c.Rules)
	}
	cfg.Policy.Reservations = rules
	s.Bookings = nil
	if code, _, got := capacity(t, "ann-token", "profile=whole"); code != http.StatusServiceUnavailable {
		t.Errorf("no booker: %d %v", code, got)
	}
}

// A weekly booking is all or nothing: when one week cannot be given, none
// is booked and the refusal names that week.
func TestWeeklyReservationRefusedNamesTheWeek(t *testing.T) {
	s, _, _ := reservationServer(t)
	if rec, got := send(t, s, "POST", "/v1/reservations", "admin-token", `{"profile":"whole","count":2,"start":"2026-12-16T14:00:00+01:00","end":"2026-12-16T15:00:00+01:00"}`); rec.Code != 201 {
		t.Fatalf("%d %v", rec.Code, got)
	}
	rec, got := send(t, s, "POST", "/v1/reservations", "ann-token",
		`{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00","recurrence":{"freq":"weekly","until":"2026-12-24T00:00:00+01:00"}}`)
	if rec.Code != http.StatusConflict || !strings.Contains(fmt.Sprint(got["detail"]), "fit from Wed 16 Dec 2026 14:00 CET to 16:00; other bookings hold the rest then") {
		t.Errorf("%d %v", rec.Code, got)
	}
	rec, _ = send(t, s, "GET", "/v1/reservations?owner=ann", "ann-token", "")
	var l api.ReservationList
	json.Unmarshal(rec.Body.Bytes(), &l)
	if len(l.Items) != 0 {
		t.Errorf("a refused weekly booking left %d", len(l.Items))
	}
}
