package config

import (
	"testing"
	"time"
)

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{400 * time.Millisecond, "0s"},
		{30 * time.Second, "30s"},
		{59*time.Second + 600*time.Millisecond, "1m"},
		{12 * time.Minute, "12m"},
		{4 * time.Hour, "4h"},
		{4*time.Hour + 5*time.Minute, "4h5m"},
		{2*time.Hour + 59*time.Minute + 40*time.Second, "3h"},
		{47*time.Hour + 59*time.Minute + 50*time.Second, "2d"},
		{50 * time.Hour, "2d2h"},
		{-90 * time.Second, "-2m"},
	} {
		if got := HumanDuration(tc.d); got != tc.want {
			t.Errorf("HumanDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
