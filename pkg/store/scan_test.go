package store

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The column lists of the reads that scan without gorm name every column
// of their model, and read what gorm reads, NULL times and set ones.
func TestScanMatchesModels(t *testing.T) {
	for _, tc := range []struct {
		model any
		cols  string
	}{{&VM{}, vmColumns}, {&Operation{}, opColumns}} {
		var inModel []string
		s := newTestDB(t, drivers[0]).open(t)
		sch := s.db.Model(tc.model).Statement
		if err := sch.Parse(tc.model); err != nil {
			t.Fatal(err)
		}
		for _, f := range sch.Schema.Fields {
			if f.DBName != "" {
				inModel = append(inModel, f.DBName)
			}
		}
		listed := strings.Split(tc.cols, ", ")
		slices.Sort(inModel)
		slices.Sort(listed)
		if !slices.Equal(inModel, listed) {
			t.Errorf("%s: columns scanned %v, in the model %v", sch.Schema.Table, listed, inModel)
		}
	}
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		a, b := mustVM(t, s, "ann", "a"), mustVM(t, s, "ann", "b")
		at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
		if err := s.db.Model(&VM{}).Where("id = ?", a.ID).Updates(map[string]any{"lease_end": at, "start_at": at, "queue_position": 7,
			"host": "h1", "phase": "p", "state_reason": "r", "spec": `{"x":1}`}).Error; err != nil {
			t.Fatal(err)
		}
		got, err := s.GetVMs(ctx, []string{a.ID, b.ID})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{a.ID, b.ID} {
			var want VM
			if err := s.db.Where("id = ?", id).Take(&want).Error; err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got[id], want) {
				t.Errorf("scanned %+v\ngorm    %+v", *got[id], want)
			}
		}
		if got[a.ID].LeaseEnd == nil || !got[a.ID].LeaseEnd.Equal(at) || got[a.ID].QueueRank != 7 || got[b.ID].StartAt != nil {
			t.Errorf("scanned %+v", *got[a.ID])
		}
		ops, err := s.ListUnfinishedOperations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var want []Operation
		if err := s.db.Where(unfinishedOp).Order("created_at, id").Find(&want).Error; err != nil {
			t.Fatal(err)
		}
		if len(ops) != 2 || !reflect.DeepEqual(ops, want) {
			t.Errorf("scanned %+v\ngorm    %+v", ops, want)
		}
		// The stamps: one per operation, in order, with its VM's version
		// and rank; a new step changes the operation's.
		stamps, vms, err := s.ListUnfinishedOperationStamps(ctx, "")
		if err != nil || len(stamps) != 2 {
			t.Fatalf("stamps %+v %v", stamps, err)
		}
		for i, st := range stamps {
			if st.ID != ops[i].ID || st.VMID != ops[i].VMID || st.Stamp == "" {
				t.Errorf("stamp %d: %+v, operation %+v", i, st, ops[i])
			}
		}
		if v := vms[a.ID]; v.Version != got[a.ID].Version || v.QueueRank != 7 || len(vms) != 2 {
			t.Errorf("vm stamps %+v", vms)
		}
		// A fleet node that does not lead reads its own host's alone.
		onH1, onH1VMs, err := s.ListUnfinishedOperationStamps(ctx, "h1")
		if err != nil || len(onH1) != 1 || onH1[0].VMID != a.ID || len(onH1VMs) != 1 || onH1VMs[a.ID] != vms[a.ID] {
			t.Errorf("stamps on h1: %+v %+v %v; want a's alone", onH1, onH1VMs, err)
		}
		if none, _, err := s.ListUnfinishedOperationStamps(ctx, "h2"); err != nil || len(none) != 0 {
			t.Errorf("stamps on h2: %+v %v; want none", none, err)
		}
		if err := s.SetOperationStep(ctx, ops[0].ID, "allocate"); err != nil {
			t.Fatal(err)
		}
		again, _, err := s.ListUnfinishedOperationStamps(ctx, "")
		if err != nil || again[0].Stamp == stamps[0].Stamp || again[1].Stamp != stamps[1].Stamp {
			t.Errorf("after a step: %+v, before %+v (%v)", again, stamps, err)
		}
		byID, err := s.GetOperations(ctx, []string{ops[0].ID, "nope"})
		if err != nil || len(byID) != 1 || byID[ops[0].ID].Step != "allocate" || byID[ops[0].ID].State != OpRunning {
			t.Errorf("GetOperations: %+v %v", byID, err)
		}
	})
}
