package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// CreateVMOptions are the optional parts of CreateVM.
type CreateVMOptions struct {
	// RequestedBy is who asked (the owner, or an admin for them).
	RequestedBy string
	// IdempotencyKey, when set, is stored in the same transaction with the
	// new VM's and operation's IDs; a key the user already used is
	// ErrIdempotencyKeyUsed and nothing is written.
	IdempotencyKey *IdempotencyKey
	// Credential, when set, is the VM's one-time desktop password, stored
	// in the same transaction (its VMID and CreatedAt are filled).
	Credential *VMCredential
	// Volumes are data disks (IDs) attached to the new VM in the same
	// transaction (AttachVolume): one not ready or attached elsewhere
	// writes nothing.
	Volumes []string
	// Audit, when set, is the audit entry of the request that makes the
	// VM (audit.go), stored in the same transaction (its VMID and, when
	// zero, CreatedAt are filled): one write of the single writer instead
	// of two for each create (issue #26).
	Audit *AuditEntry
	// Task, when set, is the task the VM serves (tasks.go), stored in the
	// same transaction with the VM's ID (its ID must be set, its times and
	// state are filled).
	Task *Task
	// Launch, when set instead, is a task made before that the VM serves
	// (taskarrays.go); LaunchReason its reason then.
	Launch       *TaskLaunch
	LaunchReason string
}

// CreateVM writes a new VM and its create operation (pending) in one
// transaction, with a vm.created event: the intent, before anything is made.
// The store fills ID (a time-ordered UUID) when empty, State (queued) when
// empty, Version, CreatedAt and UpdatedAt. A live VM of the owner with the
// same name is ErrNameTaken; an unknown owner is ErrNotFound.
func (s *Store) CreateVM(ctx context.Context, vm *VM, opts CreateVMOptions) (*Operation, error) {
	if vm.Name == "" || vm.Owner == "" || vm.Profile == "" {
		return nil, fmt.Errorf("create vm: %w: name, owner and profile are required", ErrInvalid)
	}
	if vm.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("create vm: %w", err)
		}
		vm.ID = id.String()
	}
	if vm.State == "" {
		vm.State = VMQueued
	}
	// Only inserts, unless data disks or a task come with it: one round
	// trip (pipeline.go).
	run := s.pipelined
	if len(opts.Volumes) > 0 || opts.Task != nil || opts.Launch != nil {
		run = s.Tx
	}
	var op *Operation
	err := run(ctx, func(tx *Store) error {
		if vm.State != VMQueued {
			tx.touchQuota() // not what a queue of creates writes
		}
		now := tx.clock()
		vm.CreatedAt, vm.UpdatedAt, vm.Version = now, now, 1
		vm.LeaseEnd = utcPtr(vm.LeaseEnd)
		name := vm.Name
		if err := tx.insert(vm, func(err error) error {
			return wrap(err, ErrNameTaken, "insert vm %q of %q", name, vm.Owner)
		}); err != nil {
			return err
		}
		op = &Operation{VMID: vm.ID, Kind: OpCreate, RequestedBy: opts.RequestedBy}
		if err := tx.createOperation(op); err != nil {
			return err
		}
		if cr := opts.Credential; cr != nil {
			cr.VMID, cr.CreatedAt, cr.ReadAt, cr.ReadBy = vm.ID, now, nil, ""
			if err := tx.insert(cr, func(err error) error {
				return wrap(err, nil, "insert the credential of vm %q", name)
			}); err != nil {
				return err
			}
		}
		for _, id := range opts.Volumes {
			if _, err := tx.AttachVolume(ctx, id, vm.ID); err != nil {
				return err
			}
		}
		if t := opts.Task; t != nil {
			if err := tx.insertTask(t, vm.ID); err != nil {
				return err
			}
		}
		if l := opts.Launch; l != nil {
			if err := tx.launchTask(l, vm.ID, opts.LaunchReason); err != nil {
				return err
			}
		}
		if k := opts.IdempotencyKey; k != nil {
			k.VMID, k.OperationID = vm.ID, op.ID
			if err := tx.putIdempotencyKey(k); err != nil {
				return err
			}
		}
		if a := opts.Audit; a != nil {
			a.VMID = vm.ID
			if err := tx.AppendAudit(ctx, a); err != nil {
				return err
			}
		}
		return tx.appendEvent(ctx, &Event{VMID: vm.ID, Owner: vm.Owner, Type: "vm.created",
			Payload: mustJSON(map[string]any{"name": vm.Name, "profile": vm.Profile, "state": vm.State, "operation_id": op.ID})})
	})
	if err != nil {
		return nil, wrap(err, nil, "create vm")
	}
	return op, nil
}

// GetVM finds a VM by ID (deleted ones too), with its queue position.
func (s *Store) GetVM(ctx context.Context, id string) (*VM, error) {
	var vm VM
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&vm).Error
	if err != nil {
		return nil, wrap(err, nil, "get vm %s", id)
	}
	if err := s.fillQueuePositions(ctx, &vm); err != nil {
		return nil, err
	}
	return &vm, nil
}

// GetVMByName finds the live (not deleted) VM of an owner by name, with
// its queue position.
func (s *Store) GetVMByName(ctx context.Context, owner, name string) (*VM, error) {
	var vm VM
	err := s.db.WithContext(ctx).Where("owner = ? AND name = ? AND "+liveVM, owner, name).Take(&vm).Error
	if err != nil {
		return nil, wrap(err, nil, "get vm %q of %q", name, owner)
	}
	if err := s.fillQueuePositions(ctx, &vm); err != nil {
		return nil, err
	}
	return &vm, nil
}

// VMFilter selects the VMs ListVMs returns.
type VMFilter struct {
	Owner  string   // "": every owner
	States []string // none: every state but deleted
	Host   string   // "": every host
	// After is the Next of the previous page; "": from the start.
	After string
	// Limit is the page size: 0 means 50, more than 1000 means 1000.
	Limit int
}

// VMPage is one page of VMs, oldest first.
type VMPage struct {
	VMs []VM
	// Next is the cursor of the next page; "" on the last page.
	Next string
}

// VMLister lists VMs a page at a time (a *Store).
type VMLister interface {
	ListVMs(ctx context.Context, f VMFilter) (VMPage, error)
}

// maxVMsPage is the most VMs ListVMs gives in a page.
const maxVMsPage = 1000

// AllVMs is every VM f selects, oldest first, read a page at a time (of
// f.Limit VMs; 0: 1000) from f.After on: the one paging loop of the
// callers that need them all.
func AllVMs(ctx context.Context, st VMLister, f VMFilter) ([]VM, error) {
	f.Limit = queryLimit(f.Limit, maxVMsPage, maxVMsPage)
	var out []VM
	for {
		page, err := st.ListVMs(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, page.VMs...)
		if page.Next == "" || page.Next == f.After {
			return out, nil
		}
		f.After = page.Next
	}
}

// ListVMs lists VMs oldest first, by keyset pagination on (created_at, id):
// a page never skips or repeats a VM, whatever is inserted meanwhile. It asks
// for one row more than the page to know whether there is a next page. The
// queued VMs come with their queue position.
func (s *Store) ListVMs(ctx context.Context, f VMFilter) (VMPage, error) {
	limit := queryLimit(f.Limit, 50, maxVMsPage)
	q := s.db.WithContext(ctx).Model(&VM{})
	if f.Owner != "" {
		q = q.Where("owner = ?", f.Owner)
	}
	if f.Host != "" {
		q = q.Where("host = ?", f.Host)
	}
	switch len(f.States) {
	case 0:
		q = q.Where(liveVM)
	case 1:
		q = q.Where("state = ?", f.States[0])
	default:
		q = q.Where("state IN ?", f.States)
	}
	if f.After != "" {
		c, err := decodeCursor(f.After)
		if err != nil {
			return VMPage{}, fmt.Errorf("list vms: %w", err)
		}
		// A row value, which both SQLite and PostgreSQL turn into a range
		// scan of the (…, created_at, id) index; the equivalent OR form
		// makes both scan from the start of the index.
		q = q.Where("(created_at, id) > (?, ?)", c.CreatedAt, c.ID)
	}
	// Scanned without gorm's reflection (scanVM, as GetVMs): the admin's
	// queue page of 1,000, 9.2 → 8.0 ms (BenchmarkQueuePage, issue #26).
	vms, err := scanRowsSized(q.Select(vmColumns).Order("created_at, id").Limit(limit+1), limit+1, scanVM)
	if err != nil {
		return VMPage{}, wrap(err, nil, "list vms")
	}
	page := VMPage{VMs: vms}
	if len(vms) > limit {
		page.VMs = vms[:limit]
		last := vms[limit-1]
		page.Next = encodeCursor(cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	ptrs := make([]*VM, len(page.VMs))
	for i := range page.VMs {
		ptrs[i] = &page.VMs[i]
	}
	if err := s.fillQueuePositions(ctx, ptrs...); err != nil {
		return VMPage{}, err
	}
	return page, nil
}

type cursor struct {
	CreatedAt time.Time
	ID        string
}

// Cursors are opaque to clients: base64url of "<unix microseconds>.<id>".
func encodeCursor(c cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID))
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, fmt.Errorf("%w: bad cursor", ErrInvalid)
	}
	us, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" {
		return cursor{}, fmt.Errorf("%w: bad cursor", ErrInvalid)
	}
	return cursor{CreatedAt: time.UnixMicro(n).UTC(), ID: id}, nil
}

// VMUpdate is a change of a VM's state. State, Phase and StateReason are
// written as they are; nil pointers leave their columns alone.
type VMUpdate struct {
	State       string
	Phase       string
	StateReason string
	Host        *string
	// LeaseEnd, when set, is the VM's new lease end; it clears
	// LeaseWarnedAt, which was about the end before.
	LeaseEnd *time.Time
	Spec     *string
	// Hours, when set, is the VM's new total lease in hours (extend).
	Hours *int
	// Profile, when set, is the VM's new profile (a resize of a stopped
	// VM, the orchestrator's resize.go).
	Profile *string
}

// UpdateVMState changes a VM's state if it is still at version (optimistic
// concurrency), bumps the version and appends a vm.state event, in one
// transaction. It returns the VM as written. A VM changed since it was read is
// ErrConflict; a missing one ErrNotFound.
func (s *Store) UpdateVMState(ctx context.Context, id string, version int64, u VMUpdate) (*VM, error) {
	if u.State == "" {
		return nil, fmt.Errorf("update vm %s: %w: empty state", id, ErrInvalid)
	}
	var vm VM
	err := s.Tx(ctx, func(tx *Store) error {
		tx.touchQuota()
		set := map[string]any{
			"state":        u.State,
			"phase":        u.Phase,
			"state_reason": u.StateReason,
			"version":      gorm.Expr("version + 1"),
			"updated_at":   tx.clock(),
		}
		if u.Host != nil {
			set["host"] = *u.Host
		}
		if u.LeaseEnd != nil {
			set["lease_end"] = *utcPtr(u.LeaseEnd)
			set["lease_warned_at"] = nil
		}
		if u.Spec != nil {
			set["spec"] = *u.Spec
		}
		if u.Hours != nil {
			set["hours"] = *u.Hours
		}
		if u.Profile != nil {
			if *u.Profile == "" {
				return fmt.Errorf("update vm %s: %w: empty profile", id, ErrInvalid)
			}
			set["profile"] = *u.Profile
		}
		res := tx.db.Model(&VM{}).Where("id = ? AND version = ?", id, version).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var cur VM
			if err := tx.db.Select("id", "version").Where("id = ?", id).Take(&cur).Error; err != nil {
				return err
			}
			return fmt.Errorf("%w: vm is at version %d, not %d", ErrConflict, cur.Version, version)
		}
		if err := tx.db.Where("id = ?", id).Take(&vm).Error; err != nil {
			return err
		}
		if u.State == VMDeleted {
			// A desktop password nobody read dies with its VM.
			if err := tx.forgetCredential(id); err != nil {
				return err
			}
			// Its data disks stay, detached (volumes.go).
			if err := tx.db.Model(&Volume{}).Where("attached_vm = ?", id).
				Updates(map[string]any{"attached_vm": nil, "attached_at": nil, "updated_at": tx.clock()}).Error; err != nil {
				return err
			}
		}
		return tx.appendEvent(ctx, &Event{VMID: vm.ID, Owner: vm.Owner, Type: "vm.state",
			Payload: mustJSON(map[string]any{"state": vm.State, "phase": vm.Phase, "reason": vm.StateReason, "version": vm.Version})})
	})
	if err != nil {
		return nil, wrap(err, nil, "update vm %s to %s", id, u.State)
	}
	return &vm, nil
}

// WarnLease records that the owner of a VM was warned that its lease ends
// at leaseEnd, and appends the warning's event, in one transaction. It
// neither bumps the VM's version nor its updated_at: a warning is not a
// change of the VM. It reports false, writing nothing, when the VM was
// warned already or its lease no longer ends at leaseEnd (it was extended
// meanwhile).
func (s *Store) WarnLease(ctx context.Context, id string, leaseEnd time.Time, e *Event) (bool, error) {
	warned := false
	err := s.Tx(ctx, func(tx *Store) error {
		res := tx.db.Model(&VM{}).Where("id = ? AND lease_end = ? AND lease_warned_at IS NULL", id, leaseEnd.UTC().Truncate(time.Microsecond)).
			UpdateColumn("lease_warned_at", tx.clock())
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		warned = true
		return tx.appendEvent(ctx, e)
	})
	if err != nil {
		return false, wrap(err, nil, "warn vm %s of its lease end", id)
	}
	return warned, nil
}

// CreateOperation adds a pending operation to a VM (delete, start, stop...).
func (s *Store) CreateOperation(ctx context.Context, op *Operation) error {
	err := s.Tx(ctx, func(tx *Store) error { return tx.createOperation(op) })
	return wrap(err, nil, "create %s operation of vm %s", op.Kind, op.VMID)
}

func (s *Store) createOperation(op *Operation) error {
	if op.VMID == "" || op.Kind == "" {
		return fmt.Errorf("%w: operation needs a vm and a kind", ErrInvalid)
	}
	if op.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		op.ID = id.String()
	}
	now := s.clock()
	op.State, op.CreatedAt, op.UpdatedAt = OpPending, now, now
	op.StartedAt, op.FinishedAt, op.Step, op.Error = nil, nil, "", ""
	return s.insert(op, nil)
}

// GetOperation finds an operation by ID.
func (s *Store) GetOperation(ctx context.Context, id string) (*Operation, error) {
	var op Operation
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&op).Error; err != nil {
		return nil, wrap(err, nil, "get operation %s", id)
	}
	return &op, nil
}

// ListOperations lists the operations of a VM, oldest first.
func (s *Store) ListOperations(ctx context.Context, vmID string) ([]Operation, error) {
	var ops []Operation
	err := s.db.WithContext(ctx).Where("vm_id = ?", vmID).Order("created_at, id").Find(&ops).Error
	return ops, wrap(err, nil, "list operations of vm %s", vmID)
}

// ListUnfinishedOperations lists pending and running operations, oldest
// first: what the worker resumes after a restart.
func (s *Store) ListUnfinishedOperations(ctx context.Context) ([]Operation, error) {
	ops, err := scanAll(ctx, s, scanOp, "SELECT "+opColumns+" FROM operations WHERE "+unfinishedOp+" ORDER BY created_at, id")
	return ops, wrap(err, nil, "list unfinished operations")
}

// SetOperationStep records the step an operation is at, moving a pending
// operation to running. A finished operation is ErrConflict.
func (s *Store) SetOperationStep(ctx context.Context, id, step string) error {
	err := s.Tx(ctx, func(tx *Store) error {
		now := tx.clock()
		res := tx.db.Model(&Operation{}).Where("id = ? AND "+unfinishedOp, id).
			Updates(map[string]any{
				"step":       step,
				"state":      OpRunning,
				"updated_at": now,
				"started_at": gorm.Expr("COALESCE(started_at, ?)", now),
			})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return tx.operationConflict(id)
		}
		return nil
	})
	return wrap(err, nil, "set step %q of operation %s", step, id)
}

// FinishOperation ends an operation: done when opErr is nil, failed with its
// text otherwise. A finished operation is ErrConflict.
func (s *Store) FinishOperation(ctx context.Context, id string, opErr error) error {
	state, msg := OpDone, ""
	if opErr != nil {
		state, msg = OpFailed, opErr.Error()
	}
	err := s.Tx(ctx, func(tx *Store) error {
		now := tx.clock()
		res := tx.db.Model(&Operation{}).Where("id = ? AND "+unfinishedOp, id).
			Updates(map[string]any{
				"state":       state,
				"error":       msg,
				"updated_at":  now,
				"finished_at": now,
				"started_at":  gorm.Expr("COALESCE(started_at, ?)", now),
			})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return tx.operationConflict(id)
		}
		return nil
	})
	return wrap(err, nil, "finish operation %s", id)
}

func (s *Store) operationConflict(id string) error {
	var op Operation
	if err := s.db.Select("id", "state").Where("id = ?", id).Take(&op).Error; err != nil {
		return err
	}
	return fmt.Errorf("%w: operation is %s", ErrConflict, op.State)
}

func mustJSON(v any) JSON {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of plain values are passed
	}
	return b
}

// AdoptedDevice is a GPU device an adopted VM already holds: the slots it
// occupies, and the device and hostdev (JSON) its backend reported.
type AdoptedDevice struct {
	Claim             SlotClaim
	DeviceID, Hostdev string
}

// AdoptVM writes a VM an admin adopted from an orphaned domain (its row was
// lost): the row as given (ID, state and host set by the caller), each
// device's allocation claimed and recorded created, and a vm.created event
// that says it was adopted, all in one transaction. A live VM of the owner
// with the same name is ErrNameTaken, an ID in use ErrConflict, a slot held
// by another VM ErrSlotTaken; nothing is written then.
func (s *Store) AdoptVM(ctx context.Context, vm *VM, devices []AdoptedDevice, adoptedBy string) error {
	if vm.ID == "" || vm.Name == "" || vm.Owner == "" || vm.Profile == "" || vm.State == "" {
		return fmt.Errorf("adopt vm: %w: id, name, owner, profile and state are required", ErrInvalid)
	}
	err := s.Tx(ctx, func(tx *Store) error {
		if _, err := tx.GetVM(ctx, vm.ID); err == nil {
			return fmt.Errorf("%w: vm %s exists", ErrConflict, vm.ID)
		}
		tx.touchQuota()
		now := tx.clock()
		vm.CreatedAt, vm.UpdatedAt, vm.Version = now, now, 1
		vm.LeaseEnd = utcPtr(vm.LeaseEnd)
		name := vm.Name
		if err := tx.insert(vm, func(err error) error {
			return wrap(err, ErrNameTaken, "insert vm %q of %q", name, vm.Owner)
		}); err != nil {
			return err
		}
		for _, d := range devices {
			allocs, err := tx.ClaimAllocation(ctx, vm.ID, []SlotClaim{d.Claim})
			if err != nil {
				return err
			}
			if err := tx.MarkAllocationCreated(ctx, allocs[0].ID, d.DeviceID, d.Hostdev); err != nil {
				return err
			}
		}
		return tx.appendEvent(ctx, &Event{VMID: vm.ID, Owner: vm.Owner, Type: "vm.created",
			Payload: mustJSON(map[string]any{"name": vm.Name, "profile": vm.Profile, "state": vm.State, "adopted_by": adoptedBy, "devices": len(devices)})})
	})
	if err != nil {
		return wrap(err, nil, "adopt vm %s", vm.ID)
	}
	return nil
}

// VMRef is what the reconciler needs of every VM: which it is, its state,
// its host and whether it has run.
type VMRef struct {
	ID       string     `gorm:"column:id"`
	State    string     `gorm:"column:state"`
	Host     string     `gorm:"column:host"`
	LeaseEnd *time.Time `gorm:"column:lease_end"`
}

// ListVMRefs lists every VM that is not deleted, by those four columns
// only: a reconciliation reads the whole table (every VM's volumes are
// kept), and with ten thousand queued the full rows, decoded with their
// queue positions, were most of an idle gpuvmd's work (issue #26).
func (s *Store) ListVMRefs(ctx context.Context) ([]VMRef, error) {
	var out []VMRef
	if err := s.db.WithContext(ctx).Model(&VM{}).Select("id", "state", "host", "lease_end").Where(liveVM).Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list vms")
	}
	return out, nil
}
