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
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Reservations book GPU capacity ahead (POST /v1/reservations): the API
// checks the request's form and who may book what, then the Booker (the
// orchestrator) checks the policy's rules and the capacity and records the
// reservation in the same transaction. Everyone sees their own
// reservations, their groups' and those they made; admins see all. The
// owner, who made it, and admins may cancel one; to others it does not
// exist.

// Booker books GPU capacity ahead (the orchestrator's Book): what is wrong
// with r is a *policy.FieldError (several joined), capacity that is not
// there a *policy.CapacityError, and a booking overtaken by another too
// often store.ErrConflict.
//
// Capacity counts, for each slot, how many VMs of r's profile or GPU need
// a booking of that slot alone could get (at most most), on the same
// state as Book; when no GPU could ever give the need the error is a
// *policy.CapacityError with Never set.
//
// ReplayInputs reads, as a dispatch round reads it, the state the
// estimated starts replay (estimate.go).
type Booker interface {
	Book(ctx context.Context, r *store.Reservation, admin bool) error
	Capacity(ctx context.Context, r *store.Reservation, slots []policy.Interval, most int) ([]int, error)
	ReplayInputs(ctx context.Context) (*orchestrator.ReplayInputs, error)
}

// Limits of a reservation's request.
const (
	maxReservationCount = policy.MaxBookingVMs
	maxReservationNote  = 500
	// startGrace: a start this little in the past is taken as now (a
	// client's clock, the request's own time).
	startGrace = time.Minute
	// nextOccurrences is how many coming occurrences a reservation shows.
	nextOccurrences = 5
	// The slots of GET /v1/reservations/capacity: their length (step),
	// how many one answer has (five weeks of hours), how far a range
	// goes by default (a week), and the most a slot counts when the
	// rules set no max_vms.
	defaultCapacityStep  = time.Hour
	minCapacityStep      = 15 * time.Minute
	maxCapacityStep      = 24 * time.Hour
	maxCapacitySlots     = 5 * 7 * 24
	defaultCapacityRange = 7 * 24 * time.Hour
	defaultCapacityMost  = 100
)

// errNoCapacity refuses a booking the GPUs cannot honour.
var errNoCapacity = &Problem{Type: ProblemBase + "no-capacity", Title: "Not enough GPU capacity then", Status: http.StatusConflict}

// reservationFields maps the policy's booking fields to the request's.
var reservationFields = map[string]string{
	policy.FieldOwner: "owner", policy.FieldProfile: "profile", policy.FieldNeed: "gpu", policy.FieldVMs: "count",
	policy.FieldStart: "start", policy.FieldEnd: "end", policy.FieldRepeat: "recurrence",
	policy.FieldRepeatDays: "recurrence.days", policy.FieldRepeatUntil: "recurrence.until",
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday, "thursday": time.Thursday,
	"friday": time.Friday, "saturday": time.Saturday,
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func (s *Server) reservationRoutes(g *gin.RouterGroup) {
	g.POST("/reservations", s.createReservation)
	g.GET("/reservations", s.listReservations)
	g.GET("/reservations/capacity", s.reservationCapacity)
	g.GET("/reservations/:id", s.getReservation)
	g.DELETE("/reservations/:id", s.deleteReservation)
}

// location is the time zone of the policy (recurrences keep its wall-clock
// times).
func (s *Server) location() *time.Location {
	if s.Config != nil {
		if cfg := s.Config.Load(); cfg != nil && cfg.Policy.Location != nil {
			return cfg.Policy.Location
		}
	}
	return time.UTC
}

func (s *Server) config() *config.Config {
	if s.Config != nil {
		if cfg := s.Config.Load(); cfg != nil {
			return cfg
		}
	}
	return &config.Config{}
}

func (s *Server) createReservation(c *gin.Context) {
	u := user(c)
	ctx := c.Request.Context()
	if s.Bookings == nil {
		s.writeProblem(c, with(errUnavailable, "gpuvmd runs without a scheduler to book GPUs on"))
		return
	}
	var req api.CreateReservationRequest
	if !s.decodeTimes(c) || !s.decodeJSON(c, &req) {
		return
	}
	res := &store.Reservation{OwnerKind: store.OwnerUser, Owner: u.Name, Count: req.Count, Note: req.Note, CreatedBy: u.Name}
	if !s.reservationOwner(c, req.Owner, res) {
		return
	}
	if !s.reservationNeed(c, req, res) {
		return
	}
	now := s.Store.Now()
	switch {
	case req.Count == 0:
		res.Count = 1
	case req.Count < 0 || req.Count > maxReservationCount:
		s.writeProblem(c, withField(errValidation, "count", fmt.Sprintf("count is from 1 to %d, not %d", maxReservationCount, req.Count)))
		return
	}
	switch {
	case req.Start.IsZero():
		s.writeProblem(c, withField(errValidation, "start", "give the start, an RFC 3339 time (2026-12-01T14:00:00+01:00)"))
		return
	case req.End.IsZero():
		s.writeProblem(c, withField(errValidation, "end", "give the end, an RFC 3339 time (2026-12-01T16:00:00+01:00)"))
		return
	}
	res.StartAt, res.EndAt = req.Start, req.End
	if res.StartAt.Before(now) && now.Sub(res.StartAt) <= startGrace {
		res.StartAt = now
	}
	if !s.reservationRecurrence(c, req.Recurrence, res) {
		return
	}
	if len(req.Note) > maxReservationNote || strings.ContainsAny(req.Note, "\x00") {
		s.writeProblem(c, withField(errValidation, "note", fmt.Sprintf("a note has at most %d characters", maxReservationNote)))
		return
	}
	err := s.Bookings.Book(ctx, res, u.Admin)
	var fe *policy.FieldError
	var ce *policy.CapacityError
	switch {
	case errors.As(err, &ce):
		s.writeProblem(c, with(errNoCapacity, ce.Error()))
		return
	case errors.As(err, &fe):
		field := reservationFields[fe.Field]
		if fe.Field == policy.FieldNeed && res.Profile != "" {
			field = "profile"
		}
		s.writeProblem(c, withField(errValidation, field, joinedText(err)))
		return
	case errors.Is(err, store.ErrConflict):
		s.writeProblem(c, with(errConflict, "other bookings were made at the same time again and again; try again"))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	}
	if s.Worker != nil {
		s.Worker.Wake()
	}
	auditTarget(c, "reservation/"+strconv.FormatInt(res.ID, 10))
	c.Header("Location", "/v1/reservations/"+strconv.FormatInt(res.ID, 10))
	c.JSON(http.StatusCreated, s.toAPIReservation(res, now))
}

// joinedText is the messages of joined errors on one line.
func joinedText(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// decodeTimes reads the body ahead of decodeJSON to name a time field that
// is not an RFC 3339 time (encoding/json's error does not); it leaves the
// body to be read again.
func (s *Server) decodeTimes(c *gin.Context) bool {
	body, ok := s.readBody(c, false)
	if !ok {
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return true
	}
	fields := map[string]json.RawMessage{"start": top["start"], "end": top["end"]}
	var rec map[string]json.RawMessage
	if raw, ok := top["recurrence"]; ok && json.Unmarshal(raw, &rec) == nil {
		fields["recurrence.until"] = rec["until"]
	}
	for _, name := range []string{"start", "end", "recurrence.until"} {
		raw := fields[name]
		if raw == nil || string(raw) == "null" {
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) == nil {
			if _, err := time.Parse(time.RFC3339, v); err == nil {
				continue
			}
		}
		s.writeProblem(c, withField(errBadRequest, name, fmt.Sprintf("%s must be an RFC 3339 time (2026-12-01T14:00:00+01:00), got %s", name, raw)))
		return false
	}
	return true
}

// reservationOwner sets the owner: the caller, or (admins) the user or
// "group:NAME" asked for.
func (s *Server) reservationOwner(c *gin.Context, owner string, res *store.Reservation) bool {
	if owner == "" {
		return true
	}
	u := user(c)
	kind, name := store.OwnerUser, owner
	if g, ok := strings.CutPrefix(owner, "group:"); ok {
		kind, name = store.OwnerGroup, g
	}
	if name == "" {
		s.writeProblem(c, withField(errValidation, "owner", `the owner is a user ("ann") or a group ("group:students")`))
		return false
	}
	if !u.Admin && (kind != store.OwnerUser || name != u.Name) {
		s.writeProblem(c, withField(errForbidden, "owner", "only admins book for someone else"))
		return false
	}
	ctx := c.Request.Context()
	switch kind {
	case store.OwnerUser:
		if _, err := s.Store.GetUser(ctx, name); errors.Is(err, store.ErrNotFound) {
			s.writeProblem(c, withField(errValidation, "owner", "no user is named "+strconv.Quote(name)))
			return false
		} else if err != nil {
			s.writeProblem(c, err)
			return false
		}
	case store.OwnerGroup:
		gs, err := s.Store.ListGroups(ctx)
		if err != nil {
			s.writeProblem(c, err)
			return false
		}
		if !slices.ContainsFunc(gs, func(g store.Group) bool { return g.Name == name }) {
			s.writeProblem(c, withField(errValidation, "owner", "no group is named "+strconv.Quote(name)))
			return false
		}
	}
	res.OwnerKind, res.Owner = kind, name
	return true
}

// reservationNeed sets what is booked: a profile the caller and the owner
// may use, or a GPU need.
func (s *Server) reservationNeed(c *gin.Context, req api.CreateReservationRequest, res *store.Reservation) bool {
	u := user(c)
	switch {
	case req.Profile != "" && req.GPU != nil:
		s.writeProblem(c, withField(errValidation, "gpu", "book a profile or a gpu need, not both"))
		return false
	case req.Profile == "" && req.GPU == nil:
		s.writeProblem(c, withField(errValidation, "profile", "name the profile to book, or give a gpu need"))
		return false
	case req.GPU != nil:
		g := req.GPU
		switch gpu.Kind(g.Kind) {
		case gpu.KindMIG, gpu.KindVGPU:
			if g.Type == "" {
				s.writeProblem(c, withField(errValidation, "gpu.type", fmt.Sprintf("a %s need names its type (3g.40gb, L40S-12Q)", g.Kind)))
				return false
			}
		case gpu.KindPassthrough:
			if g.Type != "" {
				s.writeProblem(c, withField(errValidation, "gpu.type", "a whole GPU has no type; name its model"))
				return false
			}
		default:
			s.writeProblem(c, withField(errValidation, "gpu.kind", fmt.Sprintf("kind is mig, vgpu or passthrough, not %s", strconv.Quote(g.Kind))))
			return false
		}
		res.GPUKind, res.GPUModel, res.GPUType = gpu.Kind(g.Kind), g.Model, g.Type
		return true
	}
	p := s.config().Profiles[req.Profile]
	if p == nil || !(u.Admin || p.Allows(u.Name, u.Groups)) {
		// A profile the caller may not use is as absent as an unknown one.
		s.writeProblem(c, withField(errNotFound, "profile", "unknown profile "+strconv.Quote(req.Profile)))
		return false
	}
	if p.GPU == nil {
		s.writeProblem(c, withField(errValidation, "profile", fmt.Sprintf("profile %s has no GPU: there is nothing to book", p.Name)))
		return false
	}
	switch res.OwnerKind {
	case store.OwnerUser:
		if res.Owner != u.Name {
			owner, err := s.Store.GetUser(c.Request.Context(), res.Owner)
			if err != nil {
				s.writeProblem(c, err)
				return false
			}
			if !owner.Admin && !p.Allows(owner.Name, owner.Groups) {
				s.writeProblem(c, withField(errValidation, "profile", fmt.Sprintf("profile %s is not open to %s", p.Name, owner.Name)))
				return false
			}
		}
	case store.OwnerGroup:
		if !p.Allows("", []string{res.Owner}) {
			s.writeProblem(c, withField(errValidation, "profile", fmt.Sprintf("profile %s is not open to group %s", p.Name, res.Owner)))
			return false
		}
	}
	res.Profile = p.Name
	return true
}

// reservationRecurrence sets the RRule and RepeatUntil of a recurrence.
func (s *Server) reservationRecurrence(c *gin.Context, rec *api.Recurrence, res *store.Reservation) bool {
	if rec == nil {
		return true
	}
	var rep policy.Recurrence
	if rec.RRule != "" {
		if rec.Freq != "" || len(rec.Days) > 0 {
			s.writeProblem(c, withField(errValidation, "recurrence.rrule", "give rrule, or freq and days, not both"))
			return false
		}
		var until *time.Time
		if !rec.Until.IsZero() {
			until = &rec.Until
		}
		var err error
		if rep, err = policy.ParseRRule(rec.RRule, until); err != nil {
			s.writeProblem(c, withField(errValidation, "recurrence.rrule", err.Error()))
			return false
		}
	} else {
		switch strings.ToLower(rec.Freq) {
		case "", policy.Weekly:
			rep.Freq = policy.Weekly
		case policy.Daily:
			rep.Freq = policy.Daily
		default:
			s.writeProblem(c, withField(errValidation, "recurrence.freq", fmt.Sprintf("freq is weekly or daily, not %s", strconv.Quote(rec.Freq))))
			return false
		}
		if rep.Freq == policy.Daily && len(rec.Days) > 0 {
			s.writeProblem(c, withField(errValidation, "recurrence.days", "days are for a weekly recurrence"))
			return false
		}
		for _, d := range rec.Days {
			wd, ok := weekdays[strings.ToLower(strings.TrimSpace(d))]
			if !ok {
				s.writeProblem(c, withField(errValidation, "recurrence.days", fmt.Sprintf("%s is not a day (mon, tue, wed, thu, fri, sat, sun)", strconv.Quote(d))))
				return false
			}
			rep.Days = append(rep.Days, wd)
		}
		rep.Until = rec.Until
	}
	if rep.Until.IsZero() {
		s.writeProblem(c, withField(errValidation, "recurrence.until", "a recurring reservation needs until, the date its last occurrence starts before"))
		return false
	}
	until := rep.Until.UTC()
	res.RRule, res.RepeatUntil = rep.RRule(), &until
	return true
}

// toAPIReservation is a reservation as the API shows it, with its
// occurrences not over at now.
func (s *Server) toAPIReservation(r *store.Reservation, now time.Time) api.Reservation {
	loc := s.location()
	out := api.Reservation{ID: r.ID, Owner: ownerText(r.OwnerKind, r.Owner), Profile: r.Profile, Count: r.Count, Start: r.StartAt.In(loc),
		End: r.EndAt.In(loc), Note: r.Note, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, Timezone: loc.String(), Next: []api.Occurrence{}}
	if r.GPUKind != "" {
		out.GPU = &api.ReservationGPU{Kind: string(r.GPUKind), Model: r.GPUModel, Type: r.GPUType}
	}
	b := policy.Booking{Start: r.StartAt, End: r.EndAt}
	if r.RRule != "" {
		rep, err := policy.ParseRRule(r.RRule, r.RepeatUntil)
		out.Recurrence = &api.Recurrence{Freq: rep.Freq, RRule: r.RRule}
		if r.RepeatUntil != nil {
			out.Recurrence.Until = r.RepeatUntil.In(loc)
		}
		for _, d := range rep.Days {
			out.Recurrence.Days = append(out.Recurrence.Days, dayNames[d])
		}
		if err != nil {
			return out // stored by hand or by a newer gpuvmd: no occurrence known
		}
		b.Repeat = rep
	}
	to := now.Add(policy.MaxRepeatSpan + 24*time.Hour)
	for _, o := range b.Occurrences(now, to, loc) {
		if len(out.Next) == nextOccurrences {
			break
		}
		out.Next = append(out.Next, api.Occurrence{Start: o.Start.In(loc), End: o.End.In(loc)})
	}
	return out
}

// ownerText writes an owner as the API does: "ann", "group:students".
func ownerText(kind, name string) string {
	if kind == store.OwnerGroup {
		return "group:" + name
	}
	return name
}

// sees reports whether u may see a reservation: theirs, their group's,
// made by them, or u is an admin.
func sees(u *store.User, r *store.Reservation) bool {
	switch {
	case u.Admin, r.CreatedBy == u.Name:
		return true
	case r.OwnerKind == store.OwnerUser:
		return r.Owner == u.Name
	case r.OwnerKind == store.OwnerGroup:
		return slices.Contains(u.Groups, r.Owner)
	}
	return false
}

// findReservation finds the reservation of the path's id if the caller may
// see it; otherwise it answers 404.
func (s *Server) findReservation(c *gin.Context) (*store.Reservation, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		s.writeProblem(c, with(errNotFound, "no reservation "+strconv.Quote(c.Param("id"))))
		return nil, false
	}
	r, err := s.Store.GetReservation(c.Request.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !sees(user(c), r)) {
		s.writeProblem(c, with(errNotFound, fmt.Sprintf("no reservation %d", id)))
		return nil, false
	}
	if err != nil {
		s.writeProblem(c, err)
		return nil, false
	}
	return r, true
}

func (s *Server) getReservation(c *gin.Context) {
	r, ok := s.findReservation(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, s.toAPIReservation(r, s.Store.Now()))
}

func (s *Server) listReservations(c *gin.Context) {
	u := user(c)
	now := s.Store.Now()
	f := store.ReservationFilter{From: now}
	if !s.queryTime(c, "from", &f.From) || !s.queryTime(c, "to", &f.To) {
		return
	}
	if !f.To.IsZero() && !f.To.After(f.From) {
		s.writeProblem(c, withField(errValidation, "to", "to must be after from"))
		return
	}
	if owner := c.Query("owner"); owner != "" {
		f.OwnerKind, f.Owner = store.OwnerUser, owner
		if g, ok := strings.CutPrefix(owner, "group:"); ok {
			f.OwnerKind, f.Owner = store.OwnerGroup, g
		}
		if !u.Admin && !(f.OwnerKind == store.OwnerUser && f.Owner == u.Name) && !(f.OwnerKind == store.OwnerGroup && slices.Contains(u.Groups, f.Owner)) {
			s.writeProblem(c, withField(errForbidden, "owner", "you see your own reservations and your groups'"))
			return
		}
	}
	if !u.Admin {
		f.VisibleTo, f.VisibleGroups = u.Name, u.Groups
	}
	rs, err := s.Store.ListReservations(c.Request.Context(), f)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.ReservationList{Items: make([]api.Reservation, 0, len(rs))}
	for i := range rs {
		out.Items = append(out.Items, s.toAPIReservation(&rs[i], now))
	}
	c.JSON(http.StatusOK, out)
}

// queryTime reads the query parameter name, an RFC 3339 time, into *t when
// it is given (*t keeps its default when it is absent or empty), answering
// 422 naming the parameter when it is not such a time.
func (s *Server) queryTime(c *gin.Context, name string, t *time.Time) bool {
	v := c.Query(name)
	if v == "" {
		return true
	}
	parsed, err := time.Parse(time.RFC3339, v)
	if err != nil {
		s.writeProblem(c, withField(errValidation, name, fmt.Sprintf("%s must be an RFC 3339 time (2026-03-01T00:00:00Z), got %s", name, strconv.Quote(clip(v, 80)))))
		return false
	}
	*t = parsed
	return true
}

func (s *Server) deleteReservation(c *gin.Context) {
	r, ok := s.findReservation(c)
	if !ok {
		return
	}
	u := user(c)
	if !u.Admin && r.CreatedBy != u.Name && !(r.OwnerKind == store.OwnerUser && r.Owner == u.Name) {
		s.writeProblem(c, with(errForbidden, fmt.Sprintf("reservation %d is group %s's: who booked it (%s) or an admin may cancel it", r.ID, r.Owner, r.CreatedBy)))
		return
	}
	if err := s.Store.DeleteReservation(c.Request.Context(), r.ID); errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, with(errNotFound, fmt.Sprintf("no reservation %d", r.ID)))
		return
	} else if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("reservation cancelled", "reservation", r.ID, "by", u.Name, "owner", ownerText(r.OwnerKind, r.Owner))
	if s.Worker != nil {
		s.Worker.Wake() // VMs that waited for the capacity may start
	}
	c.Status(http.StatusNoContent)
}

// reservationCapacity answers GET /v1/reservations/capacity?profile=&from=
// &to=&step=: the free capacity of a profile per slot (Booker.Capacity) and
// the caller's booking rules, for a calendar to book from.
func (s *Server) reservationCapacity(c *gin.Context) {
	u := user(c)
	if s.Bookings == nil {
		s.writeProblem(c, with(errUnavailable, "gpuvmd runs without a scheduler to book GPUs on"))
		return
	}
	// The range first, then the profile: a refusal names the first
	// parameter that is wrong, in this order.
	for _, name := range []string{"step", "from", "to"} {
		if v, ok := c.GetQuery(name); ok && v == "" {
			s.writeProblem(c, withField(errValidation, name, name+" is empty: give it a value, or leave it out"))
			return
		}
	}
	now := s.Store.Now()
	step := defaultCapacityStep
	if v := c.Query("step"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minCapacityStep || d > maxCapacityStep {
			s.writeProblem(c, withField(errValidation, "step", fmt.Sprintf("step is a duration from %s to %s (30m, 1h), got %s", minCapacityStep, maxCapacityStep, strconv.Quote(v))))
			return
		}
		step = d
	}
	from, to := now.Truncate(step), time.Time{}
	if !s.queryTime(c, "from", &from) || !s.queryTime(c, "to", &to) {
		return
	}
	if to.IsZero() {
		to = from.Add(defaultCapacityRange)
	}
	switch {
	case !to.After(from):
		s.writeProblem(c, withField(errValidation, "to", fmt.Sprintf("to (%s) must be after from (%s)", to.Format(time.RFC3339), from.Format(time.RFC3339))))
		return
	case from.Sub(now) > policy.MaxBookingAhead || now.Sub(from) > policy.MaxBookingAhead:
		s.writeProblem(c, withField(errValidation, "from", fmt.Sprintf("from (%s) is more than %s from now", from.Format(time.RFC3339), config.FormatDuration(policy.MaxBookingAhead))))
		return
	case to.Sub(from) > time.Duration(maxCapacitySlots)*step:
		s.writeProblem(c, withField(errValidation, "to", fmt.Sprintf("from %s to %s is more than %d slots of %s", from.Format(time.RFC3339), to.Format(time.RFC3339), maxCapacitySlots, step)))
		return
	}
	res := &store.Reservation{OwnerKind: store.OwnerUser, Owner: u.Name}
	if !s.reservationNeed(c, api.CreateReservationRequest{Profile: c.Query("profile")}, res) {
		return
	}
	cfg := s.config()
	out := api.ReservationCapacity{Profile: res.Profile, From: from.In(s.location()), To: to.In(s.location()), StepSeconds: int64(step / time.Second), Timezone: s.location().String(),
		Rules: api.ReservationRules{MayBook: true}, Slots: []api.ReservationSlot{}}
	out.Most = defaultCapacityMost
	if !u.Admin {
		rules := cfg.Policy.Reservations
		if err := policy.MayBook(rules, policy.Owner{Kind: policy.OwnerUser, Name: u.Name}, u.Groups, res.Profile); err != nil {
			out.Rules.MayBook, out.Rules.WhyNot = false, say(c, joinedText(err))
		}
		out.Rules.NotOffered = rules == nil
		if rules != nil {
			out.Rules.MaxAheadSeconds, out.Rules.MaxLengthSeconds = int64(rules.MaxAhead/time.Second), int64(rules.MaxLength/time.Second)
			out.Rules.MaxVMs, out.Rules.MaxActive = rules.MaxVMs, rules.MaxActive
			if rules.MaxVMs > 0 {
				out.Most = min(rules.MaxVMs, maxReservationCount)
			}
		}
	}
	// The slots not over are counted, one that has begun from now.
	var counted []policy.Interval
	for t := from; t.Before(to); t = t.Add(step) {
		end := t.Add(step)
		if end.After(to) {
			end = to
		}
		loc := s.location()
		slot := api.ReservationSlot{Start: t.In(loc), End: end.In(loc)}
		if !slot.End.After(now) {
			slot.Past = true
		} else {
			counted = append(counted, policy.Interval{Start: later(t, now), End: slot.End})
		}
		out.Slots = append(out.Slots, slot)
	}
	if len(counted) > 0 {
		free, err := s.Bookings.Capacity(c.Request.Context(), res, counted, out.Most)
		var ce *policy.CapacityError
		switch {
		case errors.As(err, &ce) && ce.Never:
			out.Unavailable = ce.Cause
			free = make([]int, len(counted))
		case err != nil:
			s.writeProblem(c, fmt.Errorf("count the free capacity of %s: %w", res.Profile, err))
			return
		}
		past := len(out.Slots) - len(counted)
		for i, n := range free {
			out.Slots[past+i].Free = n
		}
	}
	c.JSON(http.StatusOK, out)
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
