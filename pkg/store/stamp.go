package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
)

// StateStamp fingerprints the state that placing the queue reads from the
// database, but the queue itself (a change of the queue appends an event):
// the newest event, the reservations, the drained GPUs and, when
// hostTimeout is positive, the fleet's nodes (state, whether a heartbeat
// came within hostTimeout, published inventory). Two equal stamps mean a
// placement would read the same state.
func (s *Store) StateStamp(ctx context.Context, hostTimeout time.Duration) (string, error) {
	id, err := s.LastEventID(ctx)
	if err != nil {
		return "", err
	}
	res, err := s.ReservationsStamp(ctx)
	if err != nil {
		return "", err
	}
	drains, err := s.ListGPUDrains(ctx, "")
	if err != nil {
		return "", fmt.Errorf("stamp the state: list drained GPUs: %w", err)
	}
	h := fnv.New128a()
	fmt.Fprintf(h, "%d\x00%s\x00", id, res)
	for _, d := range drains {
		fmt.Fprintf(h, "%s/%s/%s\x00", d.Host, d.GPUAddress, d.Reason)
	}
	if hostTimeout > 0 {
		hosts, err := s.ListHosts(ctx)
		if err != nil {
			return "", fmt.Errorf("stamp the state: list the fleet's nodes: %w", err)
		}
		now := s.Now()
		for i := range hosts {
			hh := &hosts[i]
			up := hh.State != HostDown && now.Sub(hh.HeartbeatAt) <= hostTimeout
			fmt.Fprintf(h, "%s\x00%s\x00%t\x00%s\x00", hh.Name, hh.State, up, hh.Inventory)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}
