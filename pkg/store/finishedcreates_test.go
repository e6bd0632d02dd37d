package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// The monitor of every node of a fleet asks for the creates finished on
// its host since its last round, every round (10 s): that read must go
// through an index on the finish time, not scan every operation ever
// recorded (the operations table keeps the whole history; the scale
// harness on a fleet showed each node reading all of it every round).
func TestFinishedCreatesReadOnlyTheNew(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		old := d.clock.Now().Add(-24 * time.Hour).UTC()
		// 2,000 VMs of the history, half of them on gpu01, each with its
		// create finished a day ago.
		seed := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
INSERT INTO vms (id, name, owner, profile, state, host, created_at, updated_at)
SELECT 'vm' || i, 'old' || i, 'ann', 'p', 'deleted', CASE WHEN i % 2 = 0 THEN 'gpu01' ELSE 'gpu02' END, ?, ? FROM n`
		if err := s.db.Exec(seed, old, old).Error; err != nil {
			t.Fatal(err)
		}
		seed = `INSERT INTO operations (id, vm_id, kind, state, created_at, updated_at, finished_at)
SELECT 'op' || id, id, 'create', 'done', ?, ?, ? FROM vms WHERE id LIKE 'vm%'`
		if err := s.db.Exec(seed, old, old, old).Error; err != nil {
			t.Fatal(err)
		}
		// One create finished now, on gpu01.
		vm := mustVM(t, s, "ann", "new")
		now := d.clock.Now().UTC()
		if err := s.db.Model(&VM{}).Where("id = ?", vm.ID).Updates(map[string]any{"state": VMRunning, "host": "gpu01"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.db.Model(&Operation{}).Where("vm_id = ?", vm.ID).Updates(map[string]any{"state": OpDone, "finished_at": now}).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.db.Exec("ANALYZE").Error; err != nil {
			t.Fatal(err)
		}
		cursor := now.Add(-time.Minute)
		got, err := s.ListFinishedCreates(ctx, "gpu01", cursor)
		if err != nil || len(got) != 1 || got[0].VMID != vm.ID {
			t.Fatalf("creates finished on gpu01 since a minute: %+v, %v", got, err)
		}
		for _, host := range []string{"gpu01", ""} {
			plan := explain(t, s, func(tx *gorm.DB) *gorm.DB {
				return finishedCreatesQuery(tx, host, cursor).Find(&[]Operation{})
			})
			if !strings.Contains(plan, "operations_creates_done") {
				t.Errorf("host %q: the finished creates are not read through operations_creates_done:\n%s", host, plan)
			}
		}
	})
}

// explain is the query plan of the statement q builds, as the driver
// prints it.
func explain(t *testing.T, s *Store, q func(tx *gorm.DB) *gorm.DB) string {
	t.Helper()
	stmt := q(s.db.Session(&gorm.Session{DryRun: true})).Statement
	prefix := "EXPLAIN "
	if s.driver == DriverSQLite {
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := s.db.Raw(prefix+stmt.SQL.String(), stmt.Vars...).Rows()
	if err != nil {
		t.Fatalf("explain %s: %v", stmt.SQL.String(), err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(vals[len(vals)-1]))
	}
	return strings.Join(lines, "\n")
}

// The leader's rules pass (every 30 s) and its rounds read the preemptions
// under way from the vm.warning events of the last day: that read must go
// through an index on the type, not read every event of the day (each VM
// made, queued, started… writes some; the scale harness on a fleet showed
// the rules pass reading all of them each time).
func TestEventsOfATypeReadOnlyThose(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		at := d.clock.Now().UTC()
		seed := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
INSERT INTO events (created_at, vm_id, owner, type, payload) SELECT ?, 'vm' || i, 'ann', 'vm.state', '{}' FROM n`
		if err := s.db.Exec(seed, at).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvent(ctx, &Event{VMID: "vm7", Owner: "ann", Type: "vm.warning", Payload: JSON(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Exec("ANALYZE").Error; err != nil {
			t.Fatal(err)
		}
		f := EventFilter{Type: "vm.warning", From: at.Add(-24 * time.Hour), Limit: 1000}
		got, err := s.ListEventsSince(ctx, 0, f)
		if err != nil || len(got) != 1 || got[0].VMID != "vm7" {
			t.Fatalf("vm.warning events: %+v, %v", got, err)
		}
		plan := explain(t, s, func(tx *gorm.DB) *gorm.DB { return eventsSinceQuery(tx, 0, f).Find(&[]Event{}) })
		if !strings.Contains(plan, "events_type") {
			t.Errorf("the events of one type are not read through events_type:\n%s", plan)
		}
	})
}
