package store

import (
	"context"
	"errors"
	"testing"
)

func TestGPUDrains(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		if err := s.DrainGPU(ctx, &GPUDrain{Host: "h1", GPUAddress: ""}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("drain without an address: %v, want ErrInvalid", err)
		}
		if err := s.DrainGPU(ctx, &GPUDrain{Host: "h1", GPUAddress: "0000:41:00.0", Reason: "fan", DrainedBy: "root"}); err != nil {
			t.Fatal(err)
		}
		first, err := s.ListGPUDrains(ctx, "h1")
		if err != nil || len(first) != 1 {
			t.Fatalf("list: %v %v", first, err)
		}
		// Draining again updates the reason, keeps the time.
		if err := s.DrainGPU(ctx, &GPUDrain{Host: "h1", GPUAddress: "0000:41:00.0", Reason: "fan again", DrainedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		if err := s.DrainGPU(ctx, &GPUDrain{Host: "h2", GPUAddress: "0000:01:00.0"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListGPUDrains(ctx, "h1")
		if err != nil || len(got) != 1 || got[0].Reason != "fan again" || got[0].DrainedBy != "ann" || !got[0].CreatedAt.Equal(first[0].CreatedAt) {
			t.Fatalf("after re-drain: %+v %v (first %+v)", got, err, first)
		}
		all, err := s.ListGPUDrains(ctx, "")
		if err != nil || len(all) != 2 || all[0].Host != "h1" || all[1].Host != "h2" {
			t.Fatalf("all hosts: %+v %v", all, err)
		}
		for i, want := range []bool{true, false} {
			was, err := s.UndrainGPU(ctx, "h1", "0000:41:00.0")
			if err != nil || was != want {
				t.Fatalf("undrain #%d: %v %v, want %v", i, was, err, want)
			}
		}
		if got, _ := s.ListGPUDrains(ctx, "h1"); len(got) != 0 {
			t.Fatalf("still drained: %+v", got)
		}
	})
}
