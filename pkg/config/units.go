package config

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Sizes are written with a binary unit: "512MiB", "32GiB", "1.5TiB". Decimal
// units (GB) are refused rather than guessed, because "32GB" of VM memory is
// almost always meant as 32 GiB.
var sizeUnits = []struct {
	name  string
	shift uint
}{
	{"pib", 50}, {"tib", 40}, {"gib", 30}, {"mib", 20}, {"kib", 10}, {"b", 0},
}

// ParseSize parses a size with a binary unit into bytes.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size: write a number and a unit, e.g. 32GiB")
	}
	lower := strings.ToLower(t)
	for _, dec := range []string{"kb", "mb", "gb", "tb", "pb", "k", "m", "g", "t"} {
		if strings.HasSuffix(lower, dec) {
			n := strings.TrimSpace(t[:len(t)-len(dec)])
			return 0, fmt.Errorf("%q: sizes use binary units; write %s%ciB", s, n, strings.ToUpper(dec[:1])[0])
		}
	}
	for _, u := range sizeUnits {
		if !strings.HasSuffix(lower, u.name) {
			continue
		}
		num := strings.TrimSpace(t[:len(t)-len(u.name)])
		if num == "" || strings.ContainsAny(num, "eE_+-") || len(num) > 24 {
			return 0, fmt.Errorf("%q is not a size: write a number and a unit, e.g. 32GiB", s)
		}
		r, ok := new(big.Rat).SetString(num)
		if !ok {
			return 0, fmt.Errorf("%q is not a size: write a number and a unit, e.g. 32GiB", s)
		}
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), u.shift)))
		if !r.IsInt() {
			return 0, fmt.Errorf("%q is not a whole number of bytes", s)
		}
		if r.Num().BitLen() > 64 {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return r.Num().Uint64(), nil
	}
	if _, err := strconv.ParseFloat(t, 64); err == nil {
		return 0, fmt.Errorf("%q has no unit: write e.g. %sGiB or %sMiB", s, t, t)
	}
	return 0, fmt.Errorf("%q is not a size: write a number and a unit (B, KiB, MiB, GiB, TiB), e.g. 32GiB", s)
}

// FormatSize writes bytes in the largest binary unit that keeps the number
// short and exact where it can: 34359738368 → "32GiB", 1.5 TiB → "1.5TiB".
func FormatSize(b uint64) string {
	if b == 0 {
		return "0B"
	}
	for _, u := range sizeUnits {
		unit := uint64(1) << u.shift
		if b < unit || u.shift == 0 {
			continue
		}
		name := strings.ToUpper(u.name[:1]) + "iB"
		if b%unit == 0 {
			return fmt.Sprintf("%d%s", b/unit, name)
		}
		if (b*10)%unit == 0 && b < math.MaxUint64/10 {
			return fmt.Sprintf("%.1f%s", float64(b)/float64(unit), name)
		}
	}
	return fmt.Sprintf("%dB", b)
}

// maxDuration bounds every duration a file may write.
const maxDuration = 10 * 365 * 24 * time.Hour

var durationUnits = map[byte]time.Duration{
	's': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour,
}

// ParseDuration parses "8h", "90m", "3d", "2w", "1h30m" or "0". Each part is a
// whole number and a unit: s, m, h, d (24 hours), w (7 days).
func ParseDuration(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "0" {
		return 0, nil
	}
	if t == "" {
		return 0, fmt.Errorf("empty duration: write e.g. 8h, 90m or 3d")
	}
	var total time.Duration
	seen := map[byte]bool{}
	for t != "" {
		i := 0
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == 0 || i == len(t) {
			return 0, durationErr(s)
		}
		if i > 9 {
			return 0, fmt.Errorf("%q is too long a duration (at most 10 years)", s)
		}
		unit, ok := durationUnits[t[i]]
		if !ok || seen[t[i]] {
			return 0, durationErr(s)
		}
		seen[t[i]] = true
		n, _ := strconv.Atoi(t[:i])
		total += time.Duration(n) * unit
		if total > maxDuration {
			return 0, fmt.Errorf("%q is too long a duration (at most 10 years)", s)
		}
		t = t[i+1:]
	}
	return total, nil
}

func durationErr(s string) error {
	return fmt.Errorf("%q is not a duration: write a whole number and a unit (s, m, h, d, w), e.g. 8h, 90m, 3d or 1h30m", s)
}

// FormatDuration writes a duration the way files write them: "8h", "1h30m",
// "3d", "0".
func FormatDuration(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	var b strings.Builder
	for _, u := range []struct {
		c byte
		d time.Duration
	}{{'w', 7 * 24 * time.Hour}, {'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}, {'s', time.Second}} {
		if d >= u.d {
			fmt.Fprintf(&b, "%d%c", d/u.d, u.c)
			d %= u.d
		}
	}
	if b.Len() == 0 {
		return d.String()
	}
	return b.String()
}

// Weekdays, Monday first: gpuvm weeks start on Monday at 00:00.
var weekdayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

var longWeekdayNames = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

func parseWeekday(s string) (int, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i := range weekdayNames {
		if s == weekdayNames[i] || s == longWeekdayNames[i] {
			return i, true
		}
	}
	return 0, false
}

// ParseDays parses a set of weekdays: "mon-fri", "sat,sun", "fri-mon" (wraps
// over the weekend), "mon-wed,fri", "daily". The result is indexed Monday=0.
func ParseDays(s string) ([7]bool, error) {
	var days [7]bool
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "daily" || t == "mon-sun" {
		for i := range days {
			days[i] = true
		}
		return days, nil
	}
	if t == "" {
		return days, fmt.Errorf("no days: write e.g. mon-fri, sat,sun or daily")
	}
	for _, part := range strings.Split(t, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := parseWeekday(from)
		if !ok {
			return days, fmt.Errorf("%q is not a weekday (mon, tue, wed, thu, fri, sat, sun)", strings.TrimSpace(from))
		}
		b := a
		if isRange {
			if b, ok = parseWeekday(to); !ok {
				return days, fmt.Errorf("%q is not a weekday (mon, tue, wed, thu, fri, sat, sun)", strings.TrimSpace(to))
			}
		}
		for i := a; ; i = (i + 1) % 7 {
			if days[i] {
				return days, fmt.Errorf("%q names %s twice", s, weekdayNames[i])
			}
			days[i] = true
			if i == b {
				break
			}
		}
	}
	return days, nil
}

// parseClock parses "09:00" into minutes after midnight; "24:00" is allowed
// as the end of a day.
func parseClock(s string) (int, error) {
	t := strings.TrimSpace(s)
	h, m, ok := strings.Cut(t, ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not a time of day: write HH:MM, e.g. 09:00", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q is not a time of day: write HH:MM between 00:00 and 24:00", s)
	}
	return hh*60 + mm, nil
}

// ParseHours parses "09:00-18:00", or "18:00-09:00" which ends the next day.
// It returns the start in minutes after midnight and the length in minutes.
func ParseHours(s string) (start, length int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a range of hours: write e.g. 09:00-18:00 (or 18:00-09:00 across midnight)", s)
	}
	start, err = parseClock(a)
	if err != nil {
		return 0, 0, err
	}
	end, err := parseClock(b)
	if err != nil {
		return 0, 0, err
	}
	if start == 24*60 {
		return 0, 0, fmt.Errorf("%q starts at 24:00: write 00:00", s)
	}
	switch {
	case end > start:
		return start, end - start, nil
	case end == start:
		return 0, 0, fmt.Errorf("%q is empty: for a whole day write 00:00-24:00", s)
	default:
		return start, end + 24*60 - start, nil
	}
}

// parseWeekTime parses "fri 18:00" into minutes after Monday 00:00.
func parseWeekTime(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, fmt.Errorf("%q is not a time of the week: write a day and a time, e.g. \"fri 18:00\"", s)
	}
	d, ok := parseWeekday(f[0])
	if !ok {
		return 0, fmt.Errorf("%q is not a weekday (mon, tue, wed, thu, fri, sat, sun)", f[0])
	}
	m, err := parseClock(f[1])
	if err != nil {
		return 0, err
	}
	return d*24*60 + m, nil
}

// HumanDuration is d as people read it, rounded to its largest two units:
// "45s", "12m", "4h5m", "2d3h". It is for messages and tables; HCL and the
// API take FormatDuration's exact form.
func HumanDuration(d time.Duration) string {
	if d < 0 {
		return "-" + HumanDuration(-d)
	}
	if r := d.Round(time.Second); r < time.Minute {
		return fmt.Sprintf("%ds", r/time.Second)
	}
	if r := d.Round(time.Minute); r < 48*time.Hour {
		h, m := r/time.Hour, r%time.Hour/time.Minute
		switch {
		case h == 0:
			return fmt.Sprintf("%dm", m)
		case m == 0:
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	r := d.Round(time.Hour)
	days, h := r/(24*time.Hour), r%(24*time.Hour)/time.Hour
	if h == 0 {
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%dh", days, h)
}
