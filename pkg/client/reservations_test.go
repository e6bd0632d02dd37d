package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/profile"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// bookingConfig is one bookable profile of a whole L40S.
const bookingConfig = `
policy {
  group "lab" {}
  reservations {
    max_ahead  = "30d"
    max_length = "8h"
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
`

type staticConfig struct{ cfg *profile.Config }

func (c staticConfig) Load() *profile.Config   { return c.cfg }
func (c staticConfig) Reload() (string, error) { return "", nil }

type backendSet map[string]backend.Backend

func (b backendSet) Names() []string {
	var out []string
	for n := range b {
		out = append(out, n)
	}
	return out
}

func (b backendSet) Backend(n string) (backend.Backend, bool) { x, ok := b[n]; return x, ok }

// bookingAPI runs the API with the orchestrator's bookings on a host of
// one whole L40S; it returns its URL and the tokens of ann (in group lab)
// and of an admin.
func bookingAPI(t *testing.T) (url, ann, admin string) {
	t.Helper()
	ctx := context.Background()
	cfg, diags := profile.Parse(profile.Source{Name: "p.hcl", Data: []byte(bookingConfig)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Config{DSN: filepath.Join(t.TempDir(), "db"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, u := range []store.User{{Name: "admin", Admin: true}, {Name: "ann", Groups: []string{"lab"}}} {
		if err := st.CreateUser(ctx, &u); err != nil {
			t.Fatal(err)
		}
	}
	if admin, _, err = st.CreateToken(ctx, "admin", "t", nil); err != nil {
		t.Fatal(err)
	}
	if ann, _, err = st.CreateToken(ctx, "ann", "t", nil); err != nil {
		t.Fatal(err)
	}
	bs := backendSet{"passthrough": &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		return backend.Inventory{Backend: "passthrough", Host: "test", GPUs: []backend.GPU{
			{Address: "0000:a1:00.0", Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: backend.ModeIdle, IOMMUGroup: "31"}}}, nil
	}}}
	orch := orchestrator.New(orchestrator.Config{Store: st, Backends: bs, Profiles: func() *profile.Config { return cfg }, Host: "test", Log: log})
	srv := httptest.NewServer(server.New(server.Deps{Auth: st, Backends: bs, Config: staticConfig{cfg}, Store: st, Bookings: orch, Log: log}))
	t.Cleanup(srv.Close)
	return srv.URL, ann, admin
}

// The reservation calls against the real API: book, refused for capacity
// and for a bad field, list, get, cancel.
func TestReservationsAgainstServer(t *testing.T) {
	url, annToken, adminToken := bookingAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, _ := client.New(url, annToken)
	admin, _ := client.New(url, adminToken)
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)

	r, err := ann.CreateReservation(ctx, api.CreateReservationRequest{Profile: "whole", Start: start, End: start.Add(2 * time.Hour), Note: "demo"})
	if err != nil || r.ID == 0 || r.Owner != "ann" || r.Count != 1 || len(r.Next) != 1 || !r.Next[0].Start.Equal(start) || r.Note != "demo" {
		t.Fatalf("%v %+v", err, r)
	}
	_, err = admin.CreateReservation(ctx, api.CreateReservationRequest{Profile: "whole", Owner: "group:lab", Start: start.Add(time.Hour), End: start.Add(3 * time.Hour)})
	if !client.IsNoCapacity(err) || !strings.Contains(err.Error(), "0 of 1 VMs of a whole L40S fit") {
		t.Errorf("overlapping booking: %v", err)
	}
	_, err = ann.CreateReservation(ctx, api.CreateReservationRequest{Profile: "whole", Start: start, End: start.Add(10 * time.Hour)})
	if p, ok := client.AsProblem(err); !client.IsValidation(err) || !ok || p.Field != "end" {
		t.Errorf("too long: %v", err)
	}
	lab, err := admin.CreateReservation(ctx, api.CreateReservationRequest{Profile: "whole", Owner: "group:lab", Start: start.Add(3 * time.Hour), End: start.Add(4 * time.Hour),
		Recurrence: &api.Recurrence{Freq: "daily", Until: start.Add(72 * time.Hour)}})
	if err != nil || lab.Recurrence == nil || lab.Recurrence.RRule != "FREQ=DAILY" || len(lab.Next) != 3 {
		t.Fatalf("the lab's: %v %+v", err, lab)
	}

	rs, err := ann.ListReservations(ctx, client.ListReservationsOptions{})
	if err != nil || len(rs) != 2 || rs[0].ID != r.ID || rs[1].ID != lab.ID {
		t.Errorf("ann's list: %v %+v", err, rs)
	}
	rs, err = admin.ListReservations(ctx, client.ListReservationsOptions{Owner: "group:lab"})
	if err != nil || len(rs) != 1 || rs[0].ID != lab.ID {
		t.Errorf("the lab's list: %v %+v", err, rs)
	}
	rs, err = ann.ListReservations(ctx, client.ListReservationsOptions{From: start.Add(-time.Hour), To: start.Add(time.Hour)})
	if err != nil || len(rs) != 1 || rs[0].ID != r.ID {
		t.Errorf("a range: %v %+v", err, rs)
	}
	if _, err := ann.ListReservations(ctx, client.ListReservationsOptions{Owner: "bob"}); !client.IsForbidden(err) {
		t.Errorf("bob's as ann: %v", err)
	}
	if got, err := ann.GetReservation(ctx, r.ID); err != nil || got.ID != r.ID || got.Note != "demo" {
		t.Errorf("get: %v %+v", err, got)
	}
	if err := ann.CancelReservation(ctx, lab.ID); !client.IsForbidden(err) {
		t.Errorf("ann cancels the lab's: %v", err)
	}
	if err := ann.CancelReservation(ctx, r.ID); err != nil {
		t.Errorf("cancel: %v", err)
	}
	if _, err := ann.GetReservation(ctx, r.ID); !client.IsNotFound(err) {
		t.Errorf("after cancel: %v", err)
	}
	if err := ann.CancelReservation(ctx, r.ID); !client.IsNotFound(err) {
		t.Errorf("cancel twice: %v", err)
	}
}
