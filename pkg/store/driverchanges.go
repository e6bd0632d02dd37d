package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// The announced changes of the hosts' vGPU manager (api.DriverChange) are
// events of the log: driver.announced, and driver.withdrawn naming one.
// They are few; each read reads them all through the events' type index.

// AnnounceDriverChange records an announcement and gives it its ID.
func (s *Store) AnnounceDriverChange(ctx context.Context, dc *api.DriverChange) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("announce a driver change: %w", err)
	}
	dc.ID = id.String()
	dc.At = dc.At.UTC().Truncate(time.Second)
	b, err := json.Marshal(api.DriverChangeEventPayload{ID: dc.ID, Driver: dc.Driver, At: dc.At, Note: dc.Note, By: dc.By})
	if err != nil {
		return err
	}
	ev := &Event{Type: api.EventDriverAnnounced, Payload: JSON(b)}
	if err := s.AppendEvent(ctx, ev); err != nil {
		return err
	}
	dc.AnnouncedAt = ev.CreatedAt
	return nil
}

// WithdrawDriverChange withdraws the announcement id: ErrNotFound when
// there is none, or it is withdrawn already.
func (s *Store) WithdrawDriverChange(ctx context.Context, id, by string) (*api.DriverChange, error) {
	var out *api.DriverChange
	err := s.Tx(ctx, func(tx *Store) error {
		all, err := tx.DriverChanges(ctx)
		if err != nil {
			return err
		}
		for i := range all {
			if all[i].ID == id && all[i].WithdrawnAt == nil {
				out = &all[i]
			}
		}
		if out == nil {
			return fmt.Errorf("%w: no announced driver change %q", ErrNotFound, id)
		}
		// The announcement withdrawn, for whoever reads the event stream.
		b, err := json.Marshal(api.DriverChangeEventPayload{ID: id, Driver: out.Driver, At: out.At, Note: out.Note, By: by})
		if err != nil {
			return err
		}
		ev := &Event{Type: api.EventDriverWithdrawn, Payload: JSON(b)}
		if err := tx.appendEvent(ctx, ev); err != nil {
			return err
		}
		out.WithdrawnAt, out.WithdrawnBy = &ev.CreatedAt, by
		return nil
	})
	return out, wrap(err, nil, "withdraw driver change %s", id)
}

// DriverChanges are every announcement, withdrawn or not, the next first
// (by At).
func (s *Store) DriverChanges(ctx context.Context) ([]api.DriverChange, error) {
	var out []api.DriverChange
	byID := map[string]int{}
	for _, typ := range []string{api.EventDriverAnnounced, api.EventDriverWithdrawn} {
		for after := int64(0); ; {
			evs, err := s.ListEventsSince(ctx, after, EventFilter{Type: typ, Limit: 1000})
			if err != nil {
				return nil, fmt.Errorf("read the driver changes: %w", err)
			}
			for _, ev := range evs {
				after = ev.ID
				var p api.DriverChangeEventPayload
				if json.Unmarshal(ev.Payload, &p) != nil || p.ID == "" {
					continue
				}
				if typ == api.EventDriverAnnounced {
					byID[p.ID] = len(out)
					out = append(out, api.DriverChange{ID: p.ID, Driver: p.Driver, At: p.At.UTC(), Note: p.Note, By: p.By, AnnouncedAt: ev.CreatedAt.UTC()})
				} else if i, ok := byID[p.ID]; ok && out[i].WithdrawnAt == nil {
					at := ev.CreatedAt.UTC()
					out[i].WithdrawnAt, out[i].WithdrawnBy = &at, p.By
				}
			}
			if len(evs) < 1000 {
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}
