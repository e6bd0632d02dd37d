package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestHosts(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		if err := s.RegisterHost(ctx, &Host{Name: " "}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("register without a name: %v, want ErrInvalid", err)
		}
		if err := s.Heartbeat(ctx, "gpu1", `{}`); !errors.Is(err, ErrNotFound) {
			t.Fatalf("heartbeat of an unknown host: %v, want ErrNotFound", err)
		}
		if _, err := s.GetHost(ctx, "gpu1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get unknown host: %v, want ErrNotFound", err)
		}
		h := &Host{Name: "gpu1", APIURL: "http://gpu1:8080", Version: "1.0", State: HostDown}
		if err := s.RegisterHost(ctx, h); err != nil {
			t.Fatal(err)
		}
		if h.State != HostUp || h.StartedAt.IsZero() || !h.HeartbeatAt.Equal(h.StartedAt) || h.Inventory != "" {
			t.Fatalf("registered %+v", h)
		}
		first := h.StartedAt
		if err := s.Heartbeat(ctx, "gpu1", `{"gpus":[]}`); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetHost(ctx, "gpu1")
		if err != nil || got.Inventory != `{"gpus":[]}` || !got.HeartbeatAt.After(first) || !got.StartedAt.Equal(first) {
			t.Fatalf("after heartbeat: %+v %v", got, err)
		}

		// A restart updates URL, version and start, keeps the inventory
		// when it brings none.
		d.clock.Advance(time.Hour)
		if err := s.RegisterHost(ctx, &Host{Name: "gpu1", APIURL: "http://gpu1:9090", Version: "1.1"}); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetHost(ctx, "gpu1")
		if got.APIURL != "http://gpu1:9090" || got.Version != "1.1" || !got.StartedAt.After(first) || got.Inventory != `{"gpus":[]}` {
			t.Fatalf("after restart: %+v", got)
		}
		if err := s.RegisterHost(ctx, &Host{Name: "gpu2", Inventory: `{"host":"b"}`}); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterHost(ctx, &Host{Name: "gpu0"}); err != nil {
			t.Fatal(err)
		}
		// A draining host stays draining when it restarts.
		if err := s.db.Model(&Host{}).Where("name = ?", "gpu0").Update("state", HostDraining).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterHost(ctx, &Host{Name: "gpu0"}); err != nil {
			t.Fatal(err)
		}
		hosts, err := s.ListHosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names, states []string
		for _, h := range hosts {
			names, states = append(names, h.Name), append(states, h.State)
		}
		if !slices.Equal(names, []string{"gpu0", "gpu1", "gpu2"}) || !slices.Equal(states, []string{HostDraining, HostUp, HostUp}) {
			t.Fatalf("hosts %v states %v", names, states)
		}

		// gpu2 heartbeats later than gpu0 and gpu1; an hour on, the cut
		// between them marks only gpu1 down (gpu0 is draining).
		d.clock.Advance(10 * time.Minute)
		if err := s.Heartbeat(ctx, "gpu2", `{"host":"b2"}`); err != nil {
			t.Fatal(err)
		}
		cut := s.Now().Add(-time.Minute)
		down, err := s.MarkHostsDown(ctx, cut)
		if err != nil || !slices.Equal(down, []string{"gpu1"}) {
			t.Fatalf("marked down %v %v", down, err)
		}
		if again, err := s.MarkHostsDown(ctx, cut); err != nil || len(again) != 0 {
			t.Fatalf("marked down twice: %v %v", again, err)
		}
		if g, _ := s.GetHost(ctx, "gpu0"); g.State != HostDraining {
			t.Errorf("draining host became %s", g.State)
		}
		// Its next heartbeat brings it back up.
		if err := s.Heartbeat(ctx, "gpu1", `{}`); err != nil {
			t.Fatal(err)
		}
		if g, _ := s.GetHost(ctx, "gpu1"); g.State != HostUp || g.Inventory != `{}` {
			t.Errorf("after heartbeat: %+v", g)
		}
	})
}
