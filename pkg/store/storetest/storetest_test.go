package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// TestEach writes through every driver's store on the given clock, and finds
// each database empty at first: no test sees another's rows.
func TestEach(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for range 2 {
		Each(t, func(t *testing.T, st *store.Store) {
			ctx := context.Background()
			if _, err := st.GetUser(ctx, "ann"); err == nil {
				t.Fatal("a fresh store already holds ann")
			}
			if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
				t.Fatal(err)
			}
			u, err := st.GetUser(ctx, "ann")
			if err != nil {
				t.Fatal(err)
			}
			if !u.CreatedAt.Equal(at) {
				t.Errorf("created at %v, want the clock's %v", u.CreatedAt, at)
			}
		}, WithClock(clocktest.New(at).Now))
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct{ driver, want string }{{"", store.DriverSQLite}, {store.DriverSQLite, store.DriverSQLite}} {
		if got := Config(t, tc.driver).Driver; got != tc.want {
			t.Errorf("Config(%q).Driver = %q, want %q", tc.driver, got, tc.want)
		}
	}
	if a, b := Config(t, "").DSN, Config(t, "").DSN; a == b {
		t.Errorf("two configs share the database %s", a)
	}
}
