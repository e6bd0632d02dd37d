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
	})
}
