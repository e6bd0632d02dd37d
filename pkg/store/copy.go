package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// Copying a database into another is how a single server moves from SQLite
// to PostgreSQL (gpuvmd migrate-db): every row of every table, as it is,
// in one transaction on the target.

// ErrTargetNotEmpty: the database to copy into already holds gpuvm data.
var ErrTargetNotEmpty = errors.New("the target database already holds gpuvm data")

// copyLock serialises copies into one PostgreSQL database ("gpcp").
const copyLock = 0x6770_6370

// tableCopier copies one table.
type tableCopier struct {
	table string
	order string // the primary key, to page by
	copy  func(ctx context.Context, src, dst *gorm.DB, order string) (int64, error)
}

// copyBatch is how many rows are read and written at a time.
const copyBatch = 500

func copierOf[T any](table, order string) tableCopier {
	return tableCopier{table: table, order: order, copy: func(ctx context.Context, src, dst *gorm.DB, order string) (int64, error) {
		var n int64
		for {
			var rows []T
			if err := src.WithContext(ctx).Table(table).Order(order).Limit(copyBatch).Offset(int(n)).Find(&rows).Error; err != nil {
				return n, fmt.Errorf("read %s: %w", table, err)
			}
			if len(rows) == 0 {
				return n, nil
			}
			if err := dst.WithContext(ctx).Table(table).Create(&rows).Error; err != nil {
				return n, fmt.Errorf("write %s (rows %d to %d): %w", table, n+1, n+int64(len(rows)), err)
			}
			n += int64(len(rows))
		}
	}}
}

// copiers are gpuvm's tables in an order that puts every referenced row
// before the rows that refer to it.
var copiers = []tableCopier{
	copierOf[User]("users", "id"),
	copierOf[Group]("groups", "id"),
	copierOf[GroupMember]("group_members", "group_id, user_id"),
	copierOf[APIToken]("api_tokens", "id"),
	copierOf[VM]("vms", "id"),
	copierOf[Operation]("operations", "id"),
	copierOf[Allocation]("allocations", "id"),
	copierOf[AllocationSlot]("allocation_slots", "host, gpu_address, slot_key"),
	copierOf[GPUMode]("gpu_modes", "host, gpu_address"),
	copierOf[Reservation]("reservations", "id"),
	copierOf[UsageRecord]("usage_records", "id"),
	copierOf[Event]("events", "id"),
	copierOf[IdempotencyKey]("idempotency_keys", "user_name, idempotency_key"),
	copierOf[Host]("hosts", "name"),
	copierOf[GPUDrain]("gpu_drains", "host, gpu_address"),
	copierOf[ConsoleTicket]("console_tickets", "id"),
	copierOf[GPUSample]("gpu_samples", "id"),
	copierOf[Alert]("alerts", "id"),
	copierOf[AuditEntry]("audit_log", "id"),
	copierOf[VMCredential]("vm_credentials", "vm_id"),
	copierOf[Session]("sessions", "id"),
	copierOf[Image]("images", "id"),
	copierOf[ImageUse]("image_uses", "vm_id"),
	copierOf[Snapshot]("vm_snapshots", "id"),
	copierOf[Volume]("volumes", "id"),
	copierOf[Task]("tasks", "id"),
	copierOf[TaskAttempt]("task_attempts", "task_id, attempt"),
}

// identityTables have a generated id whose sequence must go on after the
// copied rows.
var identityTables = []string{"users", "groups", "api_tokens", "allocations", "reservations", "usage_records", "events", "gpu_samples", "alerts", "audit_log", "images"}

// TableCount is how many rows a table had.
type TableCount struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
}

// CopyInto copies every row of every gpuvm table of s into dst, in one
// transaction on dst: all of it or, on any error, nothing. s is read in
// one transaction too (on SQLite it holds the write lock, so a gpuvmd
// still running on it waits rather than changing it under the copy). It
// refuses a dst that holds any gpuvm row (ErrTargetNotEmpty: copying twice
// would double or mix the data), and a source with a table it does not
// know. Both stores must be open (at this binary's schema version). It
// returns the rows copied, by table.
func (s *Store) CopyInto(ctx context.Context, dst *Store) ([]TableCount, error) {
	if s.inTx || dst.inTx {
		return nil, errors.New("copy database: inside a transaction")
	}
	if err := s.knowsEveryTable(ctx); err != nil {
		return nil, err
	}
	var out []TableCount
	err := s.db.WithContext(ctx).Transaction(func(src *gorm.DB) error {
		return dst.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			out = nil
			if dst.driver == DriverPostgres {
				if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", copyLock).Error; err != nil {
					return err
				}
			}
			var held []string
			for _, c := range copiers {
				var n int64
				if err := tx.Table(c.table).Count(&n).Error; err != nil {
					return fmt.Errorf("count the rows of %s in the target: %w", c.table, err)
				}
				if n > 0 {
					held = append(held, fmt.Sprintf("%d in %s", n, c.table))
				}
			}
			if len(held) > 0 {
				return fmt.Errorf("%w (%s): copy into an empty database only; it was copied already, or other gpuvmds use it",
					ErrTargetNotEmpty, strings.Join(held, ", "))
			}
			// The target's migration made an installation ID of its own:
			// the copy is the same installation, so it takes the source's.
			var inst Installation
			if err := src.Table(inst.TableName()).Take(&inst).Error; err != nil {
				return fmt.Errorf("read the source's installation: %w", err)
			}
			if err := tx.Table(inst.TableName()).Where("singleton = 1").Updates(map[string]any{"id": inst.ID, "created_at": inst.CreatedAt}).Error; err != nil {
				return fmt.Errorf("write the installation: %w", err)
			}
			for _, c := range copiers {
				n, err := c.copy(ctx, src, tx, c.order)
				if err != nil {
					return err
				}
				out = append(out, TableCount{Table: c.table, Rows: n})
			}
			if dst.driver == DriverPostgres {
				for _, t := range identityTables {
					if err := tx.Exec(fmt.Sprintf("SELECT setval(pg_get_serial_sequence('%s', 'id'), COALESCE((SELECT MAX(id) FROM %s), 0) + 1, false)", t, t)).Error; err != nil {
						return fmt.Errorf("move the id sequence of %s past the copied rows: %w", t, err)
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("copy database: %w", err)
	}
	return out, nil
}

// knowsEveryTable refuses a source with a table the copy would leave
// behind (a newer gpuvmd's).
func (s *Store) knowsEveryTable(ctx context.Context) error {
	tables, err := s.db.WithContext(ctx).Migrator().GetTables()
	if err != nil {
		return fmt.Errorf("copy database: list the source's tables: %w", err)
	}
	var unknown []string
	for _, t := range tables {
		if t == (schemaMigration{}).TableName() || t == (Installation{}).TableName() || strings.HasPrefix(t, "sqlite_") {
			continue
		}
		if !slices.ContainsFunc(copiers, func(c tableCopier) bool { return c.table == t }) {
			unknown = append(unknown, t)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("copy database: the source has tables this gpuvmd cannot copy (%s): copy it with the gpuvmd that made them", strings.Join(unknown, ", "))
	}
	return nil
}
