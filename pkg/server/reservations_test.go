package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// reservationConfig: two bookable GPU profiles, one of bob's, one without
// a GPU; bookings up to 30 days ahead, 8 hours, 4 VMs.
const reservationConfig = `
policy {
  timezone = "Europe/Berlin"
  group "lab" {}
  reservations {
    max_ahead  = "30d"
    max_length = "8h"
    max_vms    = 4
  }
}
profile "whole" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
profile "bobs" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  users = ["bob"]
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
profile "seat" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "pw" } # its guest uses the one-time password
}
`

var berlin = func() *time.Location {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	return loc
}()

// reservationServer is an API whose bookings a real orchestrator makes, on
// a host of two whole L40S (a passthrough backend's inventory).
func reservationServer(t *testing.T) (*Server, *store.Store, *clocktest.Clock) {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(reservationConfig)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	clock := clocktest.New(time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := storetest.New(t, storetest.WithClock(clock.Now), storetest.WithLogger(log))
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann", Groups: []string{"lab"}},
		"bob-token": {Name: "bob"}, "cara-token": {Name: "cara", Groups: []string{"lab"}}}
	for _, u := range users {
		if err := st.CreateUser(context.Background(), &store.User{Name: u.Name, Admin: u.Admin, Groups: u.Groups}); err != nil {
			t.Fatal(err)
		}
	}
	pt := &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		return backend.Inventory{Backend: "passthrough", Host: "test", GPUs: []backend.GPU{
			{Address: "0000:a1:00.0", Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: gpu.ModeIdle, IOMMUGroup: "31"},
			{Address: "0000:a2:00.0", Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: gpu.ModeIdle, IOMMUGroup: "32"},
		}}, nil
	}}
	bs := fakeBackends{"passthrough": pt}
	orch := orchestrator.New(orchestrator.Config{Store: st, Backends: bs, Profiles: func() *config.Config { return cfg }, Host: "test", Log: log})
	return newServer(t, Deps{Auth: users, Backends: bs, Config: &fakeConfig{cfg: cfg}, Store: st, Bookings: orch, Log: log}), st, clock
}

// Every bad request is refused, naming the field.
func TestCreateReservationValidation(t *testing.T) {
	s, st, _ := reservationServer(t)
	body := func(extra string) string {
		return `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"` + extra + `}`
	}
	weekly := `,"recurrence":{"days":["wed"],"until":"2026-12-20T00:00:00Z"}`
	tests := []struct {
		name, token, body string
		status            int
		problem, field    string
	}{
		{"unknown field", "ann-token", body(`,"colour":"red"`), 400, "bad-request", "colour"},
		{"start not a time", "ann-token", `{"profile":"whole","start":"tomorrow","end":"2026-12-02T16:00:00+01:00"}`, 400, "bad-request", "start"},
		{"end a number", "ann-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":16}`, 400, "bad-request", "end"},
		{"until not a time", "ann-token", body(`,"recurrence":{"until":"soon"}`), 400, "bad-request", "recurrence.until"},
		{"count a string", "ann-token", body(`,"count":"two"`), 400, "bad-request", "count"},
		{"nothing to book", "ann-token", `{"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "profile"},
		{"profile and gpu", "ann-token", body(`,"gpu":{"kind":"passthrough"}`), 422, "validation", "gpu"},
		{"unknown profile", "ann-token", strings.Replace(body(""), "whole", "nope", 1), 404, "not-found", "profile"},
		{"profile of others", "ann-token", strings.Replace(body(""), "whole", "bobs", 1), 404, "not-found", "profile"},
		{"profile without GPU", "ann-token", strings.Replace(body(""), "whole", "seat", 1), 422, "validation", "profile"},
		{"admin books a profile the owner may not use", "admin-token", strings.Replace(body(`,"owner":"ann"`), "whole", "bobs", 1), 422, "validation", "profile"},
		{"gpu kind", "ann-token", `{"gpu":{"kind":"tpu"},"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "gpu.kind"},
		{"mig without type", "ann-token", `{"gpu":{"kind":"mig"},"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "gpu.type"},
		{"whole GPU with a type", "ann-token", `{"gpu":{"kind":"passthrough","type":"L40S-12Q"},"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "gpu.type"},
		{"negative count", "ann-token", body(`,"count":-1`), 422, "validation", "count"},
		{"absurd count", "ann-token", body(`,"count":5000`), 422, "validation", "count"},
		{"more than max_vms", "ann-token", body(`,"count":5`), 422, "validation", "count"},
		{"no start", "ann-token", `{"profile":"whole","end":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "start"},
		{"no end", "ann-token", `{"profile":"whole","start":"2026-12-02T16:00:00+01:00"}`, 422, "validation", "end"},
		{"start in the past", "ann-token", `{"profile":"whole","start":"2026-12-01T08:00:00+01:00","end":"2026-12-01T12:00:00+01:00"}`, 422, "validation", "start"},
		{"end before start", "ann-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T13:00:00+01:00"}`, 422, "validation", "end"},
		{"longer than max_length", "ann-token", `{"profile":"whole","start":"2026-12-02T08:00:00+01:00","end":"2026-12-02T17:00:00+01:00"}`, 422, "validation", "end"},
		{"further ahead than max_ahead", "ann-token", `{"profile":"whole","start":"2027-02-02T14:00:00+01:00","end":"2027-02-02T16:00:00+01:00"}`, 422, "validation", "start"},
		{"for another user", "ann-token", body(`,"owner":"bob"`), 403, "forbidden", "owner"},
		{"for a group", "ann-token", body(`,"owner":"group:lab"`), 403, "forbidden", "owner"},
		{"unknown user", "admin-token", body(`,"owner":"zed"`), 422, "validation", "owner"},
		{"unknown group", "admin-token", body(`,"owner":"group:nope"`), 422, "validation", "owner"},
		{"empty group", "admin-token", body(`,"owner":"group:"`), 422, "validation", "owner"},
		{"recurrence without until", "ann-token", body(`,"recurrence":{"days":["wed"]}`), 422, "validation", "recurrence.until"},
		{"bad day", "ann-token", body(`,"recurrence":{"days":["wednesday","frieday"],"until":"2026-12-20T00:00:00Z"}`), 422, "validation", "recurrence.days"},
		{"first not on a day", "ann-token", body(`,"recurrence":{"days":["thu"],"until":"2026-12-20T00:00:00Z"}`), 422, "validation", "recurrence.days"},
		{"day twice", "ann-token", body(`,"recurrence":{"days":["wed","Wed"],"until":"2026-12-20T00:00:00Z"}`), 422, "validation", "recurrence.days"},
		{"days of a daily one", "ann-token", body(`,"recurrence":{"freq":"daily","days":["wed"],"until":"2026-12-20T00:00:00Z"}`), 422, "validation", "recurrence.days"},
		{"monthly", "ann-token", body(`,"recurrence":{"freq":"monthly","until":"2026-12-20T00:00:00Z"}`), 422, "validation", "recurrence.freq"},
		{"overlaps itself", "admin-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-03T16:00:00+01:00","recurrence":{"freq":"daily","until":"2026-12-20T00:00:00Z"}}`, 422, "validation", "recurrence"},
		{"overlapping weekdays", "admin-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-03T16:00:00+01:00","recurrence":{"days":["wed","thu"],"until":"2026-12-20T00:00:00Z"}}`, 422, "validation", "recurrence"},
		{"until before start", "ann-token", body(`,"recurrence":{"days":["wed"],"until":"2026-12-01T00:00:00Z"}`), 422, "validation", "recurrence.until"},
		{"rrule it cannot expand", "ann-token", body(`,"recurrence":{"rrule":"FREQ=HOURLY"}`), 422, "validation", "recurrence.rrule"},
		{"rrule with a bad day", "ann-token", body(`,"recurrence":{"rrule":"FREQ=WEEKLY;BYDAY=WE,XX"}`), 422, "validation", "recurrence.rrule"},
		{"rrule not KEY=VALUE", "ann-token", body(`,"recurrence":{"rrule":"weekly on wednesdays"}`), 422, "validation", "recurrence.rrule"},
		{"rrule and days", "ann-token", body(`,"recurrence":{"rrule":"FREQ=WEEKLY","days":["wed"]}`), 422, "validation", "recurrence.rrule"},
		{"rrule without until", "ann-token", body(`,"recurrence":{"rrule":"FREQ=WEEKLY;BYDAY=WE"}`), 422, "validation", "recurrence.until"},
		{"note too long", "ann-token", body(`,"note":"` + strings.Repeat("x", 501) + `"`), 422, "validation", "note"},
		{"no token", "", body(weekly), 401, "unauthenticated", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, got := send(t, s, "POST", "/v1/reservations", tc.token, tc.body)
			if rec.Code != tc.status || got["type"] != ProblemBase+tc.problem || (got["field"] != nil && got["field"] != tc.field) || (tc.field != "" && got["field"] != tc.field) {
				t.Errorf("%d %v", rec.Code, got)
			}
			if d, _ := got["detail"].(string); rec.Code >= 400 && d == "" {
				t.Errorf("no detail: %v", got)
			}
		})
	}
	if rs, _ := st.ListReservations(context.Background(), store.ReservationFilter{}); len(rs) != 0 {
		t.Errorf("refused requests left %d reservations", len(rs))
	}
	// Good, then: the weekly one, an rrule one with UNTIL in it, and one
	// from now (asked for 30 seconds ago).
	for _, b := range []string{body(weekly), body(`,"recurrence":{"rrule":"FREQ=WEEKLY;BYDAY=WE;UNTIL=20261220T000000Z"}`),
		`{"profile":"whole","start":"2026-12-01T09:59:30+01:00","end":"2026-12-01T11:00:00+01:00"}`} {
		if rec, got := send(t, s, "POST", "/v1/reservations", "admin-token", b); rec.Code != 201 {
			t.Errorf("%s: %d %v", b, rec.Code, got)
		}
	}
}

// A booking the GPUs cannot honour is refused with 409, saying when, what
// and how much is free; nothing is written.
func TestCreateReservationNoCapacity(t *testing.T) {
	s, st, _ := reservationServer(t)
	rec, got := send(t, s, "POST", "/v1/reservations", "ann-token", `{"profile":"whole","count":2,"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`)
	if rec.Code != 201 {
		t.Fatalf("%d %v", rec.Code, got)
	}
	rec, got = send(t, s, "POST", "/v1/reservations", "bob-token", `{"profile":"whole","start":"2026-12-02T15:00:00+01:00","end":"2026-12-02T17:00:00+01:00"}`)
	const want = "the booking cannot be honoured: 0 of 1 VMs of a whole L40S fit from Wed 2 Dec 2026 15:00 CET to 17:00; other bookings hold the rest then"
	if rec.Code != http.StatusConflict || got["type"] != ProblemBase+"no-capacity" || got["detail"] != want {
		t.Errorf("%d %v", rec.Code, got)
	}
	// Three on a host of two never fit.
	rec, got = send(t, s, "POST", "/v1/reservations", "bob-token", `{"profile":"whole","count":3,"start":"2026-12-03T15:00:00+01:00","end":"2026-12-03T17:00:00+01:00"}`)
	if rec.Code != http.StatusConflict || !strings.Contains(fmt.Sprint(got["detail"]), "2 of 3 VMs of a whole L40S fit from Thu 3 Dec 2026 15:00 CET to 17:00; this host has too few GPUs of that kind free then") {
		t.Errorf("%d %v", rec.Code, got)
	}
	if rs, _ := st.ListReservations(context.Background(), store.ReservationFilter{}); len(rs) != 1 {
		t.Errorf("%d reservations, want 1", len(rs))
	}
	// Without a scheduler nothing can be booked.
	s.Bookings = nil
	if rec, got := send(t, s, "POST", "/v1/reservations", "bob-token", `{"profile":"whole","start":"2026-12-05T15:00:00+01:00","end":"2026-12-05T17:00:00+01:00"}`); rec.Code != 503 {
		t.Errorf("no booker: %d %v", rec.Code, got)
	}
}

// Who sees and cancels what: their own, their groups' (members see them,
// the one who booked cancels them), admins everything; to others a
// reservation does not exist.
func TestReservationVisibility(t *testing.T) {
	s, _, clock := reservationServer(t)
	book := func(token, body string) api.Reservation {
		t.Helper()
		rec, got := send(t, s, "POST", "/v1/reservations", token, body)
		if rec.Code != 201 {
			t.Fatalf("%d %v", rec.Code, got)
		}
		var r api.Reservation
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if rec.Header().Get("Location") != fmt.Sprintf("/v1/reservations/%d", r.ID) {
			t.Errorf("Location %q", rec.Header().Get("Location"))
		}
		return r
	}
	anns := book("ann-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00","note":"thesis"}`)
	if anns.Owner != "ann" || anns.CreatedBy != "ann" || anns.Count != 1 || anns.Timezone != "Europe/Berlin" || len(anns.Next) != 1 ||
		anns.Next[0].Start.Format(time.RFC3339) != "2026-12-02T14:00:00+01:00" || anns.Note != "thesis" {
		t.Errorf("ann's %+v", anns)
	}
	labs := book("admin-token", `{"gpu":{"kind":"passthrough","model":"L40S"},"owner":"group:lab","start":"2026-12-03T14:00:00+01:00","end":"2026-12-03T16:00:00+01:00",
		"recurrence":{"days":["thu"],"until":"2026-12-18T00:00:00Z"}}`)
	if labs.Owner != "group:lab" || labs.GPU == nil || labs.GPU.Kind != "passthrough" || labs.Recurrence == nil || labs.Recurrence.RRule != "FREQ=WEEKLY;BYDAY=TH" ||
		strings.Join(labs.Recurrence.Days, ",") != "thu" || len(labs.Next) != 3 {
		t.Errorf("the lab's %+v", labs)
	}
	bobs := book("admin-token", `{"profile":"bobs","owner":"bob","start":"2026-12-04T14:00:00+01:00","end":"2026-12-04T16:00:00+01:00"}`)
	if bobs.Owner != "bob" || bobs.CreatedBy != "admin" {
		t.Errorf("bob's %+v", bobs)
	}
	list := func(token, query string) (int, []int64) {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/reservations"+query, token, "")
		var l api.ReservationList
		json.Unmarshal(rec.Body.Bytes(), &l)
		var ids []int64
		for _, r := range l.Items {
			ids = append(ids, r.ID)
		}
		return rec.Code, ids
	}
	for _, tc := range []struct {
		token, query string
		status       int
		want         []int64
	}{
		{"ann-token", "", 200, []int64{anns.ID, labs.ID}},
		{"cara-token", "", 200, []int64{labs.ID}},
		{"bob-token", "", 200, []int64{bobs.ID}},
		{"admin-token", "", 200, []int64{anns.ID, labs.ID, bobs.ID}},
		{"admin-token", "?owner=group:lab", 200, []int64{labs.ID}},
		{"ann-token", "?owner=group:lab", 200, []int64{labs.ID}},
		{"admin-token", "?from=2026-12-03T20:00:00Z&to=2026-12-04T20:00:00Z", 200, []int64{labs.ID, bobs.ID}},
		{"ann-token", "?owner=bob", 403, nil},
		{"ann-token", "?from=yesterday", 422, nil},
		{"ann-token", "?to=2026-12-04", 422, nil},
		{"ann-token", "?from=2026-12-05T00:00:00Z&to=2026-12-04T00:00:00Z", 422, nil},
	} {
		if code, ids := list(tc.token, tc.query); code != tc.status || fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("%s %s: %d %v, want %d %v", tc.token, tc.query, code, ids, tc.status, tc.want)
		}
	}
	get := func(token string, id int64) int {
		rec, _ := send(t, s, "GET", fmt.Sprintf("/v1/reservations/%d", id), token, "")
		return rec.Code
	}
	if get("ann-token", anns.ID) != 200 || get("cara-token", labs.ID) != 200 || get("bob-token", anns.ID) != 404 || get("bob-token", labs.ID) != 404 || get("admin-token", bobs.ID) != 200 {
		t.Error("GET visibility")
	}
	if rec, _ := send(t, s, "GET", "/v1/reservations/x", "ann-token", ""); rec.Code != 404 {
		t.Errorf("GET x: %d", rec.Code)
	}
	del := func(token string, id int64) int {
		rec, _ := send(t, s, "DELETE", fmt.Sprintf("/v1/reservations/%d", id), token, "")
		return rec.Code
	}
	if code := del("bob-token", anns.ID); code != 404 {
		t.Errorf("bob cancels ann's: %d", code)
	}
	if code := del("cara-token", labs.ID); code != 403 {
		t.Errorf("a member cancels the lab's: %d", code)
	}
	if code := del("bob-token", bobs.ID); code != 204 {
		t.Errorf("bob cancels his own (booked by an admin): %d", code)
	}
	if code := del("ann-token", anns.ID); code != 204 || get("ann-token", anns.ID) != 404 {
		t.Errorf("ann cancels hers: %d", code)
	}
	if code := del("admin-token", labs.ID); code != 204 {
		t.Errorf("admin cancels the lab's: %d", code)
	}
	// Once over, a reservation leaves the default list.
	book("ann-token", `{"profile":"whole","start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00"}`)
	clock.Set(time.Date(2026, 12, 2, 17, 0, 0, 0, berlin))
	if _, ids := list("ann-token", ""); len(ids) != 0 {
		t.Errorf("over: %v", ids)
	}
	if _, ids := list("ann-token", "?from=2026-12-01T00:00:00Z"); len(ids) != 1 {
		t.Errorf("from the 1st: %v", ids)
	}
}

// A weekly slot keeps its wall-clock time across the change to summer
// time: 14:00 CET, then 14:00 CEST.
func TestReservationNextAcrossDST(t *testing.T) {
	s, _, clock := reservationServer(t)
	clock.Set(time.Date(2027, 3, 15, 9, 0, 0, 0, berlin))
	rec, got := send(t, s, "POST", "/v1/reservations", "ann-token",
		`{"profile":"whole","start":"2027-03-16T14:00:00+01:00","end":"2027-03-16T16:00:00+01:00","recurrence":{"days":["tue"],"until":"2027-04-07T00:00:00+02:00"}}`)
	if rec.Code != 201 {
		t.Fatalf("%d %v", rec.Code, got)
	}
	var r api.Reservation
	json.Unmarshal(rec.Body.Bytes(), &r)
	var starts []string
	for _, o := range r.Next {
		starts = append(starts, o.Start.Format(time.RFC3339)+"/"+o.End.Format("15:04"))
	}
	want := "[2027-03-16T14:00:00+01:00/16:00 2027-03-23T14:00:00+01:00/16:00 2027-03-30T14:00:00+02:00/16:00 2027-04-06T14:00:00+02:00/16:00]"
	if fmt.Sprint(starts) != want {
		t.Errorf("next %v\nwant %s", starts, want)
	}
}
