package clienttest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// BookingProfiles is the configuration of NewBooking: one bookable
// profile, "whole", of a whole L40S, bookings up to 30 days ahead and 8
// hours long, and the group "lab".
const BookingProfiles = `
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

// NewBooking runs the API with the real orchestrator's bookings on a host
// of one whole L40S (0000:a1:00.0); it returns its URL and the tokens of
// ann (in group lab) and of an admin. It stops with the test.
func NewBooking(t testing.TB) (url, ann, admin string) {
	t.Helper()
	ctx := context.Background()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(BookingProfiles)})
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
	bs := backends{"passthrough": &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		return backend.Inventory{Backend: "passthrough", Host: "test", GPUs: []backend.GPU{
			{Address: "0000:a1:00.0", Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: gpu.ModeIdle, IOMMUGroup: "31"}}}, nil
	}}}
	orch := orchestrator.New(orchestrator.Config{Store: st, Backends: bs, Profiles: func() *config.Config { return cfg }, Host: "test", Log: log})
	api := server.New(server.Deps{Auth: st, Backends: bs, Config: &Config{cfg: cfg}, Store: st, Bookings: orch, Log: log})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		api.Close() // its estimates' worker stops before the store closes
	})
	return srv.URL, ann, admin
}
