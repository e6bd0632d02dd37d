package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A node is drained and undrained; a down node stays down when undrained
// (its next heartbeat brings it up); an unknown one is ErrNotFound.
func TestSetHostDraining(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		for _, n := range []string{"a", "b"} {
			if err := s.RegisterHost(ctx, &Host{Name: n, APIURL: "http://" + n}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			host  string
			drain bool
			want  string
		}{
			{"a", true, HostDraining},
			{"a", true, HostDraining},
			{"a", false, HostUp},
			{"a", false, HostUp},
		} {
			h, err := s.SetHostDraining(ctx, tc.host, tc.drain)
			if err != nil || h.State != tc.want {
				t.Fatalf("drain %s %v: %+v, %v; want %s", tc.host, tc.drain, h, err, tc.want)
			}
			if got, _ := s.GetHost(ctx, tc.host); got.State != tc.want {
				t.Fatalf("stored state %s, want %s", got.State, tc.want)
			}
		}
		// A draining host keeps its drain across a registration.
		if _, err := s.SetHostDraining(ctx, "b", true); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterHost(ctx, &Host{Name: "b", APIURL: "http://b"}); err != nil {
			t.Fatal(err)
		}
		if h, _ := s.GetHost(ctx, "b"); h.State != HostDraining {
			t.Errorf("b is %s after registering again", h.State)
		}
		if _, err := s.MarkHostsDown(ctx, s.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if h, err := s.SetHostDraining(ctx, "a", false); err != nil || h.State != HostDown {
			t.Errorf("undrain of a down host: %+v, %v", h, err)
		}
		if _, err := s.SetHostDraining(ctx, "zz", true); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown host: %v", err)
		}
	})
}

// The fleet's queries answer on PostgreSQL and say they need it on SQLite.
func TestFleetQueries(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		db, schema, err := s.Scope(ctx)
		if s.Driver() == DriverSQLite {
			if !errors.Is(err, ErrNotPostgres) {
				t.Errorf("scope on SQLite: %v", err)
			}
			if _, err := s.AdvisoryLockHolder(ctx, 1, 2); !errors.Is(err, ErrNotPostgres) {
				t.Errorf("lock holder on SQLite: %v", err)
			}
			if err := s.Notify(ctx, "x", []string{"a"}); err != nil {
				t.Errorf("notify on SQLite: %v", err)
			}
			return
		}
		if err != nil || db == "" || schema == "" || schema == "public" {
			t.Errorf("scope %q %q, %v", db, schema, err)
		}
		now, err := s.DatabaseNow(ctx)
		if err != nil || time.Since(now).Abs() > time.Minute {
			t.Errorf("database clock %v, %v", now, err)
		}
		if err := s.Notify(ctx, "gpuvm_test_channel", []string{"a", "b"}); err != nil {
			t.Errorf("notify: %v", err)
		}
		if who, err := s.AdvisoryLockHolder(ctx, 0x7eadbeef, 12345); err != nil || who != "" {
			t.Errorf("holder of a free lock: %q, %v", who, err)
		}
	})
}
