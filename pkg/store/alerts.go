package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Alerts of the rules of the policy (pkg/monitor evaluates them). At most
// one alert of a rule and subject is firing (the partial unique index
// alerts_firing): a rule that fires again after it resolved makes a new row,
// so the table is the history of every alert, bounded by
// DeleteResolvedAlertsBefore.

// FireAlert records that a rule fires about a subject. When an alert of the
// rule and subject is firing already, its value, summary and update time
// are brought up to date and it is returned (fired false); otherwise a new
// firing alert is written (fired true), started at a.StartedAt (the store's
// clock when zero). *a is set to the row as stored.
func (s *Store) FireAlert(ctx context.Context, a *Alert) (fired bool, err error) {
	if a.Rule == "" || a.Subject == "" || a.Metric == "" {
		return false, fmt.Errorf("fire alert: %w: rule, subject and metric are required", ErrInvalid)
	}
	now := s.clock()
	err = s.Tx(ctx, func(tx *Store) error {
		cur, err := tx.firingAlert(ctx, a.Rule, a.Subject)
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
		case err != nil:
			return err
		default:
			err := tx.db.WithContext(ctx).Model(&Alert{}).Where("id = ?", cur.ID).
				Updates(map[string]any{"value": a.Value, "summary": a.Summary, "updated_at": now}).Error
			if err != nil {
				return err
			}
			cur.Value, cur.Summary, cur.UpdatedAt = a.Value, a.Summary, now
			*a = *cur
			return nil
		}
		row := *a
		row.ID = 0
		row.State = AlertFiring
		row.StartedAt = row.StartedAt.UTC().Truncate(time.Microsecond)
		if row.StartedAt.IsZero() {
			row.StartedAt = now
		}
		row.ResolvedAt, row.NotifiedAt = nil, nil
		row.UpdatedAt = now
		if err := tx.db.WithContext(ctx).Create(&row).Error; err != nil {
			return err
		}
		*a = row
		fired = true
		return nil
	})
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		// Another gpuvmd sharing the database fired it first.
		cur, gerr := s.firingAlert(ctx, a.Rule, a.Subject)
		if gerr == nil {
			*a = *cur
			return false, nil
		}
	}
	if err != nil {
		return false, wrap(err, nil, "fire alert %s about %s", a.Rule, a.Subject)
	}
	return fired, nil
}

func (s *Store) firingAlert(ctx context.Context, rule, subject string) (*Alert, error) {
	var a Alert
	err := s.db.WithContext(ctx).Where("rule = ? AND subject = ? AND state = ?", rule, subject, AlertFiring).Take(&a).Error
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// ResolveAlert marks the firing alert of a rule and subject resolved at
// `at` with the value that resolved it and a summary saying why, and
// returns it; ErrNotFound when none is firing.
func (s *Store) ResolveAlert(ctx context.Context, rule, subject string, value float64, summary string, at time.Time) (*Alert, error) {
	at = at.UTC().Truncate(time.Microsecond)
	var out *Alert
	err := s.Tx(ctx, func(tx *Store) error {
		cur, err := tx.firingAlert(ctx, rule, subject)
		if err != nil {
			return err
		}
		now := tx.clock()
		err = tx.db.WithContext(ctx).Model(&Alert{}).Where("id = ? AND state = ?", cur.ID, AlertFiring).
			Updates(map[string]any{"state": AlertResolved, "value": value, "summary": summary, "resolved_at": at, "updated_at": now}).Error
		if err != nil {
			return err
		}
		cur.State, cur.Value, cur.Summary, cur.ResolvedAt, cur.UpdatedAt = AlertResolved, value, summary, &at, now
		out = cur
		return nil
	})
	if err != nil {
		return nil, wrap(err, nil, "resolve alert %s about %s", rule, subject)
	}
	return out, nil
}

// MarkAlertNotified records when the webhook of an alert's last change was
// delivered.
func (s *Store) MarkAlertNotified(ctx context.Context, id int64, at time.Time) error {
	res := s.db.WithContext(ctx).Model(&Alert{}).Where("id = ?", id).
		Update("notified_at", at.UTC().Truncate(time.Microsecond))
	if res.Error == nil && res.RowsAffected == 0 {
		res.Error = gorm.ErrRecordNotFound
	}
	return wrap(res.Error, nil, "mark alert %d notified", id)
}

// AlertFilter selects the alerts ListAlerts returns.
type AlertFilter struct {
	State string // AlertFiring, AlertResolved, or "" for both
	Host  string // "": every host's
	Rule  string // "": every rule's
	// BeforeID: only alerts with a smaller ID (the next page, newest
	// first); 0 from the newest.
	BeforeID int64
	// Limit: 0 means every alert; more than 1000 means 1000.
	Limit int
}

// ListAlerts lists alerts newest first (by ID).
func (s *Store) ListAlerts(ctx context.Context, f AlertFilter) ([]Alert, error) {
	q := s.db.WithContext(ctx).Model(&Alert{})
	switch f.State {
	case "":
	case AlertFiring, AlertResolved:
		q = q.Where("state = ?", f.State)
	default:
		return nil, fmt.Errorf("list alerts: %w: state %q", ErrInvalid, f.State)
	}
	if f.Host != "" {
		q = q.Where("host = ?", f.Host)
	}
	if f.Rule != "" {
		q = q.Where("rule = ?", f.Rule)
	}
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	if f.Limit > 0 {
		q = q.Limit(min(f.Limit, 1000))
	}
	var out []Alert
	err := q.Order("id DESC").Find(&out).Error
	return out, wrap(err, nil, "list alerts")
}

// CountFiringAlerts counts the firing alerts of each rule.
func (s *Store) CountFiringAlerts(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Rule string
		N    int64
	}
	err := s.db.WithContext(ctx).Model(&Alert{}).Select("rule, COUNT(*) AS n").
		Where("state = 'firing'").Group("rule").Scan(&rows).Error // alerts_firing: a literal (models.go)
	if err != nil {
		return nil, wrap(err, nil, "count firing alerts")
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Rule] = r.N
	}
	return out, nil
}

// DeleteResolvedAlertsBefore deletes the alerts resolved before t and says
// how many; firing ones stay, however old.
func (s *Store) DeleteResolvedAlertsBefore(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("state = ? AND resolved_at < ?", AlertResolved, t.UTC()).Delete(&Alert{})
	return res.RowsAffected, wrap(res.Error, nil, "delete alerts resolved before %s", t.UTC().Format(time.RFC3339))
}
