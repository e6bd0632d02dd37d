package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Page size of GET /v1/alerts.
const (
	defaultAlertPage = 100
	maxAlertPage     = 500
)

func toAPIAlert(a *store.Alert) api.Alert {
	return api.Alert{ID: a.ID, Rule: a.Rule, Subject: a.Subject, Host: a.Host, Metric: a.Metric, Value: a.Value,
		Summary: a.Summary, State: a.State, StartedAt: a.StartedAt, ResolvedAt: a.ResolvedAt, NotifiedAt: a.NotifiedAt}
}

// listAlerts serves GET /v1/alerts[?state=firing|resolved&rule=&limit=&after=]
// (admins): alerts newest first, by pages.
func (s *Server) listAlerts(c *gin.Context) {
	f := store.AlertFilter{Limit: defaultAlertPage, Rule: c.Query("rule")}
	switch st := c.Query("state"); st {
	case "", api.AlertFiring, api.AlertResolved:
		f.State = st
	default:
		s.writeProblem(c, withField(errBadRequest, "state", fmt.Sprintf("unknown alert state %q (known: %s, %s)", st, api.AlertFiring, api.AlertResolved)))
		return
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxAlertPage {
			s.writeProblem(c, withField(errBadRequest, "limit", fmt.Sprintf("limit is a number from 1 to %d", maxAlertPage)))
			return
		}
		f.Limit = n
	}
	if a := c.Query("after"); a != "" {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			s.writeProblem(c, withField(errBadRequest, "after", "the cursor is not one this server gave"))
			return
		}
		f.BeforeID = id
	}
	limit := f.Limit
	f.Limit++ // one more tells whether there is a next page
	as, err := s.Store.ListAlerts(c.Request.Context(), f)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.AlertList{Items: make([]api.Alert, 0, min(len(as), limit))}
	if len(as) > limit {
		as = as[:limit]
		out.Next = strconv.FormatInt(as[limit-1].ID, 10)
	}
	for i := range as {
		a := toAPIAlert(&as[i])
		a.Summary = say(c, a.Summary)
		out.Items = append(out.Items, a)
	}
	c.JSON(http.StatusOK, out)
}
