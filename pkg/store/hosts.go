package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// RegisterHost records that a gpuvmd started: it creates the host's row or
// updates it (API URL, version, start and heartbeat times) and marks it up.
// A host an admin set draining stays draining across restarts. h.Inventory
// is written when not empty, else an existing row keeps its own. h is
// filled with what was written.
func (s *Store) RegisterHost(ctx context.Context, h *Host) error {
	if strings.TrimSpace(h.Name) == "" {
		return fmt.Errorf("register host: %w: empty name", ErrInvalid)
	}
	now := s.clock()
	h.StartedAt, h.HeartbeatAt, h.UpdatedAt = now, now, now
	if h.State != HostDraining {
		h.State = HostUp
	}
	sets := "api_url = excluded.api_url, version = excluded.version, started_at = excluded.started_at, " +
		"heartbeat_at = excluded.heartbeat_at, updated_at = excluded.updated_at, " +
		"state = CASE WHEN hosts.state = 'draining' THEN 'draining' ELSE excluded.state END"
	if h.Inventory != "" {
		sets += ", inventory = excluded.inventory"
	}
	err := s.Tx(ctx, func(tx *Store) error {
		err := tx.db.Exec(`INSERT INTO hosts (name, api_url, version, state, inventory, started_at, heartbeat_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET `+sets,
			h.Name, h.APIURL, h.Version, h.State, h.Inventory, now, now, now).Error
		if err != nil {
			return err
		}
		tx.touchHosts()
		return tx.db.Where("name = ?", h.Name).Take(h).Error
	})
	return wrap(err, nil, "register host %q", h.Name)
}

// Heartbeat says that a host is alive and what its inventory
// (gpu.HostInventory, JSON) is now. A host marked down comes back up; an
// unknown host is ErrNotFound (it must register first).
func (s *Store) Heartbeat(ctx context.Context, host, inventory string) error {
	now := s.clock()
	res := s.db.WithContext(ctx).Model(&Host{}).Where("name = ?", host).Updates(map[string]any{
		"heartbeat_at": now,
		"updated_at":   now,
		"inventory":    inventory,
		"state":        gorm.Expr("CASE WHEN state = 'down' THEN 'up' ELSE state END"),
	})
	if res.Error != nil {
		return wrap(res.Error, nil, "heartbeat of host %q", host)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("heartbeat of host %q: %w (register it first)", host, ErrNotFound)
	}
	s.touchHosts()
	return nil
}

// ListHosts lists every host by name.
func (s *Store) ListHosts(ctx context.Context) ([]Host, error) {
	var out []Host
	err := s.db.WithContext(ctx).Order("name").Find(&out).Error
	return out, wrap(err, nil, "list hosts")
}

// GetHost gets one host.
func (s *Store) GetHost(ctx context.Context, name string) (*Host, error) {
	var h Host
	if err := s.db.WithContext(ctx).Where("name = ?", name).Take(&h).Error; err != nil {
		return nil, wrap(err, nil, "get host %q", name)
	}
	return &h, nil
}

// MarkHostsDown marks down every host that is up and whose last heartbeat
// is before olderThan, and returns their names, sorted. Draining hosts
// take no work anyway and keep their state; a host comes back up with its
// next heartbeat or registration.
func (s *Store) MarkHostsDown(ctx context.Context, olderThan time.Time) ([]string, error) {
	var names []string
	err := s.Tx(ctx, func(tx *Store) error {
		q := tx.db.Model(&Host{}).Where("state = ? AND heartbeat_at < ?", HostUp, olderThan.UTC())
		if err := q.Order("name").Pluck("name", &names).Error; err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		tx.touchHosts()
		return tx.db.Model(&Host{}).Where("name IN ?", names).
			Updates(map[string]any{"state": HostDown, "updated_at": tx.clock()}).Error
	})
	if err != nil {
		return nil, wrap(err, nil, "mark hosts down")
	}
	return names, nil
}

// HostsGeneration counts the committed changes of the hosts
// (registrations, heartbeats, hosts marked down or drained) and of the GPU
// drains made through this Store. A caller that keeps what it read of the
// hosts reads the generation first, and reads them again when it has
// moved; it also bounds how long it keeps them, for other processes'
// writes (a fleet's other nodes), which do not move it.
func (s *Store) HostsGeneration() uint64 { return s.hostsGen.Load() }

// touchHosts notes a change of the hosts or drains (HostsGeneration).
func (s *Store) touchHosts() { touch(s.hostsGen, s.hostsTouched) }
