package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAlertLifecycle(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		start := time.Date(2026, 3, 1, 8, 30, 0, 0, time.UTC)
		a := &Alert{Rule: "hot", Subject: "gpu01/" + gpuA, Host: "gpu01", Metric: "gpu_temperature", Value: 86, Summary: "86 °C", StartedAt: start}
		fired, err := s.FireAlert(ctx, a)
		if err != nil || !fired {
			t.Fatalf("fire: %v, %v", fired, err)
		}
		if a.ID == 0 || a.State != AlertFiring || !a.StartedAt.Equal(start) || a.ResolvedAt != nil {
			t.Errorf("fired alert %+v", a)
		}
		// Firing again updates the same alert.
		again := &Alert{Rule: "hot", Subject: "gpu01/" + gpuA, Host: "gpu01", Metric: "gpu_temperature", Value: 90, Summary: "90 °C"}
		fired, err = s.FireAlert(ctx, again)
		if err != nil || fired || again.ID != a.ID || again.Value != 90 || !again.StartedAt.Equal(start) {
			t.Errorf("fire again: %v, %+v, %v", fired, again, err)
		}
		other := &Alert{Rule: "hot", Subject: "gpu01/" + gpuB, Metric: "gpu_temperature", Value: 88}
		if fired, err := s.FireAlert(ctx, other); err != nil || !fired || other.ID == a.ID {
			t.Errorf("fire about another GPU: %v, %+v, %v", fired, other, err)
		}
		counts, err := s.CountFiringAlerts(ctx)
		if err != nil || counts["hot"] != 2 {
			t.Errorf("firing counts %v, %v", counts, err)
		}
		at := start.Add(time.Hour)
		r, err := s.ResolveAlert(ctx, "hot", "gpu01/"+gpuA, 70, "70 °C again", at)
		if err != nil || r.ID != a.ID || r.State != AlertResolved || r.ResolvedAt == nil || !r.ResolvedAt.Equal(at) || r.Value != 70 || r.Summary != "70 °C again" {
			t.Fatalf("resolve: %+v, %v", r, err)
		}
		if _, err := s.ResolveAlert(ctx, "hot", "gpu01/"+gpuA, 70, "", at); !errors.Is(err, ErrNotFound) {
			t.Errorf("resolve twice: %v", err)
		}
		// It fires again: a new alert.
		third := &Alert{Rule: "hot", Subject: "gpu01/" + gpuA, Host: "gpu01", Metric: "gpu_temperature", Value: 87}
		if fired, err := s.FireAlert(ctx, third); err != nil || !fired || third.ID == a.ID {
			t.Errorf("fire after resolve: %v, %+v, %v", fired, third, err)
		}
		if err := s.MarkAlertNotified(ctx, third.ID, at); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkAlertNotified(ctx, 999999, at); !errors.Is(err, ErrNotFound) {
			t.Errorf("mark a missing alert: %v", err)
		}
		for _, tc := range []struct {
			name string
			f    AlertFilter
			ids  []int64
		}{
			{"all, newest first", AlertFilter{}, []int64{third.ID, other.ID, a.ID}},
			{"firing", AlertFilter{State: AlertFiring}, []int64{third.ID, other.ID}},
			{"resolved", AlertFilter{State: AlertResolved}, []int64{a.ID}},
			{"host", AlertFilter{Host: "gpu01"}, []int64{third.ID, a.ID}},
			{"page", AlertFilter{Limit: 1, BeforeID: third.ID}, []int64{other.ID}},
			{"rule", AlertFilter{Rule: "cold"}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.ListAlerts(ctx, tc.f)
				if err != nil {
					t.Fatal(err)
				}
				var ids []int64
				for _, g := range got {
					ids = append(ids, g.ID)
				}
				if len(ids) != len(tc.ids) {
					t.Fatalf("ids %v, want %v", ids, tc.ids)
				}
				for i := range ids {
					if ids[i] != tc.ids[i] {
						t.Fatalf("ids %v, want %v", ids, tc.ids)
					}
				}
			})
		}
		list, _ := s.ListAlerts(ctx, AlertFilter{State: AlertFiring, Rule: "hot", Host: "gpu01"})
		if len(list) != 1 || list[0].NotifiedAt == nil || !list[0].NotifiedAt.Equal(at) {
			t.Errorf("notified alert %+v", list)
		}
		if _, err := s.ListAlerts(ctx, AlertFilter{State: "pending"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("bad state: %v", err)
		}
		if _, err := s.FireAlert(ctx, &Alert{Rule: "x"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("fire without subject: %v", err)
		}
		n, err := s.DeleteResolvedAlertsBefore(ctx, at.Add(time.Second))
		if err != nil || n != 1 {
			t.Errorf("deleted %d, %v", n, err)
		}
		if c := count(t, s, "alerts"); c != 2 {
			t.Errorf("%d alerts left, want the 2 firing", c)
		}
	})
}
