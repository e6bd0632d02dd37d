package server

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/report"
	"github.com/gpuvm/gpuvm/pkg/usage"
)

// reportSummary answers GET /v1/reports/summary (admins): what gpuvm report
// renders. Parameters: from and to as GET /v1/usage; tz, the IANA time
// zone of the weekday × hour heatmaps (default the server's); idle_below,
// the utilisation (0..1) under which a VM is idle.
func (s *Server) reportSummary(c *gin.Context) {
	from, to, ok := s.usageRange(c)
	if !ok {
		return
	}
	q := usage.ReportQuery{From: from, To: to, Location: time.Local, LocationName: localZoneName(to)}
	if tz := c.Query("tz"); tz != "" {
		loc, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			s.writeProblem(c, withField(errValidation, "tz", fmt.Sprintf("tz must be an IANA time zone (Europe/Berlin, UTC), got %s", strconv.Quote(tz))))
			return
		}
		q.Location, q.LocationName = loc, tz
	}
	if v := c.Query("idle_below"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			s.writeProblem(c, withField(errValidation, "idle_below", "idle_below must be a utilisation between 0 and 1 (0.1 is 10%), got "+strconv.Quote(v)))
			return
		}
		q.IdleBelow = f
	}
	sim, err := s.simulatedHosts(c.Request.Context()) // usage.go
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	q.SimulatedHosts = sim
	r, err := usage.Summarize(c.Request.Context(), s.Ledger, s.Store, q)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	if c.FullPath() != reportHTMLPath {
		for i := range r.Notes {
			r.Notes[i] = say(c, r.Notes[i])
		}
		c.JSON(http.StatusOK, r)
		return
	}
	// The page says its words and the notes in the request's language.
	var buf bytes.Buffer
	if err := report.Render(&buf, r, report.Options{Server: s.Host, Language: portal.Language(c.Request)}); err != nil {
		s.writeProblem(c, fmt.Errorf("rendering the review report: %w", err))
		return
	}
	// The report is one self-contained page (gpuvm report's): its styles
	// inline, no script, nothing loaded.
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/html; charset=utf-8", buf.Bytes())
}

// reportHTMLPath is the review report as the HTML page gpuvm report
// writes, for a browser (the portal's admin page links it).
const reportHTMLPath = "/v1/reports/summary.html"

// localZoneName names the server's time zone for people: "CET (UTC+01:00)"
// at t.
func localZoneName(t time.Time) string {
	name, off := t.In(time.Local).Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("%s (UTC%c%02d:%02d)", name, sign, off/3600, off%3600/60)
}
