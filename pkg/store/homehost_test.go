package store

import (
	"context"
	"errors"
	"maps"
	"testing"
)

// A home's host is recorded once, where the home was first made: a later
// record (a VM placed elsewhere) keeps the first.
func TestRecordHomeHost(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		for _, n := range []string{"ann", "bob", "cem"} {
			mustUser(t, s, n)
		}
		hosts, err := s.HomeHosts(ctx, []string{"ann", "bob"})
		if err != nil || len(hosts) != 0 {
			t.Fatalf("home hosts before any home: %v, %v; want none", hosts, err)
		}
		for _, c := range []struct{ user, host, want string }{
			{"ann", "gpu-01", "gpu-01"},
			{"ann", "gpu-02", "gpu-01"}, // first made on gpu-01: stays there
			{"bob", "gpu-02", "gpu-02"},
		} {
			got, err := s.RecordHomeHost(ctx, c.user, c.host)
			if err != nil || got != c.want {
				t.Fatalf("record %s's home on %s: %q, %v; want %q", c.user, c.host, got, err, c.want)
			}
		}
		hosts, err = s.HomeHosts(ctx, []string{"ann", "bob", "cem", "nobody"})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"ann": "gpu-01", "bob": "gpu-02"}; !maps.Equal(hosts, want) {
			t.Fatalf("home hosts %v, want %v", hosts, want)
		}
		if _, err := s.RecordHomeHost(ctx, "nobody", "gpu-01"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown user: %v, want ErrNotFound", err)
		}
		if _, err := s.RecordHomeHost(ctx, "cem", " "); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty host: %v, want ErrInvalid", err)
		}
		if u, err := s.GetUser(ctx, "cem"); err != nil || u.HomeHost != nil {
			t.Fatalf("cem after a refused record: %+v, %v; want no home host", u, err)
		}
		// A home removed on another host than its recorded one stays
		// recorded; removed on its host, it is forgotten.
		for _, c := range []struct{ host, want string }{{"gpu-02", "gpu-01"}, {"gpu-01", ""}} {
			if err := s.ForgetHomeHost(ctx, "ann", c.host); err != nil {
				t.Fatal(err)
			}
			if hosts, err := s.HomeHosts(ctx, []string{"ann"}); err != nil || hosts["ann"] != c.want {
				t.Fatalf("ann's home host after forgetting it on %s: %v, %v; want %q", c.host, hosts, err, c.want)
			}
		}
	})
}

// A host is recorded without the spaces around it, and only while none is:
// an empty one counts as none (and is not read as a host); a name asked
// for many times is asked once (70,000 copies would pass every driver's
// limit of parameters in one query).
func TestRecordHomeHostUnsetOnly(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		for _, n := range []string{"dan", "eve"} {
			mustUser(t, s, n)
		}
		if err := s.db.Model(&User{}).Where("name = ?", "eve").Update("home_host", "").Error; err != nil {
			t.Fatal(err)
		}
		if hosts, err := s.HomeHosts(ctx, []string{"eve"}); err != nil || len(hosts) != 0 {
			t.Fatalf("an empty home host read as %v, %v; want none", hosts, err)
		}
		for _, c := range []struct{ user, host, want string }{
			{"dan", "  gpu-03\t", "gpu-03"},
			{"dan", "gpu-04", "gpu-03"},  // recorded: stays
			{"eve", "gpu-04 ", "gpu-04"}, // empty: as none
			{"eve", "gpu-05", "gpu-04"},
		} {
			if got, err := s.RecordHomeHost(ctx, c.user, c.host); err != nil || got != c.want {
				t.Fatalf("record %s's home on %q: %q, %v; want %q", c.user, c.host, got, err, c.want)
			}
		}
		many := make([]string, 70000)
		for i := range many {
			many[i] = []string{"dan", "eve"}[i%2]
		}
		hosts, err := s.HomeHosts(ctx, many)
		if want := map[string]string{"dan": "gpu-03", "eve": "gpu-04"}; err != nil || !maps.Equal(hosts, want) {
			t.Fatalf("home hosts of 70,000 names: %v, %v; want %v", hosts, err, want)
		}
		// Forgotten on the host as recorded, spaces or not.
		if err := s.ForgetHomeHost(ctx, "dan", " gpu-03 "); err != nil {
			t.Fatal(err)
		}
		if hosts, err := s.HomeHosts(ctx, []string{"dan"}); err != nil || len(hosts) != 0 {
			t.Fatalf("dan's home host after forgetting it: %v, %v; want none", hosts, err)
		}
	})
}
