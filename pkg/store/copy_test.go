package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// fillEveryTable writes at least one row into every table of gpuvm.
func fillEveryTable(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	mustUser(t, s, "ann", "render")
	mustUser(t, s, "bob")
	if _, err := s.RecordHomeHost(ctx, "ann", "gpu-01"); err != nil {
		t.Fatal(err)
	}
	_, tok, err := s.CreateToken(ctx, "ann", "laptop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateSession(ctx, "ann", NewSession{Kind: SessionCookie, Method: SignInToken, TokenID: tok.ID, Idle: time.Hour, NotAfter: s.Now().Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	vm := mustVM(t, s, "ann", "one")
	img := &Image{Name: "ubuntu", OS: "linux", Firmware: "uefi", Format: "qcow2", VirtualSize: 1 << 30, ActualSize: 1 << 20,
		SHA256: "ab", Pool: "gpuvm", Volume: "image-ubuntu-v1.qcow2", Path: "/p/image-ubuntu-v1.qcow2", Origin: ImageImported, CreatedBy: "admin"}
	if err := s.CreateImage(ctx, img, true); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordImageUse(ctx, vm.ID, img.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVM(ctx, &VM{Name: "two", Owner: "bob", Profile: "desktop", Hours: 1}, CreateVMOptions{RequestedBy: "bob",
		Credential: &VMCredential{Login: "bob", Password: "pw", PasswordHash: "$6$salt$hash"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{{Host: "gpu-01", GPUAddress: "0000:41:00.0", Backend: "mig", Kind: gpu.KindMIG,
		Profile: "3g.40gb", PlacementStart: 4, PlacementSize: 4}}); err != nil {
		t.Fatal(err)
	}
	start := s.Now().Add(time.Hour)
	if err := s.CreateReservation(ctx, &Reservation{OwnerKind: OwnerGroup, Owner: "render", Profile: "render-l40s", Count: 2,
		StartAt: start, EndAt: start.Add(2 * time.Hour), CreatedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsageRecord(ctx, &UsageRecord{VMID: vm.ID, User: "ann", Host: "gpu-01", GPUAddress: "0000:41:00.0", Kind: gpu.KindMIG,
		Profile: "3g.40gb", Share: 0.5, StartedAt: s.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIdempotencyKey(ctx, &IdempotencyKey{User: "ann", Key: "k1", RequestHash: "h", VMID: vm.ID}); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterHost(ctx, &Host{Name: "gpu-01", APIURL: "http://gpu-01:8080", Version: "1", Inventory: `{"gpus":[]}`}); err != nil {
		t.Fatal(err)
	}
	if err := s.DrainGPU(ctx, &GPUDrain{Host: "gpu-01", GPUAddress: "0000:42:00.0", Reason: "fan", DrainedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, &Snapshot{VMID: vm.ID, Owner: "ann", Label: "before the driver"}, "ann", SnapshotLimit{}); err != nil {
		t.Fatal(err)
	}
	disk := &Volume{Owner: "ann", Name: "scratch", SizeBytes: 1 << 30, Host: "gpu-01", Pool: "gpuvm"}
	if err := s.CreateVolume(ctx, disk, DiskQuota{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVolumeState(ctx, disk.ID, VolReady, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AttachVolume(ctx, disk.ID, vm.ID); err != nil {
		t.Fatal(err)
	}
	taskVM := &VM{Name: "task-1", Owner: "ann", Profile: "tiny", Spec: `{"task":"t-1"}`, Hours: 1}
	if _, err := s.CreateVM(ctx, taskVM, CreateVMOptions{Task: &Task{ID: "t-1", Owner: "ann", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60}}); err != nil {
		t.Fatal(err)
	}
	code := 3
	if err := s.RecordTaskAttempt(ctx, TaskAttempt{TaskID: "t-1", Attempt: 1, VMID: taskVM.ID, State: "failed", Reason: "exit 3", ExitCode: &code, EndedAt: s.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSamples(ctx, []GPUSample{{Host: "gpu-01", GPUAddress: "0000:41:00.0", VMID: vm.ID, User: "ann", TakenAt: s.Now(),
		GPUUtil: 0.5, MemUtil: -1, EncUtil: -1, DecUtil: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Create(&AuditEntry{CreatedAt: s.Now(), User: "ann", TokenID: 1, Source: "192.0.2.7", Action: "vm.create", Target: "vm/x", Outcome: AuditOK, Status: 202, RequestID: "r1"}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := s.FireAlert(ctx, &Alert{Rule: "hot", Subject: "gpu-01/0000:41:00.0", Host: "gpu-01", Metric: "gpu_temperature", Value: 91, StartedAt: s.Now()}); err != nil {
		t.Fatal(err)
	}
}

// dumpRows is a table's rows, read as its model and written out field by
// field (times in UTC), for comparing two databases.
func dumpRows[T any](t *testing.T, s *Store, table, order string) []string {
	t.Helper()
	var rows []T
	if err := s.db.Table(table).Order(order).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		v := reflect.ValueOf(r)
		var fields []string
		for i := range v.NumField() {
			f := v.Field(i)
			name := v.Type().Field(i).Name
			switch x := f.Interface().(type) {
			case time.Time:
				fields = append(fields, name+"="+x.UTC().Format(time.RFC3339Nano))
			case *time.Time:
				if x != nil {
					fields = append(fields, name+"="+x.UTC().Format(time.RFC3339Nano))
				}
			case *int64:
				if x != nil {
					fields = append(fields, fmt.Sprintf("%s=%d", name, *x))
				}
			case *int:
				if x != nil {
					fields = append(fields, fmt.Sprintf("%s=%d", name, *x))
				}
			case *string:
				if x != nil {
					fields = append(fields, name+"="+*x)
				}
			case JSON: // jsonb keeps its own key order
				var doc any
				if err := json.Unmarshal(x, &doc); err != nil {
					t.Fatalf("%s.%s: %v", table, name, err)
				}
				canon, _ := json.Marshal(doc)
				fields = append(fields, name+"="+string(canon))
			default:
				fields = append(fields, fmt.Sprintf("%s=%v", name, x))
			}
		}
		out = append(out, strings.Join(fields, " "))
	}
	return out
}

// Every row of every table of a SQLite database reaches PostgreSQL as it
// was, in one go; the target's generated IDs go on after the copied ones;
// a second copy into the same database is refused, as is a source with a
// table the copy does not know.
func TestCopyInto(t *testing.T) {
	src := newTestDB(t, DriverSQLite).open(t)
	dstDB := newTestDB(t, DriverPostgres)
	dst := dstDB.open(t)
	fillEveryTable(t, src)
	ctx := context.Background()
	counts, err := src.CopyInto(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != len(copiers) {
		t.Fatalf("copied %d tables, gpuvm has %d", len(counts), len(copiers))
	}
	for _, c := range counts {
		if c.Rows == 0 {
			t.Errorf("table %s: no row copied (the test fills every table)", c.Table)
		}
	}
	dumps := map[string]func(*Store) []string{
		"users":            func(s *Store) []string { return dumpRows[User](t, s, "users", "id") },
		"groups":           func(s *Store) []string { return dumpRows[Group](t, s, "groups", "id") },
		"group_members":    func(s *Store) []string { return dumpRows[GroupMember](t, s, "group_members", "group_id, user_id") },
		"api_tokens":       func(s *Store) []string { return dumpRows[APIToken](t, s, "api_tokens", "id") },
		"vms":              func(s *Store) []string { return dumpRows[VM](t, s, "vms", "id") },
		"operations":       func(s *Store) []string { return dumpRows[Operation](t, s, "operations", "id") },
		"allocations":      func(s *Store) []string { return dumpRows[Allocation](t, s, "allocations", "id") },
		"allocation_slots": func(s *Store) []string { return dumpRows[AllocationSlot](t, s, "allocation_slots", "slot_key") },
		"gpu_modes":        func(s *Store) []string { return dumpRows[GPUMode](t, s, "gpu_modes", "gpu_address") },
		"reservations":     func(s *Store) []string { return dumpRows[Reservation](t, s, "reservations", "id") },
		"usage_records":    func(s *Store) []string { return dumpRows[UsageRecord](t, s, "usage_records", "id") },
		"events":           func(s *Store) []string { return dumpRows[Event](t, s, "events", "id") },
		"idempotency_keys": func(s *Store) []string { return dumpRows[IdempotencyKey](t, s, "idempotency_keys", "idempotency_key") },
		"hosts":            func(s *Store) []string { return dumpRows[Host](t, s, "hosts", "name") },
		"gpu_drains":       func(s *Store) []string { return dumpRows[GPUDrain](t, s, "gpu_drains", "gpu_address") },
		"console_tickets":  func(s *Store) []string { return dumpRows[ConsoleTicket](t, s, "console_tickets", "id") },
		"gpu_samples":      func(s *Store) []string { return dumpRows[GPUSample](t, s, "gpu_samples", "id") },
		"alerts":           func(s *Store) []string { return dumpRows[Alert](t, s, "alerts", "id") },
		"audit_log":        func(s *Store) []string { return dumpRows[AuditEntry](t, s, "audit_log", "id") },
		"vm_credentials":   func(s *Store) []string { return dumpRows[VMCredential](t, s, "vm_credentials", "vm_id") },
		"sessions":         func(s *Store) []string { return dumpRows[Session](t, s, "sessions", "id") },
		"images":           func(s *Store) []string { return dumpRows[Image](t, s, "images", "id") },
		"image_uses":       func(s *Store) []string { return dumpRows[ImageUse](t, s, "image_uses", "vm_id") },
		"vm_snapshots":     func(s *Store) []string { return dumpRows[Snapshot](t, s, "vm_snapshots", "id") },
		"volumes":          func(s *Store) []string { return dumpRows[Volume](t, s, "volumes", "id") },
		"tasks":            func(s *Store) []string { return dumpRows[Task](t, s, "tasks", "id") },
		"task_attempts":    func(s *Store) []string { return dumpRows[TaskAttempt](t, s, "task_attempts", "task_id, attempt") },
	}
	for _, c := range copiers {
		dump := dumps[c.table]
		if dump == nil {
			t.Errorf("the test does not compare table %s", c.table)
			continue
		}
		a, b := dump(src), dump(dst)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("table %s differs:\nsqlite:   %q\npostgres: %q", c.table, a, b)
		}
	}
	// The copy is the same installation.
	si, err := src.Installation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	di, err := dst.Installation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.ID != di.ID || !si.CreatedAt.Equal(di.CreatedAt) {
		t.Errorf("installation: source %+v, copy %+v", si, di)
	}
	// New rows get IDs after the copied ones.
	u := mustUser(t, dst, "cid")
	if u.ID <= 2 {
		t.Errorf("a new user got id %d, which the copied users hold", u.ID)
	}
	// A new event too, and a watcher of the copy reads it (the sequence
	// the claims and the horizon read is the one the copy moved on).
	copied, err := dst.LastEventID(ctx)
	if err != nil || copied == 0 {
		t.Fatalf("the copy's last event: %d, %v", copied, err)
	}
	if err := dst.AppendEvent(ctx, &Event{Type: "after.copy"}); err != nil {
		t.Fatal(err)
	}
	if es, err := dst.ListEventsSince(ctx, copied, EventFilter{}); err != nil || len(es) != 1 || es[0].Type != "after.copy" {
		t.Errorf("events after the copied ones: %+v, %v; want the one appended", es, err)
	}
	if _, _, err := dst.AuthenticateToken(ctx, "wrong"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("authenticate on the copy: %v", err)
	}

	// Twice: refused, nothing written.
	before := count(t, dst, "vms")
	_, err = src.CopyInto(ctx, dst)
	if !errors.Is(err, ErrTargetNotEmpty) || !strings.Contains(err.Error(), "in users") {
		t.Errorf("second copy: %v", err)
	}
	if count(t, dst, "vms") != before {
		t.Error("the refused copy wrote rows")
	}

	// A source with a table this gpuvmd does not know.
	if err := src.db.Exec("CREATE TABLE quotas_v9 (id INTEGER PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	empty := newTestDB(t, DriverPostgres).open(t)
	if _, err := src.CopyInto(ctx, empty); err == nil || !strings.Contains(err.Error(), "quotas_v9") {
		t.Errorf("unknown source table: %v", err)
	}
	if count(t, empty, "users") != 0 {
		t.Error("a refused copy wrote rows")
	}
}

// A copy that fails half-way leaves the target as it was.
func TestCopyIntoAllOrNothing(t *testing.T) {
	src := newTestDB(t, DriverSQLite).open(t)
	dst := newTestDB(t, DriverPostgres).open(t)
	fillEveryTable(t, src)
	// A row PostgreSQL refuses (a NUL byte in text) in the last table.
	if err := src.db.Exec("UPDATE alerts SET summary = 'bad' || char(0) || 'byte'").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := src.CopyInto(context.Background(), dst); err == nil || !strings.Contains(err.Error(), "alerts") {
		t.Fatalf("copy of a bad row: %v", err)
	}
	for _, c := range copiers {
		if n := count(t, dst, c.table); n != 0 {
			t.Errorf("table %s holds %d rows after a failed copy", c.table, n)
		}
	}
}
