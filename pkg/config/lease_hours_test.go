package config

import (
	"testing"
	"time"
)

func TestLeaseHours(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		lease                Lease
		wantMax, wantDefault int
	}{
		{"whole hours", Lease{Default: 8 * time.Hour, Max: 24 * time.Hour}, 24, 8},
		{"default rounds up", Lease{Default: 90 * time.Minute, Max: 24 * time.Hour}, 24, 2},
		{"max rounds down", Lease{Default: time.Hour, Max: 150 * time.Minute}, 2, 1},
		{"default at least an hour", Lease{Default: time.Minute, Max: 24 * time.Hour}, 24, 1},
		{"default within max", Lease{Default: 48 * time.Hour, Max: 24 * time.Hour}, 24, 24},
		{"max under an hour", Lease{Default: 30 * time.Minute, Max: 30 * time.Minute}, 0, 1},
		{"no max", Lease{Default: 8 * time.Hour}, MaxLeaseHours, 8},
		{"beyond ten years", Lease{Default: 20 * 365 * 24 * time.Hour, Max: 30 * 365 * 24 * time.Hour}, MaxLeaseHours, MaxLeaseHours},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.lease.MaxHours(); got != tc.wantMax {
				t.Errorf("MaxHours() = %d, want %d", got, tc.wantMax)
			}
			if got := tc.lease.DefaultHours(); got != tc.wantDefault {
				t.Errorf("DefaultHours() = %d, want %d", got, tc.wantDefault)
			}
		})
	}
}
