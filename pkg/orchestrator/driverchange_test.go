package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// An announced change of the hosts' vGPU manager: the owners of the VMs
// that hold a vGPU (time-sliced or MIG-backed) are told once each, with a
// snapshot offered where the VM has a disk; a passed-through GPU's and a
// GPU-less VM's are not; a change already past, or withdrawn, tells
// nobody; a gpuvmd started again does not tell twice.
func TestDriverChangeNotices(t *testing.T) {
	e := newRulesEnv(t, "h100x8", "policy {\n  timezone = \"UTC\"\n  webhook  = \"https://hooks.example.com/notices\"\n}\n")
	ctx := context.Background()
	o := e.orchRules(nil)
	seat := e.submitHours("ann", "h100-vgpu", "seat", 8)
	slice := e.submitHours("bob", "h100-mig", "slice", 8)
	plain := e.submitHours("ann", "nogpu", "plain", 8)
	o.Drain(ctx)
	for _, id := range []string{seat.ID, slice.ID, plain.ID} {
		e.wantVM(id, "running", "")
	}
	// The vGPU seat's profile has a disk here (what the offer depends on).
	e.cfg.Profiles["h100-vgpu"].Disk = &config.Disk{Image: "base"}

	at := rulesStart.Add(72 * time.Hour)
	for _, dc := range []*api.DriverChange{
		{Driver: "550.90.07", At: at, Note: "vGPU 17.4, Saturday's maintenance", By: "admin"},
		{Driver: "535.183.01", At: rulesStart.Add(-time.Hour), By: "admin"}, // past
		{Driver: "560.35.03", At: at.Add(time.Hour), By: "admin"},           // withdrawn below
	} {
		if err := e.st.AnnounceDriverChange(ctx, dc); err != nil {
			t.Fatal(err)
		}
		if dc.Driver == "560.35.03" {
			if _, err := e.st.WithdrawDriverChange(ctx, dc.ID, "admin"); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep := e.at(o, time.Minute)
	if len(rep.Warned) != 2 {
		t.Fatalf("warned %v, want the vGPU seat and the MIG slice", rep.Warned)
	}
	for id, want := range map[string]string{
		seat.ID:  "take a snapshot of its disk first: gpuvm snapshot seat --label before-driver-550.90.07",
		slice.ID: "its disk cannot be snapshotted (it boots a kernel directly)",
	} {
		ws := e.warnings(id)
		if len(ws) != 1 || ws[0].Kind != api.WarningDriverChange || !ws[0].At.Equal(at) || ws[0].MinutesLeft != 72*60-1 ||
			!strings.Contains(ws[0].Reason, "moves to 550.90.07 at Sat 4 May 2030 09:00 UTC (vGPU 17.4, Saturday's maintenance)") ||
			!strings.Contains(ws[0].Reason, want) {
			t.Errorf("%s: %+v; want one notice saying %q", id, ws, want)
		}
	}
	// The same notices go to the policy's webhook.
	if sent := e.notify.sent(); len(sent) != 2 || !strings.HasPrefix(sent[0], api.WarningDriverChange+" vm/") || !strings.HasPrefix(sent[1], api.WarningDriverChange+" vm/") {
		t.Errorf("webhook notifications %q, want two driver_change", sent)
	}
	if ws := e.warnings(plain.ID); len(ws) != 0 {
		t.Errorf("the VM without a GPU was told: %+v", ws)
	}
	// Later rounds, and a gpuvmd started again, tell nobody twice.
	e.at(o, 2*time.Hour)
	e.at(e.orchRules(nil), 3*time.Hour)
	for _, id := range []string{seat.ID, slice.ID} {
		if n := len(e.warnings(id)); n != 1 {
			t.Errorf("%s told %d times", id, n)
		}
	}
	// Once the time has come, a new VM is not told of it.
	late := e.submitHours("bob", "h100-vgpu", "late", 8)
	o.Drain(ctx)
	e.at(o, 73*time.Hour)
	if ws := e.warnings(late.ID); len(ws) != 0 {
		t.Errorf("a VM made after the change was told: %+v", ws)
	}
}

// The store keeps the announcements as events: listed the next first, a
// withdrawal recorded once, an unknown or withdrawn one not found.
func TestDriverChangesStored(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	later := &api.DriverChange{Driver: "560.35.03", At: rulesStart.Add(48 * time.Hour), By: "admin"}
	sooner := &api.DriverChange{Driver: "550.90.07", At: rulesStart.Add(24 * time.Hour), By: "admin", Note: "n"}
	for _, dc := range []*api.DriverChange{later, sooner} {
		if err := e.st.AnnounceDriverChange(ctx, dc); err != nil || dc.ID == "" || dc.AnnouncedAt.IsZero() {
			t.Fatalf("announce: %+v %v", dc, err)
		}
	}
	got, err := e.st.WithdrawDriverChange(ctx, later.ID, "root")
	if err != nil || got.WithdrawnAt == nil || got.WithdrawnBy != "root" || got.Driver != "560.35.03" {
		t.Fatalf("withdraw: %+v %v", got, err)
	}
	// The withdrawal's event says what was withdrawn, for the stream's readers.
	evs, err := e.st.ListEventsSince(ctx, 0, store.EventFilter{Type: api.EventDriverWithdrawn})
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Payload), `"driver":"560.35.03"`) || !strings.Contains(string(evs[0].Payload), `"by":"root"`) {
		t.Fatalf("withdrawal events %+v %v", evs, err)
	}
	for _, id := range []string{later.ID, "no-such-id"} {
		if _, err := e.st.WithdrawDriverChange(ctx, id, "root"); err == nil || !strings.Contains(err.Error(), "no announced driver change") {
			t.Errorf("withdraw %s again: %v", id, err)
		}
	}
	all, err := e.st.DriverChanges(ctx)
	if err != nil || len(all) != 2 || all[0].ID != sooner.ID || all[0].Note != "n" || all[0].WithdrawnAt != nil ||
		all[1].ID != later.ID || all[1].WithdrawnAt == nil {
		t.Fatalf("list: %+v %v", all, err)
	}
}
