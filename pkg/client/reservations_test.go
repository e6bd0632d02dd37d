package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// The reservation calls against the real API: book, refused for capacity
// and for a bad field, list, get, cancel.
func TestReservationsAgainstServer(t *testing.T) {
	url, annToken, adminToken := clienttest.NewBooking(t)
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
