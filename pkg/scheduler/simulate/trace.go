package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// A trace is CSV with a header. Columns (any order):
//
//	submit       seconds from the trace's start, or an RFC 3339 time
//	user, group  who asks (group: the group charged; may be empty)
//	gpu_kind     mig, vgpu, passthrough or any
//	gpu_type     the MIG profile, the vGPU type, the board for passthrough
//	             (optional), or the memory for any ("20GiB")
//	count        devices (default 1)
//	hours        the lease
//	priority     a number, higher first (default 0)
//	preemptible  true or false (default false)
//
// and optionally: profile (replaces gpu_kind and gpu_type; needs the
// configuration), class (interactive or batch), runtime (hours the VM
// really runs, at most hours: the user ends it early), id. Lines starting
// with # are comments.

// DefaultStart is when a trace whose submit times are seconds starts: a
// Monday at midnight UTC.
var DefaultStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Limits on a trace.
const (
	MaxRows  = 2_000_000
	MaxHours = 24 * 31
)

// RowError is a bad row of a trace.
type RowError struct {
	Line int    `json:"line"`
	Err  string `json:"error"`
}

func (e RowError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Err) }

// Item is one request of a trace.
type Item struct {
	Request scheduler.Request
	// Runtime is how long the VM really runs (≤ the lease).
	Runtime time.Duration
	Line    int
}

// Trace is a parsed trace, sorted by submission.
type Trace struct {
	Items []Item
	// Bad are the rows skipped.
	Bad []RowError
	// Start is time zero of the trace.
	Start time.Time
}

// TraceOptions say how to read a trace.
type TraceOptions struct {
	// Start is time zero for seconds (DefaultStart when zero).
	Start time.Time
	// Config resolves the profile column (nil: the column is an error).
	Config *config.Config
	// SkipBad skips bad rows (listed in Trace.Bad); otherwise any bad row
	// fails the whole trace.
	SkipBad bool
}

var knownColumns = []string{"submit", "user", "group", "gpu_kind", "gpu_type", "count", "hours", "priority", "preemptible", "profile", "class", "runtime", "id"}

// ParseTrace reads a trace.
func ParseTrace(r io.Reader, o TraceOptions) (*Trace, error) {
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("the trace is empty: it needs a header line (%s)", strings.Join(knownColumns[:9], ","))
	}
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	var unknown []string
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("header: column %q twice", h)
		}
		col[h] = i
		if indexOf(knownColumns, h) < 0 {
			unknown = append(unknown, h)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("header: unknown columns %s (known: %s)", strings.Join(unknown, ", "), strings.Join(knownColumns, ", "))
	}
	for _, need := range []string{"submit", "user", "hours"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("header: no %q column (the columns are %s)", need, strings.Join(knownColumns[:9], ","))
		}
	}
	_, hasProfile := col["profile"]
	_, hasKind := col["gpu_kind"]
	if !hasProfile && !hasKind {
		return nil, fmt.Errorf("header: give gpu_kind and gpu_type, or profile")
	}
	t := &Trace{Start: o.Start}
	var bad []RowError
	ids := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line := 0
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			bad = append(bad, RowError{line, err.Error()})
			if len(bad) > 1000 && !o.SkipBad {
				break
			}
			continue
		}
		line, _ = cr.FieldPos(0) // only valid after a good read
		if len(t.Items)+len(bad) >= MaxRows {
			return nil, fmt.Errorf("the trace has more than %d rows", MaxRows)
		}
		field := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		if len(rec) != len(header) {
			bad = append(bad, RowError{line, fmt.Sprintf("%d fields; the header has %d", len(rec), len(header))})
			continue
		}
		it, err := parseRow(field, line, o)
		if err != nil {
			bad = append(bad, RowError{line, err.Error()})
			continue
		}
		if first, dup := ids[it.Request.ID]; dup {
			bad = append(bad, RowError{line, fmt.Sprintf("id %q is also on line %d", it.Request.ID, first)})
			continue
		}
		ids[it.Request.ID] = line
		t.Items = append(t.Items, it)
	}
	if len(bad) > 0 && !o.SkipBad {
		var errs []error
		for i, b := range bad {
			if i == 20 {
				errs = append(errs, fmt.Errorf("… and %d more bad rows", len(bad)-20))
				break
			}
			errs = append(errs, b)
		}
		return nil, fmt.Errorf("the trace has %d bad rows (--skip-bad-rows skips them):\n%w", len(bad), errors.Join(errs...))
	}
	t.Bad = bad
	if len(t.Items) == 0 {
		return nil, fmt.Errorf("the trace has no request")
	}
	sort.SliceStable(t.Items, func(i, j int) bool {
		return t.Items[i].Request.Submitted.Before(t.Items[j].Request.Submitted)
	})
	return t, nil
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

func parseRow(field func(string) string, line int, o TraceOptions) (Item, error) {
	it := Item{Line: line}
	r := &it.Request
	r.ID = field("id")
	if r.ID == "" {
		r.ID = fmt.Sprintf("L%d", line)
	}
	sub, off, err := parseWhen(field("submit"))
	if err != nil {
		return it, fmt.Errorf("submit: %v", err)
	}
	if off != nil {
		sub = o.Start.Add(*off)
	}
	r.Submitted = sub
	r.User = field("user")
	if r.User == "" {
		return it, fmt.Errorf("no user")
	}
	r.Group = field("group")
	if r.Group != "" {
		r.Groups = []string{r.Group}
	}
	hours, err := strconv.ParseFloat(field("hours"), 64)
	if err != nil || hours <= 0 || hours > MaxHours {
		return it, fmt.Errorf("hours %q is not a number of hours from 0 to %d", field("hours"), MaxHours)
	}
	r.Lease = time.Duration(hours * float64(time.Hour)).Round(time.Second)
	it.Runtime = r.Lease
	if s := field("runtime"); s != "" {
		rt, err := strconv.ParseFloat(s, 64)
		if err != nil || rt <= 0 || rt > hours {
			return it, fmt.Errorf("runtime %q is not a number of hours from 0 to the lease (%g)", s, hours)
		}
		it.Runtime = time.Duration(rt * float64(time.Hour)).Round(time.Second)
	}
	if s := field("priority"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < -1_000_000 || p > 1_000_000 {
			return it, fmt.Errorf("priority %q is not a whole number", s)
		}
		r.Priority = p
	}
	if s := field("preemptible"); s != "" {
		switch strings.ToLower(s) {
		case "true", "yes", "1":
			r.Preemptible = true
		case "false", "no", "0":
		default:
			return it, fmt.Errorf("preemptible %q is not true or false", s)
		}
	}
	count := 1
	if s := field("count"); s != "" {
		c, err := strconv.Atoi(s)
		if err != nil {
			return it, fmt.Errorf("count %q is not a whole number", s)
		}
		count = c
	}
	if name := field("profile"); name != "" {
		if o.Config == nil {
			return it, fmt.Errorf("profile %q: the profile column needs the configuration (--config)", name)
		}
		p, ok := o.Config.Profiles[name]
		if !ok {
			return it, fmt.Errorf("unknown profile %q (profiles: %s)", name, strings.Join(o.Config.ProfileNames(), ", "))
		}
		if p.GPU == nil {
			return it, fmt.Errorf("profile %q has no GPU", name)
		}
		r.Profile = name
		r.Need = policy.NeedFromProfile(p.GPU)
		if field("count") != "" {
			r.Need.Count = count
		}
		r.Class = p.Class
		r.Priority += p.Priority
	} else {
		n, err := needOf(field("gpu_kind"), field("gpu_type"), count)
		if err != nil {
			return it, err
		}
		r.Need = n
	}
	if err := r.Need.Validate(); err != nil {
		return it, err
	}
	if s := field("class"); s != "" {
		if s != config.ClassInteractive && s != config.ClassBatch {
			return it, fmt.Errorf("class %q is not interactive or batch", s)
		}
		r.Class = s
	}
	return it, nil
}
