package task

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Bounds of arrays, retries and the warning signal (docs/tasks.md).
const (
	// MaxArrayElements is the most elements an array has.
	MaxArrayElements = api.TaskMaxArrayElements
	// MaxArrayIndex is the highest index of an element.
	MaxArrayIndex = 999999
	// MaxArraySpec is the longest array spec, in bytes.
	MaxArraySpec = 64 << 10
	// MaxRetries is the most retries of a task.
	MaxRetries = api.TaskMaxRetries
	// maxRetryOn is the most ends retry_on lists.
	maxRetryOn = 256 + 2
	// DefaultWarnLead is the lead of a warning signal given without one
	// (Slurm's).
	DefaultWarnLead = 60 * time.Second
)

// Array is a parsed array spec: its indices, ascending, and its cap (0:
// none).
type Array struct {
	Indices []int
	Cap     int
}

// ParseArray parses an array spec: indices and ranges separated by
// commas ("0-99", "1,3,5-7"), then optionally "%CAP", the most elements
// that run at once. An index given twice, a range backwards, more than
// MaxArrayElements elements or an index beyond MaxArrayIndex is refused;
// nothing is expanded before its size is known.
func ParseArray(spec string) (Array, error) {
	if spec == "" {
		return Array{}, errors.New(`give indices such as "0-99", "1,3,5-7" or "0-99%4"`)
	}
	if len(spec) > MaxArraySpec {
		return Array{}, fmt.Errorf("at most %d bytes, not %d", MaxArraySpec, len(spec))
	}
	list, capText, hasCap := strings.Cut(spec, "%")
	var a Array
	if hasCap {
		n, err := arrayNumber(capText)
		if err != nil || n < 1 {
			return Array{}, fmt.Errorf("%q after %% is not a cap: a whole number, 1 or more", clip(capText))
		}
		a.Cap = n
	}
	type span struct{ lo, hi int }
	var spans []span
	total := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi := part, part
		if l, h, ok := strings.Cut(part, "-"); ok {
			lo, hi = l, h
		}
		l, err1 := arrayNumber(lo)
		h, err2 := arrayNumber(hi)
		switch {
		case err1 != nil || err2 != nil:
			return Array{}, fmt.Errorf("%q is not an index or a range of them (such as 5 or 0-99): indices are whole numbers from 0 to %d", clip(part), MaxArrayIndex)
		case h < l:
			return Array{}, fmt.Errorf("the range %q goes backwards", clip(part))
		}
		total += h - l + 1
		if total > MaxArrayElements {
			return Array{}, fmt.Errorf("at most %d elements", MaxArrayElements)
		}
		spans = append(spans, span{l, h})
	}
	a.Indices = make([]int, 0, total)
	for _, s := range spans {
		for i := s.lo; i <= s.hi; i++ {
			a.Indices = append(a.Indices, i)
		}
	}
	slices.Sort(a.Indices)
	for i := 1; i < len(a.Indices); i++ {
		if a.Indices[i] == a.Indices[i-1] {
			return Array{}, fmt.Errorf("the index %d is given twice", a.Indices[i])
		}
	}
	return a, nil
}

// arrayNumber is a whole number from 0 to MaxArrayIndex, digits only.
func arrayNumber(s string) (int, error) {
	if s == "" || len(s) > len(strconv.Itoa(MaxArrayIndex)) || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("not a number")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxArrayIndex {
		return 0, errors.New("out of range")
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ParseRetryOn checks the ends retry_on lists and gives them as stored:
// comma-separated, each once, in the order given.
func ParseRetryOn(list []string) (string, error) {
	if len(list) > maxRetryOn {
		return "", fmt.Errorf("at most %d ends", maxRetryOn)
	}
	var out []string
	for _, e := range list {
		e = strings.TrimSpace(e)
		switch e {
		case api.RetryNodeFail, api.RetryBootFail:
		default:
			n, err := strconv.Atoi(e)
			if err != nil || n < 0 || n > 255 || len(e) > 3 {
				return "", fmt.Errorf("%q is not an exit code (0 to 255), %q or %q", clip(e), api.RetryNodeFail, api.RetryBootFail)
			}
			e = strconv.Itoa(n)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return strings.Join(out, ","), nil
}

// RetryOnList is a stored retry_on as a list.
func RetryOnList(stored string) api.RetryOn {
	if stored == "" {
		return nil
	}
	return strings.Split(stored, ",")
}

// retries reports whether an attempt that ended in state with code and
// sig is one stored (ParseRetryOn) names: a failed command by its exit
// code, or 128+sig when a signal killed it; node_fail and boot_fail by
// name.
func retries(stored, state string, code, sig *int) bool {
	var want string
	switch state {
	case api.TaskNodeFail, api.TaskBootFail:
		want = state
	case api.TaskFailed:
		switch {
		case sig != nil && *sig != 0:
			want = strconv.Itoa(128 + *sig)
		case code != nil:
			want = strconv.Itoa(*code)
		default:
			return false
		}
	default:
		return false
	}
	return slices.Contains(RetryOnList(stored), want)
}

// WarnSignals are the signals a task may ask for before its time limit.
var WarnSignals = []string{"HUP", "INT", "QUIT", "ABRT", "USR1", "USR2", "ALRM", "TERM", "CONT", "WINCH", "XCPU", "URG"}

// ParseWarnSignal parses NAME[@LEAD] ("USR1@10m", "SIGUSR2@600"): a
// signal of WarnSignals, and a lead shorter than the time limit (a Go
// duration, or seconds as Slurm's --signal; DefaultWarnLead when left
// out).
func ParseWarnSignal(spec string, limit time.Duration) (string, time.Duration, error) {
	name, leadText, hasLead := strings.Cut(spec, "@")
	name = strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if !slices.Contains(WarnSignals, name) {
		return "", 0, fmt.Errorf("%q is not a signal a task may ask for: one of %s, then optionally @LEAD such as @10m", clip(spec), strings.Join(WarnSignals, " "))
	}
	lead := DefaultWarnLead
	if hasLead {
		var err error
		if n, e := strconv.ParseInt(leadText, 10, 64); e == nil && n >= 0 && n <= 1<<31 {
			lead = time.Duration(n) * time.Second
		} else if lead, err = time.ParseDuration(leadText); err != nil {
			return "", 0, fmt.Errorf("%q after @ is not a lead such as 10m or 600 (seconds)", clip(leadText))
		}
	}
	switch {
	case lead < time.Second:
		return "", 0, errors.New("the lead is at least 1s")
	case lead >= limit:
		return "", 0, fmt.Errorf("the lead %s is not shorter than the time limit %s", lead, limit)
	}
	return name, lead.Truncate(time.Second), nil
}
