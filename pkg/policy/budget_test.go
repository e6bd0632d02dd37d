package policy

import (
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
)

func TestBudgetPeriods(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Skip(err)
	}
	f := func(v float64) *float64 { return &v }
	// Sunday 1 March 2026, 20:00 UTC is Monday 2 March, 04:00 in Shanghai.
	now := time.Date(2026, 3, 1, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		q    config.Quota
		loc  *time.Location
		want []BudgetPeriod
	}{
		{"none", config.Quota{}, time.UTC, nil},
		{"all three in UTC", config.Quota{GPUHoursPerDay: f(8), GPUHoursPerWeek: f(40), GPUHoursPerMonth: f(100)}, nil, []BudgetPeriod{
			{"day", 8, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
			{"week", 40, time.Date(2026, 2, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
			{"month", 100, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)},
		}},
		{"a week in the policy's timezone", config.Quota{GPUHoursPerWeek: f(40)}, shanghai, []BudgetPeriod{
			{"week", 40, time.Date(2026, 3, 2, 0, 0, 0, 0, shanghai), time.Date(2026, 3, 9, 0, 0, 0, 0, shanghai)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BudgetPeriods(tc.q, now, tc.loc)
			if len(got) != len(tc.want) {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Unit != w.Unit || g.Limit != w.Limit || !g.Start.Equal(w.Start) || !g.End.Equal(w.End) {
					t.Errorf("period %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}
