package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Usage and the report summary against the real API.
func TestUsageAgainstServer(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// ann held a whole GPU from 10:00 to 12:30 on 2026-01-05.
	from := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	vm := &store.VM{Name: "cube", Owner: "ann", Group: "render", Profile: "seat", Hours: 8}
	if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	end := from.Add(150 * time.Minute)
	if err := env.Store.InsertUsageRecord(ctx, &store.UsageRecord{VMID: vm.ID, User: "ann", Group: "render", Host: "h1",
		GPUAddress: "0000:41:00.0", Kind: gpu.KindPassthrough, Share: 1, StartedAt: from, EndedAt: &end}); err != nil {
		t.Fatal(err)
	}
	admin, _ := client.New(env.URL, env.AdminToken)
	ann, _ := client.New(env.URL, env.UserToken)
	day := client.UsageOptions{From: time.Date(2026, 1, 5, 0, 0, 0, 0, time.FixedZone("CET", 3600)), To: time.Date(2026, 1, 6, 0, 0, 0, 0, time.UTC)}

	r, err := ann.Usage(ctx, day)
	if err != nil || r.User != "ann" || r.By != api.UsageByUser || len(r.Rows) != 1 || r.Rows[0].GPUHours != 2.5 || r.Total.Utilization != nil {
		t.Fatalf("ann's usage: %+v, %v", r, err)
	}
	if !r.From.Equal(day.From) || !r.To.Equal(day.To) {
		t.Errorf("range %s–%s, want %s–%s", r.From, r.To, day.From, day.To)
	}
	byGroup := day
	byGroup.By, byGroup.User = api.UsageByGroup, "ann"
	if r, err := admin.Usage(ctx, byGroup); err != nil || len(r.Rows) != 1 || r.Rows[0].Key != "render" || r.User != "ann" {
		t.Errorf("admin, by group, ann's: %+v, %v", r, err)
	}
	theirs := day
	theirs.User = "admin"
	if _, err := ann.Usage(ctx, theirs); !client.IsForbidden(err) {
		t.Errorf("ann asks for admin's: %v", err)
	}
	bad := day
	bad.By = "colour"
	if _, err := ann.Usage(ctx, bad); !client.IsValidation(err) {
		t.Errorf("by colour: %v", err)
	} else if p, _ := client.AsProblem(err); p.Field != "by" {
		t.Errorf("by colour: field %q", p.Field)
	}

	s, err := admin.ReportSummary(ctx, client.ReportOptions{From: day.From, To: day.To, TZ: "America/New_York", IdleBelow: 0.25})
	if err != nil || s.Location != "America/New_York" || s.IdleBelow != 0.25 || len(s.ByUser) != 1 || s.Total.GPUHours != 2.5 {
		t.Fatalf("summary: %+v, %v", s, err)
	}
	// 10:00–12:30 UTC is Monday 05:00–07:30 in New York.
	if g := s.Heatmaps.AllocatedGPUs[0]; g[5] != 1 || g[6] != 1 || g[7] != 0.5 || g[8] != 0 {
		t.Errorf("Monday in New York: %v", g)
	}
	if _, err := ann.ReportSummary(ctx, client.ReportOptions{}); !client.IsForbidden(err) {
		t.Errorf("a user asks for the summary: %v", err)
	}
}
