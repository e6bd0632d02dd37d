package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// RecordHomeHost records that user's home lives on host (spaces around it
// trimmed), unless a host is recorded already: a home stays where it was
// first made (a VM placed elsewhere gets a second, empty directory there,
// not the person's files). The write touches the row only while no host
// is recorded (NULL, or an empty one), so a record made meanwhile stays.
// It returns the host recorded, host or the one before. An unknown user is
// ErrNotFound; an empty host ErrInvalid.
func (s *Store) RecordHomeHost(ctx context.Context, user, host string) (string, error) {
	host = strings.TrimSpace(host)
	if host == "" {
		return "", fmt.Errorf("home host of user %q: %w: empty host", user, ErrInvalid)
	}
	var recorded string
	err := s.Tx(ctx, func(tx *Store) error {
		res := tx.db.WithContext(ctx).Model(&User{}).Where("name = ? AND (home_host IS NULL OR home_host = '')", user).Update("home_host", host)
		if res.Error != nil {
			return res.Error
		}
		u, err := tx.getUser(ctx, "name = ?", user)
		if err != nil {
			return err
		}
		if u.HomeHost == nil || *u.HomeHost == "" {
			return fmt.Errorf("user %q: %w: no home host recorded", user, ErrConflict)
		}
		recorded = *u.HomeHost
		return nil
	})
	if err != nil {
		return "", wrap(err, nil, "record the home host of user %q", user)
	}
	return recorded, nil
}

// HomeHosts returns the host each of the users named has their home on;
// a user without one recorded (or unknown) is absent. A name given more
// than once (the owner of many VMs) is asked for once.
func (s *Store) HomeHosts(ctx context.Context, names []string) (map[string]string, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	out := make(map[string]string, len(names))
	if len(names) == 0 {
		return out, nil
	}
	var rows []struct {
		Name     string
		HomeHost string
	}
	err := s.db.WithContext(ctx).Model(&User{}).Select("name, home_host").
		Where("name IN ? AND home_host IS NOT NULL AND home_host <> ''", names).Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "read the home hosts of %d users", len(names))
	}
	for _, r := range rows {
		out[r.Name] = r.HomeHost
	}
	return out, nil
}

// ForgetHomeHost clears user's home host if it is host: their home was
// removed there, and the next is made where their next VM runs. A home
// recorded on another host stays so; an unknown user is no error.
func (s *Store) ForgetHomeHost(ctx context.Context, user, host string) error {
	err := s.db.WithContext(ctx).Model(&User{}).Where("name = ? AND home_host = ?", user, strings.TrimSpace(host)).Update("home_host", nil).Error
	return wrap(err, nil, "forget the home host of user %q", user)
}
