package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// statementLog keeps the SQL of every statement the store logs, and the
// level of each.
type statementLog struct {
	mu     sync.Mutex
	sqls   []string
	levels []slog.Level
}

func (l *statementLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *statementLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *statementLog) WithGroup(string) slog.Handler            { return l }
func (l *statementLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "sql" {
			l.mu.Lock()
			l.sqls = append(l.sqls, a.Value.String())
			l.levels = append(l.levels, r.Level)
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *statementLog) take() ([]string, []slog.Level) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sqls, levels := l.sqls, l.levels
	l.sqls, l.levels = nil, nil
	return sqls, levels
}

// On PostgreSQL a create — the VM, its operation, its credential, its
// idempotency key, its audit entry and its event — is one round trip: one
// batch the store sends, not a statement each; what the database returns
// (the audit entry's and the event's IDs) is filled all the same.
func TestCreateVMIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverPostgres)
	stmts := &statementLog{}
	d.log = slog.New(stmts)
	s := d.open(t)
	mustUser(t, s, "alice")
	stmts.take()

	vm := &VM{Name: "a", Owner: "alice", Profile: "p", Spec: `{}`}
	audit := &AuditEntry{User: "alice", Action: "vm.create", Outcome: AuditOK}
	op, err := s.CreateVM(ctx, vm, CreateVMOptions{
		RequestedBy:    "alice",
		Credential:     &VMCredential{Login: "alice", Password: "pw", PasswordHash: "h"},
		IdempotencyKey: &IdempotencyKey{User: "alice", Key: "k", RequestHash: "h"},
		Audit:          audit,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := stmts.take()
	if len(got) != 1 || !strings.HasPrefix(got[0], "pipelined: ") || strings.Count(got[0], "INSERT INTO") != 6 {
		t.Fatalf("a create ran %d statements: %q", len(got), got)
	}
	if audit.ID == 0 || audit.VMID != vm.ID {
		t.Fatalf("audit entry %+v", audit)
	}
	es, err := s.ListEventsSince(ctx, 0, EventFilter{VMID: vm.ID})
	if err != nil || len(es) != 1 || es[0].ID == 0 {
		t.Fatalf("events %+v, %v", es, err)
	}
	k, err := s.GetIdempotencyKey(ctx, "alice", "k")
	if err != nil || k.OperationID != op.ID {
		t.Fatalf("key %+v, %v", k, err)
	}
	if n := count(t, s, "vm_credentials", "vm_id = ?", vm.ID); n != 1 {
		t.Fatalf("%d credentials", n)
	}
	if n := count(t, s, "audit_log", "id = ? AND vm_id = ?", audit.ID, vm.ID); n != 1 {
		t.Fatalf("audit entry %d not written", audit.ID)
	}

	// A refused create is logged as expected (debug), not as a failure.
	stmts.take()
	_, err = s.CreateVM(ctx, &VM{Name: "a", Owner: "alice", Profile: "p"}, CreateVMOptions{})
	if !errors.Is(err, ErrNameTaken) {
		t.Fatalf("same name again: %v", err)
	}
	got, levels := stmts.take()
	if len(got) != 1 || levels[0] != slog.LevelDebug {
		t.Fatalf("a refused create logged %q at %v", got, levels)
	}
}

// A pipelined transaction only inserts: a read or an update inside it would
// run outside it, and is refused; nothing it queued is written.
func TestPipelinedRefusesOtherStatements(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverPostgres).open(t)
	mustUser(t, s, "alice")
	vm := mustVM(t, s, "alice", "a")
	events := count(t, s, "events")
	err := s.pipelined(ctx, func(tx *Store) error {
		if err := tx.appendEvent(ctx, &Event{VMID: vm.ID, Owner: "alice", Type: "test"}); err != nil {
			return err
		}
		_, err := tx.GetVM(ctx, vm.ID)
		return err
	})
	if !errors.Is(err, errPipelined) {
		t.Fatalf("a read in a pipelined transaction: %v", err)
	}
	if n := count(t, s, "events"); n != events {
		t.Fatalf("%d events, want %d", n, events)
	}
}
