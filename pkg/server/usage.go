package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/usage"
)

// Usage ranges: the default when from is not given, and the longest one
// may ask for (samples are kept 90 days by default; records for good).
const (
	defaultUsageRange = 30 * 24 * time.Hour
	maxUsageRange     = 400 * 24 * time.Hour
)

// usageRange reads the from and to parameters (RFC 3339; default: the last
// 30 days up to now), answering 422 naming the parameter when one is not
// valid.
func (s *Server) usageRange(c *gin.Context) (from, to time.Time, ok bool) {
	if !s.queryTime(c, "from", &from) || !s.queryTime(c, "to", &to) {
		return from, to, false
	}
	from, to = from.UTC(), to.UTC()
	if to.IsZero() {
		to = s.Store.Now().UTC()
	}
	if from.IsZero() {
		from = to.Add(-defaultUsageRange)
	}
	// Times past 1970 and up to a year ahead: the ledger keys hours by
	// their Unix time, and no usage is recorded before or far after now.
	earliest, latest := time.Unix(0, 0).UTC(), s.Store.Now().UTC().Add(366*24*time.Hour)
	switch {
	case to.Before(earliest) || to.After(latest):
		s.writeProblem(c, withField(errValidation, "to", fmt.Sprintf("to must be between %s and %s", earliest.Format(time.RFC3339), latest.Format(time.RFC3339))))
		return from, to, false
	case from.Before(earliest) || from.After(latest):
		s.writeProblem(c, withField(errValidation, "from", fmt.Sprintf("from must be between %s and %s", earliest.Format(time.RFC3339), latest.Format(time.RFC3339))))
		return from, to, false
	case !to.After(from):
		s.writeProblem(c, withField(errValidation, "to", fmt.Sprintf("to (%s) must be after from (%s)", to.Format(time.RFC3339), from.Format(time.RFC3339))))
		return from, to, false
	case to.Sub(from) > maxUsageRange:
		s.writeProblem(c, withField(errValidation, "from", fmt.Sprintf("the range from %s to %s is longer than %d days", from.Format(time.RFC3339),
			to.Format(time.RFC3339), int(maxUsageRange.Hours()/24))))
		return from, to, false
	}
	return from, to, true
}

func (s *Server) usage(c *gin.Context) {
	from, to, ok := s.usageRange(c)
	if !ok {
		return
	}
	by := c.DefaultQuery("by", api.UsageByUser)
	if !slices.Contains(api.UsageGroupings, by) {
		s.writeProblem(c, withField(errValidation, "by", fmt.Sprintf("by must be one of %s, got %s", strings.Join(api.UsageGroupings, ", "), strconv.Quote(by))))
		return
	}
	// Users see their own usage only; admins everyone's, or one user's.
	u := user(c)
	who := c.Query("user")
	switch {
	case !u.Admin && who != "" && who != u.Name:
		s.writeProblem(c, withField(errForbidden, "user", "users see their own usage only"))
		return
	case !u.Admin:
		who = u.Name
	}
	sim, err := s.simulatedHosts(c.Request.Context())
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	r, err := s.Ledger.Usage(c.Request.Context(), usage.Query{From: from, To: to, By: by, User: who, SimulatedHosts: sim})
	if err != nil {
		s.writeProblem(c, err) // the ledger's invalid arguments are a 422 (storeProblem)
		return
	}
	if r.Rows == nil {
		r.Rows = []api.UsageRow{}
	}
	c.JSON(http.StatusOK, r)
}

// usagePeriods answers GET /v1/usage/periods?user=: a user's GPU time this
// day, week and month of the policy's time zone against their GPU-hour
// quotas, and day by day (users: their own; admins: anyone's).
func (s *Server) usagePeriods(c *gin.Context) {
	u := user(c)
	ctx := c.Request.Context()
	who := u
	if name := c.Query("user"); name != "" && name != u.Name {
		if !u.Admin {
			s.writeProblem(c, withField(errForbidden, "user", "users see their own usage only"))
			return
		}
		other, err := s.Store.GetUser(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			s.writeProblem(c, withField(errNotFound, "user", "no user is named "+strconv.Quote(name)))
			return
		} else if err != nil {
			s.writeProblem(c, err)
			return
		}
		who = other
	}
	loc := s.location()
	now := s.Store.Now().In(loc)
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	week := day.AddDate(0, 0, -((int(now.Weekday()) + 6) % 7)) // from Monday, as quotas count
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, loc)
	quota := s.config().Policy.Effective(who.Name, who.Groups).Quota
	sim, err := s.simulatedHosts(ctx)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	period := func(key string, from, to time.Time, limit *float64) (api.UsagePeriod, error) {
		r, err := s.Ledger.Usage(ctx, usage.Query{From: from.UTC(), To: earlierOf(to, now).UTC(), User: who.Name, SimulatedHosts: sim})
		if err != nil {
			return api.UsagePeriod{}, fmt.Errorf("usage of %s from %s: %w", who.Name, from.Format(time.DateOnly), err)
		}
		row := r.Total
		row.Key = key
		return api.UsagePeriod{UsageRow: row, From: from, To: to, QuotaGPUHours: limit}, nil
	}
	out := api.UsagePeriods{User: who.Name, Timezone: loc.String(), Days: []api.UsagePeriod{}}
	if out.Day, err = period("day", day, day.AddDate(0, 0, 1), quota.GPUHoursPerDay); err == nil {
		if out.Week, err = period("week", week, week.AddDate(0, 0, 7), quota.GPUHoursPerWeek); err == nil {
			out.Month, err = period("month", month, month.AddDate(0, 1, 0), quota.GPUHoursPerMonth)
		}
	}
	first := week
	if month.Before(first) {
		first = month
	}
	for d := first; err == nil && !d.After(day); d = d.AddDate(0, 0, 1) {
		var p api.UsagePeriod
		if p, err = period(d.Format(time.DateOnly), d, d.AddDate(0, 0, 1), nil); err == nil {
			out.Days = append(out.Days, p)
		}
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// simulatedHosts names the hosts whose last heartbeat said they are
// simulated GPU servers (host { simulate = "…" }): the utilisation of
// what was held on them is the simulator's, not a GPU's.
func (s *Server) simulatedHosts(ctx context.Context) (map[string]bool, error) {
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the hosts: %w", err)
	}
	out := map[string]bool{}
	for _, h := range hosts {
		var inv storedInventory // hosts.go
		if h.Inventory != "" && json.Unmarshal([]byte(h.Inventory), &inv) == nil && inv.Simulated {
			out[h.Name] = true
		}
	}
	return out, nil
}

// earlierOf is the earlier of two times.
func earlierOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
